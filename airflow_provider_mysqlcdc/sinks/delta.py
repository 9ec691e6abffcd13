"""The default sink: one Delta Lake table per source table, through delta-rs (``deltalake``).

Embedded, no JVM jars, no server; the root is a local path or an object-store URI. Tables live at
``<root>/<database>/<table>``. Concurrent chunk writers conflict on unpartitioned tables, so every
commit is retried: each operation is idempotent, so a retry is always safe.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from airflow_provider_mysqlcdc.cdc.errors import SchemaChangedError
from airflow_provider_mysqlcdc.cdc.source.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.sinks.arrow_rows import arrow_schema
from airflow_provider_mysqlcdc.sinks.base import Sink
from airflow_provider_mysqlcdc.sinks.changelog import CHANGELOG_SUFFIX

log = logging.getLogger(__name__)

T = TypeVar("T")

_MAX_ATTEMPTS = 50


def sql_identifier(name: str) -> str:
    """Quote a column name for delta-rs predicates (DataFusion SQL: double quotes)."""
    return '"' + name.replace('"', '""') + '"'


def sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def chunk_range_predicate(start: str | None, end: str | None) -> str | None:
    parts = []
    if start is not None:
        parts.append(f"_cdc_chunk >= {sql_string(start)}")
    if end is not None:
        parts.append(f"_cdc_chunk < {sql_string(end)}")
    return " AND ".join(parts) or None


class DeltaSink(Sink):
    def __init__(self, root: str, storage_options: dict[str, str] | None = None):
        self.root = root.rstrip("/")
        self.storage_options = storage_options

    def table_uri(self, table_id: TableId) -> str:
        return f"{self.root}/{_path_part(table_id.database)}/{_path_part(table_id.table)}"

    # --- schema ----------------------------------------------------------------------------------
    def prepare(self, schema: TableSchema) -> None:
        uri = self.table_uri(schema.table_id)
        target = arrow_schema(schema)
        try:
            table = DeltaTable(uri, storage_options=self.storage_options)
        except TableNotFoundError:
            try:
                DeltaTable.create(uri, target, mode="ignore", storage_options=self.storage_options,
                                  configuration={"delta.appendOnly": "false"})
            except CommitFailedError:
                pass  # created concurrently by another writer
            return
        self._check_evolution(schema.table_id, pa.schema(table.schema().to_arrow()), target)

    def _check_evolution(self, table_id: TableId, current: pa.Schema, target: pa.Schema) -> None:
        """Added columns are merged in on the next write; a changed type is refused clearly."""
        for field in target:
            if field.name in current.names and not current.field(field.name).type.equals(field.type):
                old = current.field(field.name).type
                if not _safe_widening(old, field.type):
                    raise SchemaChangedError(
                        f"Column {field.name!r} of {table_id} changed from {old} to {field.type} in the source; "
                        "the Delta table cannot follow that safely. Re-snapshot the table into a new sink "
                        "location (or drop its Delta table) to pick up the new type."
                    )

    # --- writes ----------------------------------------------------------------------------------
    def replace_range(self, table_id: TableId, start: str | None, end: str | None, rows: pa.Table, *,
                      app_id: str | None = None, batch_id: int | None = None) -> bool:
        uri = self.table_uri(table_id)
        predicate = chunk_range_predicate(start, end)
        transactions = [Transaction(app_id, batch_id)] if app_id is not None and batch_id is not None else []

        def write() -> bool:
            table = self._open(uri)
            if transactions and _already_committed(table, app_id, batch_id):
                return False
            write_deltalake(uri, _with_dropped_columns(rows, table), mode="overwrite", predicate=predicate,
                            schema_mode="merge", storage_options=self.storage_options,
                            commit_properties=CommitProperties(app_transactions=transactions) if transactions else None)
            return True

        return _retry_conflicts(write, f"replace {table_id} [{start}, {end})")

    def merge_changes(self, schema: TableSchema, changes: pa.Table, *, app_id: str, batch_id: int) -> bool:
        uri = self.table_uri(schema.table_id)

        def merge() -> bool:
            table = DeltaTable(uri, storage_options=self.storage_options)
            if _already_committed(table, app_id, batch_id):
                return False
            keys = " AND ".join(f"t.{sql_identifier(k)} = s.{sql_identifier(k)}" for k in schema.key_columns)
            (
                table.merge(changes, predicate=keys, source_alias="s", target_alias="t", merge_schema=True,
                            commit_properties=CommitProperties(app_transactions=[Transaction(app_id, batch_id)]))
                .when_matched_delete(predicate="s._cdc_op = 'd' AND s._cdc_version > t._cdc_version")
                .when_matched_update_all(predicate="s._cdc_op <> 'd' AND s._cdc_version > t._cdc_version")
                .when_not_matched_insert_all(predicate="s._cdc_op <> 'd'")
                .execute()
            )
            return True

        return _retry_conflicts(merge, f"merge batch {batch_id} into {schema.table_id}")

    def truncate_before(self, table_id: TableId, version: int, *, app_id: str, batch_id: int) -> bool:
        """Delete every row older than ``version`` (a TRUNCATE at that offset) once per ``(app_id, batch_id)``."""
        uri = self.table_uri(table_id)

        def delete_older() -> bool:
            table = DeltaTable(uri, storage_options=self.storage_options)
            if _already_committed(table, app_id, batch_id):
                return False
            table.delete(f"_cdc_version < {int(version)}",
                         commit_properties=CommitProperties(app_transactions=[Transaction(app_id, batch_id)]))
            return True

        return _retry_conflicts(delete_older, f"truncate {table_id} before version {version}")

    def append_changelog(self, table_id: TableId, changes: pa.Table, *, app_id: str, batch_id: int) -> bool:
        """Append change rows to ``<table>__changelog`` once per ``(app_id, batch_id)``."""
        uri = self.table_uri(table_id) + CHANGELOG_SUFFIX

        def append() -> bool:
            if _already_committed(self._open(uri), app_id, batch_id):
                return False
            write_deltalake(uri, changes, mode="append", storage_options=self.storage_options,
                            commit_properties=CommitProperties(app_transactions=[Transaction(app_id, batch_id)]))
            return True

        return _retry_conflicts(append, f"changelog batch {batch_id} of {table_id}")

    def applied_batch(self, table_id: TableId, app_id: str) -> int | None:
        table = self._open(self.table_uri(table_id))
        return table.transaction_version(app_id) if table is not None else None

    def _open(self, uri: str) -> DeltaTable | None:
        try:
            return DeltaTable(uri, storage_options=self.storage_options)
        except TableNotFoundError:
            return None

    def column_names(self, table_id: TableId) -> list[str]:
        """The table's column names (metadata columns included); none for a table not written yet."""
        table = self._open(self.table_uri(table_id))
        return [] if table is None else [f.name for f in table.schema().fields]

    def read(self, table_id: TableId) -> pa.Table:
        return DeltaTable(self.table_uri(table_id), storage_options=self.storage_options).to_pyarrow_table()


