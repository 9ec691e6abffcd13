"""Assertions shared by the integration tests."""

from __future__ import annotations

from collections.abc import Callable

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
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


def transactions_between(source: SourceConfig, start: BinlogOffset, end: BinlogOffset) -> int:
    """How many transactions (of any table) the binlog holds in (start, end].

    Stream offsets are compared with the server head this way, not byte for byte: MariaDB writes
    a Binlog_checkpoint event asynchronously after a rotation, so the head can move by a few bytes
    with no transaction behind it."""
    from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader, TransactionCommitted

    if end <= start:
        return 0
    reader = BinlogReader(source, start=start, end=end, key_columns={})
    return sum(isinstance(item, TransactionCommitted) for item in reader)
