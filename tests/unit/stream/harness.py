"""A pipeline for the stream's rules without Spark or a server: a real state location and real sink
tables in a temporary folder (Delta, or Iceberg in an embedded catalog: conftest.py runs every test
on each format), the source's answers from tables of the test's own (``TestTables``), and batches of
items built from change records as the executors build them."""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import (
    ChangeRecord,
    Operation,
    SchemaChangeEvent,
    TableChange,
    TableEventKind,
)
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.change_columns import TableChanges, change_columns
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter
from airflow_provider_mysqlcdc.state.drift import read_drift
from airflow_provider_mysqlcdc.state.registry import PipelineState, captured_tables
from airflow_provider_mysqlcdc.state.schemas import KnownSchemas
from airflow_provider_mysqlcdc.stream.applier import AppliedBatch, BatchApplier
from airflow_provider_mysqlcdc.stream.events import BatchItem
from airflow_provider_mysqlcdc.stream.tables import Defaults
from devtools.verify import sink_commits

T, U = TableId("shop", "t"), TableId("shop", "u")
#: the sink format of the test running, and its merge mode after a slash (set by conftest.py's fixture)
SINK_FORMAT = types.SimpleNamespace(value="delta")
#: every sink format, and each merge mode of a format that has several (conftest.py runs each test on each)
SINK_VARIANTS = ["delta/merge-on-read", "delta/copy-on-write", "iceberg/merge-on-read", "iceberg/copy-on-write"]


def sink_spec(root: str) -> SinkSpec:
    """The spec of the sink format (and merge mode) of the test running, at ``root``."""
    name, _, mode = SINK_FORMAT.value.partition("/")
    return SinkSpec(root, name, merge_mode=mode or None)


def off(n: int) -> BinlogOffset:
    """The n-th event's offset in one binlog file."""
    return BinlogOffset("bin.000001", 1000 + 100 * n)


def column(name: str, data_type: str = "int", *, nullable: bool = True, column_type: str | None = None,
           **kwargs: Any) -> Column:
    column_type = column_type or {"int": "int(11)", "bigint": "bigint(20)", "varchar": "varchar(20)"}[data_type]
    text = {"charset": "utf8mb4", "collation": "utf8mb4_bin"} if data_type == "varchar" else {}
    return Column(name, data_type, column_type, nullable, **{**text, **kwargs})


def schema(table: TableId, *extra: Column, key: tuple[str, ...] = ("id",)) -> TableSchema:
    """``id INT`` (the key), ``v VARCHAR(20)``, then ``extra``."""
    return TableSchema(table, (column("id", nullable=False), column("v", "varchar"), *extra), key)


@dataclass
class TestTables:
    """The source as the rules ask it: the server's current schemas, the added columns' defaults."""

    __test__ = False  # not a pytest class

    server: dict[TableId, TableSchema]
    known: KnownSchemas
    defaults: Defaults = None
    asked_defaults: list[tuple[str, ...]] = field(default_factory=list)
    #: the offsets after which a later DDL of a table lies before the head (the server's schema is past them)
    later_ddl: set[tuple[TableId, BinlogOffset]] = field(default_factory=set)

    def schemas_for_stream(self, chunk_keys: dict[TableId, str]) -> list[TableSchema]:
        return [self.known.stream_schema(self.server[t], k) for t, k in chunk_keys.items()]

    def current_schemas(self, tables: list[TableId]) -> list[TableSchema]:
        return [self.server[t] for t in tables]

    def added_defaults(self, schema: TableSchema, columns: tuple[str, ...], offset: BinlogOffset) -> Defaults:
        self.asked_defaults.append(columns)
        return self.defaults

    def schema_is_after(self, table_id: TableId, offset: BinlogOffset) -> bool:
        return (table_id, offset) not in self.later_ddl

    def ordering(self, column: Column) -> KeyOrdering:
        return KeyOrdering(column)  # integer keys: no server needed

    def head(self) -> BinlogOffset:
        return off(10_000)