def _with_dropped_columns(rows: pa.Table, table: DeltaTable | None) -> pa.Table:
    """``rows`` plus, as NULL, the table's columns they lack (columns the source dropped or renamed
    since they were added): a range overwrite must carry every column of the table."""
    if table is None:
        return rows
    missing = [f for f in pa.schema(table.schema().to_arrow()) if f.name not in rows.column_names]
    for field in missing:
        rows = rows.append_column(field.with_nullable(True), pa.nulls(rows.num_rows, field.type))
    return rows


def _already_committed(table: DeltaTable | None, app_id: str, batch_id: int) -> bool:
    """True when ``table`` records ``batch_id`` (or a later batch) of ``app_id``: the idempotency check."""
    done = table.transaction_version(app_id) if table is not None else None
    return done is not None and done >= batch_id


def _retry_conflicts(operation: Callable[[], T], what: str) -> T:
    for attempt in range(1, _MAX_ATTEMPTS + 1):
        try:
            return operation()
        except CommitFailedError as exc:
            if attempt == _MAX_ATTEMPTS:
                raise
            delay = min(2.0, 0.05 * attempt) * (0.5 + random.random())
            log.info("%s: concurrent commit (%s), retrying in %.2fs", what, exc, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def _safe_widening(old: pa.DataType, new: pa.DataType) -> bool:
    order = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
    if old in order and new in order:
        return order.index(new) >= order.index(old)
    return pa.types.is_string(old) and pa.types.is_string(new)


def _path_part(name: str) -> str:
    return name.replace("/", "%2F")


