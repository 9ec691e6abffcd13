"""An in-memory reference sink: split outputs + the filtered binlog, applied in order.

The demo and the invariant tests use it to show that what the CDC core captured equals the source.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.cdc.binlog.split_filter import FinishedSplitFilter
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, SchemaChangeEvent
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.reading.split_reader import SplitReadResult
from airflow_provider_mysqlcdc.cdc.records.apply import KeyedRows
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.cdc.records.values import ValueNormalizer, select_list
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.base import Sink

Rows = dict[tuple[Any, ...], dict[str, Any]]


def source_rows(source: SourceConfig, schema: TableSchema) -> Rows:
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
    if len(keyed) != len(rows):
        raise AssertionError(f"{schema.table_id}: source keys collide in Python; the row identity is broken")
    return keyed


@dataclass
class ReplayResult:
    tables: dict[TableId, KeyedRows]
    emitted: int = 0
    skipped: int = 0
    schema_changes: list[SchemaChangeEvent] = field(default_factory=list)


def read_binlog(source: SourceConfig, schemas: Mapping[TableId, TableSchema], start: BinlogOffset,
                end: BinlogOffset) -> list[ChangeRecord | SchemaChangeEvent]:
    """Read the binlog once, for several replays (changes before a replay's start are filtered out)."""
    reader = BinlogReader.for_schemas(source, list(schemas.values()), start=start, end=end)
    return [item for item in reader if isinstance(item, (ChangeRecord, SchemaChangeEvent))]


def replay(source: SourceConfig, schemas: Mapping[TableId, TableSchema],
           split_results: Mapping[TableId, Iterable[SplitReadResult]], end: BinlogOffset,
           batch_size: int = 1000, items: Iterable[object] | None = None) -> ReplayResult:
    """Load every split's rows, then apply the finished-split-filtered binlog up to ``end``.

    ``items`` may hold the binlog already read (``read_binlog``) from any offset before the
    smallest high watermark; otherwise the binlog is read from there.
    """
    result = ReplayResult({t: KeyedRows(schemas[t].key_columns) for t in schemas})
    finished = []
    for table_id, results in split_results.items():
        state = result.tables[table_id]
        for split_result in results:
            finished.append(split_result.finished)
            for row in split_result.rows:
                if state.key_of(row) in state.rows:
                    raise AssertionError(f"row {state.key_of(row)} of {table_id} is in two splits")
                state.put(row)
    orderings = {f.split.table_id: KeyOrdering(schemas[f.split.table_id].column(f.split.chunk_key), source.connect)
                 for f in finished}
    split_filter = FinishedSplitFilter(finished, orderings)
    if items is None:
        items = BinlogReader.for_schemas(source, list(schemas.values()), start=split_filter.start_offset(), end=end)
    batch: list[ChangeRecord] = []

    def flush() -> None:
        for record, emit in zip(batch, split_filter.filter(batch)):
            if emit:
                result.tables[record.table_id].apply(record)
                result.emitted += 1
            else:
                result.skipped += 1
        batch.clear()

    try:
        for item in items:
            if isinstance(item, ChangeRecord):
                batch.append(item)
                if len(batch) >= batch_size:
                    flush()
            elif isinstance(item, SchemaChangeEvent):
                result.schema_changes.append(item)
        flush()
    finally:
        for ordering in orderings.values():
            ordering.close()
    return result


def sink_rows(lake: object, schema: TableSchema, storage_options: dict[str, str] | None = None, *,
              sink_format: str = "delta") -> Rows:
    """A sink table's rows by key; a key present twice fails (a dict would hide it). Of a shard of a
    routed table (sinks/routing.py): the rows of that shard. ``storage_options``: delta-rs's, for a
    lake on an object store; ``sink_format``: the table format (an Iceberg table in the embedded catalog
    of a local lake, or the catalog installed in this process)."""
    import pyarrow.compute as pc

    from airflow_provider_mysqlcdc.sinks.arrow_rows import SHARD_COLUMNS, arrow_to_rows
    from airflow_provider_mysqlcdc.sinks.factory import open_sink
    from airflow_provider_mysqlcdc.sinks.routing import sink_target

    target = sink_target(schema)
    table = open_sink(SinkSpec(str(lake), sink_format), storage_options).read(target.table_id)
    if target.shard:
        database, name = (table.column(c) for c in SHARD_COLUMNS)
        table = table.filter(pc.and_(pc.equal(database, schema.table_id.database), pc.equal(name, schema.table_id.table)))
    rows = arrow_to_rows(table, schema)
    by_key = {schema.key_of(r): r for r in rows}
    if len(by_key) != len(rows):
        raise AssertionError(f"{schema.table_id}: {len(rows) - len(by_key)} duplicated key(s) in the {sink_format} table")
    return by_key


def read_delta(uri: str, *, version: int | None = None, columns: list[str] | None = None,
               storage_options: dict[str, str] | None = None) -> pa.Table:
    """A Delta table's rows (at ``version``; of ``columns``) as delta-rs's own engine reads them,
    deletion vectors applied (its pyarrow dataset refuses a table that has them), in the table's
    column types."""
    from deltalake import DeltaTable

    table = DeltaTable(uri, version=version, storage_options=storage_options)
    schema = pa.schema(table.schema().to_arrow())
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    return pa.table(table.scan(columns=columns)).cast(schema)


def duckdb_with(*extensions: str) -> Any:
    """A DuckDB connection with ``extensions`` (``"delta"``, ``"iceberg"``, ``"avro"``, ``"httpfs"``)
    loaded from their PyPI wheels (``duckdb_extension_<name>``): nothing is downloaded. The caller
    closes it."""
    import glob
    import importlib
    import os

    import duckdb

    con = duckdb.connect()
    for name in extensions:
        module = importlib.import_module(f"duckdb_extension_{name}")
        found = glob.glob(os.path.join(os.path.dirname(module.__file__), "extensions", "*", "*.duckdb_extension"))
        con.execute(f"LOAD '{found[0]}'")
    return con


def sink_commits(sink: Sink, table_id: TableId, kind: str) -> int:
    """How many commits of ``kind`` the sink table holds, in either format: ``"merge"`` (a stream
    batch's merge) or ``"cluster"`` (a clustering, sinks/clustering.py). 0 without a table."""
    from airflow_provider_mysqlcdc.sinks.iceberg.maintenance import OPERATION_SUMMARY
    from airflow_provider_mysqlcdc.sinks.iceberg.sink import IcebergSink

    if isinstance(sink, IcebergSink):
        table = sink.open_table(table_id)
        return 0 if table is None else sum(
            1 for s in table.snapshots() if s.summary.additional_properties.get(OPERATION_SUMMARY) == kind)
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from airflow_provider_mysqlcdc.sinks.delta.clustering import CLUSTERING_COMMIT

    try:
        history = DeltaTable(sink.table_uri(table_id), storage_options=sink.storage_options).history()
    except TableNotFoundError:
        return 0
    if kind == "cluster":
        return sum(CLUSTERING_COMMIT in commit for commit in history)
    return sum(commit["operation"] == kind.upper() for commit in history)


def differences(expected: Rows, actual: Rows) -> str | None:
    """None when equal, else a short description of what differs."""
    missing = [k for k in expected if k not in actual]
    extra = [k for k in actual if k not in expected]
    different = [k for k in expected if k in actual and expected[k] != actual[k]]
    if not (missing or extra or different):
        return None
    return (f"{len(missing)} missing (e.g. {missing[:3]}), {len(extra)} extra (e.g. {extra[:3]}), "
            f"{len(different)} different (e.g. {[(expected[k], actual[k]) for k in different[:2]]})")


def explain(table_id: TableId, schema: TableSchema, keys: Iterable[tuple[Any, ...]],
            chosen: Iterable[SplitReadResult], items: Iterable[object], chunk_key: str) -> str:
    """Evidence for an invariant failure: per key, the chosen split holding it and every binlog change."""
    from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering

    lines = []
    chosen = list(chosen)
    items = [i for i in items if isinstance(i, ChangeRecord) and i.table_id == table_id]
    ordering = KeyOrdering(schema.column(chunk_key))
    for key in list(keys)[:3]:
        value = dict(zip(schema.key_columns, key))[chunk_key] if chunk_key in schema.key_columns else None
        lines.append(f"key {key}:")
        for result in chosen:
            split = result.finished.split
            if not ordering.needs_database and value is not None and \
                    (split.start is None or split.start <= value) and (split.end is None or value < split.end):
                present = any(schema.key_of(r) == key for r in result.rows)
                lines.append(f"  split {split.index} [{split.start}, {split.end}) LW {result.finished.low_watermark} "
                             f"HW {result.finished.high_watermark} merged {result.finished.binlog_events_merged} "
                             f"row in output: {present}")
        for record in items:
            if schema.key_of(record.image) == key:
                lines.append(f"  {record.op.name} at {record.offset} row {record.row} part {record.part} gtid {record.gtid}")
    return "\n".join(lines)
