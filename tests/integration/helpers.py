"""Helpers for integration tests: reading a table's current rows, replaying the binlog phase."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.cdc.binlog.split_filter import FinishedSplitFilter
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, SchemaChangeEvent
from airflow_provider_mysqlcdc.cdc.reading.split_reader import SplitReadResult
from airflow_provider_mysqlcdc.cdc.records.apply import KeyedRows
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.cdc.records.values import ValueNormalizer, select_list
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.schema import TableId, TableSchema


def source_rows(source: SourceConfig, schema: TableSchema) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The table as it is now, normalised like the CDC paths, keyed by row key."""
    normalizer = ValueNormalizer(schema)
    conn = source.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT {select_list(schema.columns)} FROM {schema.table_id.quoted}")
            rows = [normalizer.row_from_tuple(schema.column_names, r) for r in cur.fetchall()]
    finally:
        conn.close()
    keyed = {schema.key_of(r): r for r in rows}
    assert len(keyed) == len(rows), "source keys are not unique in Python: the key identity is broken"
    return keyed


def replay(
    source: SourceConfig,
    schemas: dict[TableId, TableSchema],
    split_results: dict[TableId, list[SplitReadResult]],
    end: BinlogOffset,
) -> tuple[dict[TableId, KeyedRows], int, list[SchemaChangeEvent]]:
    """Split outputs + the filtered binlog from the smallest high watermark to ``end``, applied in order."""
    state = {t: KeyedRows(schemas[t].key_columns) for t in schemas}
    for table_id, results in split_results.items():
        for result in results:
            for row in result.rows:
                key = state[table_id].key_of(row)
                assert key not in state[table_id].rows, f"row {key} of {table_id} is in two splits"
                state[table_id].put(row)
    orderings = {t: KeyOrdering(schemas[t].column(results[0].finished.split.chunk_key), source.connect)
                 for t, results in split_results.items()}
    split_filter = FinishedSplitFilter([r.finished for rs in split_results.values() for r in rs], orderings)
    reader = BinlogReader.for_schemas(source, list(schemas.values()), start=split_filter.start_offset(), end=end)
    emitted = 0
    ddl: list[SchemaChangeEvent] = []
    batch: list[ChangeRecord] = []

    def flush() -> None:
        nonlocal emitted
        for record, emit in zip(batch, split_filter.filter(batch)):
            if emit:
                state[record.table_id].apply(record)
                emitted += 1
        batch.clear()

    for item in reader:
        if isinstance(item, ChangeRecord):
            batch.append(item)
            if len(batch) >= 1000:
                flush()
        elif isinstance(item, SchemaChangeEvent):
            ddl.append(item)
    flush()
    for o in orderings.values():
        o.close()
    return state, emitted, ddl


def assert_same_rows(table_id: TableId, expected: dict[tuple[Any, ...], dict[str, Any]],
                     actual: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    missing = [k for k in expected if k not in actual]
    extra = [k for k in actual if k not in expected]
    different = [k for k in expected if k in actual and expected[k] != actual[k]]
    assert not (missing or extra or different), (
        f"{table_id}: {len(missing)} missing (e.g. {missing[:3]}), {len(extra)} extra (e.g. {extra[:3]}), "
        f"{len(different)} different (e.g. {[(expected[k], actual[k]) for k in different[:2]]})"
    )


def all_rows(results: Iterable[SplitReadResult]) -> int:
    return sum(len(r.rows) for r in results)
