"""Assertions shared by the integration tests."""

from __future__ import annotations

from collections.abc import Callable

from airflow_provider_mysqlcdc.cdc.source.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.devtools.verify import Rows, differences
from airflow_provider_mysqlcdc.sinks.arrow_rows import arrow_to_rows
from airflow_provider_mysqlcdc.sinks.delta import DeltaSink


def assert_same_rows(table_id: TableId, expected: Rows, actual: Rows,
                     evidence: Callable[[], str] | None = None) -> None:
    problem = differences(expected, actual)
    if problem is not None:
        raise AssertionError(f"{table_id}: {problem}" + ("\n" + evidence() if evidence else ""))


def delta_rows(lake: object, schema: TableSchema) -> Rows:
    """A Delta table's rows by key; a key present twice fails (a dict would hide it)."""
    rows = arrow_to_rows(DeltaSink(str(lake)).read(schema.table_id), schema)
    by_key = {schema.key_of(r): r for r in rows}
    assert len(by_key) == len(rows), f"{schema.table_id}: {len(rows) - len(by_key)} duplicated key(s) in Delta"
    return by_key