class Pipeline:
    """Tables captured by a snapshot read at ``off(0)``, a stream's rules applying batches to them."""

    def __init__(self, tmp: Path, *schemas: TableSchema, max_apply_changes: int = 100_000):
        self.state = PipelineState(str(tmp / "state"))
        self.sink = open_sink(sink_spec(str(tmp / "lake")))
        self.known = KnownSchemas(self.state)
        for planned in schemas:  # as the plan remembers them
            self.known.remember(planned)
        self.tables = TestTables({s.table_id: s for s in schemas}, self.known)
        self.job = StreamJob(state=self.state.location, sink=sink_spec(str(tmp / "lake")), app_id="test-stream", max_apply_changes=max_apply_changes)
        self.splits = [FinishedSplit(SnapshotSplit(s.table_id, 0, "id"), off(0)) for s in schemas]
        self.generation = self.state.commit(captured_tables(self.splits)).number
        self.applier = self.new_applier()
        self.next_batch = 0

    def new_applier(self) -> BatchApplier:
        """The rules as a restarted stream has them: nothing in memory, all in the state and the sink."""
        self.known = self.tables.known = KnownSchemas(self.state)
        return BatchApplier(self.job, self.sink, self.state, self.tables, self.known)

    def snapshot(self, table: TableId, *rows: dict[str, Any]) -> None:
        """The snapshot's rows of ``table`` (its one split, read as of ``off(0)``)."""
        schema = self.tables.server[table]
        writer = SinkWriter(self.sink, schema, "id", self.tables.ordering(schema.column("id")))
        self.sink.prepare(schema)
        writer.write_split(FinishedSplit(SnapshotSplit(table, 0, "id"), off(0)), list(rows))

    def batch(self, *items: BatchItem, batch_id: int | None = None) -> AppliedBatch:
        """Apply ``items`` as the next micro-batch (or as batch ``batch_id`` again: a replay)."""
        if batch_id is None:
            batch_id, self.next_batch = self.next_batch, self.next_batch + 1
        return self.applier.apply_batch(self.generation, items, batch_id)

    def rows(self, table: TableId) -> dict[Any, dict[str, Any]]:
        """The sink table's rows by key, in the server's columns (None: not in the sink table yet)."""
        names = [c.name for c in self.tables.server[table].columns]
        data = self.sink.read(table)
        return {r["id"]: {k: r.get(k) for k in names} for r in data.to_pylist()}

    def merges(self, table: TableId) -> int:
        """How many merge commits the sink table holds."""
        return sink_commits(self.sink, table, "merge")

    def drift(self, table: TableId) -> list[tuple[TableEventKind, BinlogOffset]]:
        return [(e.kind, e.offset) for e in read_drift(self.state).get(table, [])]

    def alter(self, table: TableId, new: TableSchema) -> None:
        """The server's schema of ``table`` is now ``new``."""
        self.tables.server[table] = new


def changes(table_schema: TableSchema, *records: ChangeRecord) -> TableChanges:
    """A run of one table's changes, as an executor sends it: written under ``table_schema`` (the
    columns their table map gave them), which types them and travels with them."""
    return TableChanges(table_schema.table_id, change_columns(table_schema, list(records)), table_schema)


def insert(table: TableId, n: int, /, *, part: int = 0, **row: Any) -> ChangeRecord:
    return ChangeRecord(Operation.CREATE, table, None, row, off(n), part=part, timestamp_ms=1_700_000_000_000 + n)


def update(table: TableId, n: int, before: dict[str, Any], after: dict[str, Any]) -> ChangeRecord:
    return ChangeRecord(Operation.UPDATE, table, before, after, off(n), timestamp_ms=1_700_000_000_000 + n)


def delete(table: TableId, n: int, /, *, part: int = 0, **row: Any) -> ChangeRecord:
    return ChangeRecord(Operation.DELETE, table, row, None, off(n), part=part, timestamp_ms=1_700_000_000_000 + n)


def ddl(n: int, statement: str, *changes: TableChange) -> SchemaChangeEvent:
    return SchemaChangeEvent("shop", statement, off(n), tuple(changes), timestamp_ms=1_700_000_000_000 + n)


def table_change(kind: TableEventKind, table: TableId, **kwargs: Any) -> TableChange:
    return TableChange(kind, table, **kwargs)


def with_columns(table_schema: TableSchema, *columns: Column, dropped: tuple[str, ...] = ()) -> TableSchema:
    kept = tuple(c for c in table_schema.columns if c.name not in dropped)
    return dataclasses.replace(table_schema, columns=kept + columns, _by_name={})


def staged_rows(table_schema: TableSchema, *rows: dict[str, Any]) -> pa.Table:
    names = [c.name for c in table_schema.columns]
    return pa.Table.from_pylist([{n: r.get(n) for n in names} for r in rows])
