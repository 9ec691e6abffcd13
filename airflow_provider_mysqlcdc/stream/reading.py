"""What the stream reads of the binlog, apart from Spark: a range of it, an activation, a purge gap,
each as items in binlog order, the row changes already typed for the sink (``ReadItem``).

spark/binlog_source.py plans a micro-batch's ranges and runs these reads on the executors (one
partition each); its rows carry the items to the driver (spark/batch_rows.py). Nothing here knows
Spark, so a reader in the driver can run the same reads and hand the items straight to the
applier (applier.py).

- ``BinlogReading.read_range``: the changes, DDL and table failures of ``(read_from, end]`` under a
  generation's tables and finished-split filter, then the read's timings (``PieceRead``).
- ``BinlogReading.read_activation``: what activating a newer generation reads and decides
  (activation.py): the tables announced, the tables a purge of the re-read cost, the re-read
  changes of the splits behind the batch's start, the staged splits ready.
- ``purged_gap``: the start of a batch was purged (``on_binlog_purged="resnapshot"``).

A change that cannot be decoded or typed because of its table's data or schema does not fail the
read: the table's ``TableFailed`` takes its place (``ChangeTyping``), and the read sends none of
that table's changes after it.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.cdc.binlog.split_filter import FinishedSplitFilter
from airflow_provider_mysqlcdc.cdc.binlog.table_map import schema_as_of
from airflow_provider_mysqlcdc.cdc.errors import InternalError, describe_error, is_table_fault
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import (
    BinlogPurged,
    ChangeRecord,
    ChangeRows,
    SchemaChangeEvent,
    TableFailed,
)
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.selection import TableSelection
from airflow_provider_mysqlcdc.sinks.change_columns import TableChanges, change_columns
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.stream.activation import Replay, plan_activation
from airflow_provider_mysqlcdc.stream.batches import ActivationRead, BatchRead, GapRead, RangeRead
from airflow_provider_mysqlcdc.stream.events import PieceRead
from airflow_provider_mysqlcdc.stream.positions import Watermarks, purged_or_raise, with_watermarks
from airflow_provider_mysqlcdc.stream.tables import schemas_and_orderings

T = TypeVar("T")

#: a read types its changes in runs of at most this many (a run's tables each make one item)
RUN_LENGTH = 1000

#: a row change as a read holds it: a record, or an event's changes as value lists
Change = ChangeRecord | ChangeRows

#: the kinds of items a read yields
CHANGES, DDL, FAILED, ACTIVATE, STAGED, PURGED, PIECE = "changes", "ddl", "failed", "activate", "staged", "purged", \
    "piece"


@dataclass(frozen=True)
class ReadItem:
    """One item of a read: ``item`` (``TableChanges`` for ``CHANGES``, else the marker itself: a
    ``SchemaChangeEvent``, ``TableFailed``, ``TablesActivated``, ``StagedSplitReady``, ``BinlogPurged``
    or the read's ``PieceRead``), where it sorts in its batch (``key``: its first change's offset
    version, row and part), the changes it holds and the newest one's source time."""

    key: tuple[int, int, int]
    kind: str
    item: Any
    count: int = 1
    ts_ms: int = 0


def in_binlog_order(items: Iterable[T], key: Callable[[T], tuple[int, int, int]]) -> Iterator[T]:
    """``items`` as they come, refused (``InternalError``) where one sorts before the one before it: a
    broken promise of a batch's reads, never silently applied."""
    last = None
    for item in items:
        at = key(item)
        if last is not None and at < last:
            raise InternalError(f"a batch's items out of binlog order: {at} after {last}")
        last = at
        yield item


def item_payload(item: ReadItem) -> bytes:
    """What an item travels as between processes (spark/batch_rows.py, read_process.py): a run of
    changes as Arrow IPC (``TableChanges.to_ipc``), a marker pickled; ``item_of`` reads it back."""
    return item.item.to_ipc() if item.kind == CHANGES else pickle.dumps(item.item, protocol=pickle.HIGHEST_PROTOCOL)


def item_of(kind: str, payload: bytes) -> Any:
    """The item of a ``kind`` that ``item_payload`` sent as ``payload``."""
    return TableChanges.from_ipc(payload) if kind == CHANGES else pickle.loads(payload)


def marker(version: int, row: int, kind: str, item: Any, ts_ms: int = 0) -> ReadItem:
    return ReadItem((version, row, 0), kind, item, 1, ts_ms)


def purged_gap(gap: BinlogPurged) -> ReadItem:
    """The item telling the applier which changes were lost at the start of a batch."""
    return marker(gap.lost_from.version, 0, PURGED, gap)


class ChangeTyping:
    """Types runs of change records into ``TableChanges``, one item per table of a run, under each
    table's schema as of its changes (``schemas``: the captured schema of each table; None: inferred).

    One table's failure never stops the read: a change that cannot be typed (or that the reader could
    not decode, ``fail``) becomes a ``TableFailed`` at its event, after the table's changes of earlier
    events; none of the table's changes after it are typed."""

    def __init__(self, *, schemas: dict[TableId, TableSchema] | None = None, changelog: bool = False):
        self.schemas = schemas or {}
        #: whether the changes carry their images as JSON for the changelog
        self.changelog = changelog
        #: the tables of this read that failed (their later changes are not typed)
        self.failed: set[TableId] = set()
        #: the changes typed so far
        self.changes_sent = 0
        #: per table map's schema (by identity, held): the captured schema it was given, and the schema as of it
        self._as_of_schemas: dict[int, tuple[TableSchema, TableSchema | None, TableSchema]] = {}

    def changes(self, batch: Sequence[Change], decisions: Sequence[bool]) -> list[ReadItem]:
        """One item per table of the changes of ``batch`` to keep (``decisions``: one per record, or
        per event's ``ChangeRows``), if any, in the order of their first change (a table's failure in
        its place); one more where a table's changes were written under another table map (a DDL the
        reader did not see between them), each of its runs under one schema."""
        runs: list[tuple[TableId, list[Change]]] = []
        current: dict[TableId, tuple[TableSchema | None, list[Change]]] = {}
        for record, keep in zip(batch, decisions):
            if keep and record.table_id not in self.failed:
                run = current.get(record.table_id)
                if run is None or run[0] is not record.schema:
                    run = current[record.table_id] = (record.schema, [])
                    runs.append((record.table_id, run[1]))
                run[1].append(record)
        items = [item for table_id, kept in runs for item in self._table_items(table_id, kept)]
        self.changes_sent += sum(item.count for item in items if item.kind == CHANGES)
        return sorted(items, key=lambda item: item.key)

    def fail(self, failure: TableFailed) -> list[ReadItem]:
        """The reader could not decode a change of the table (sent once; its later changes are not)."""
        if failure.table_id in self.failed:
            return []
        self.failed.add(failure.table_id)
        return [marker(failure.offset.version, 0, FAILED, failure)]

    def _table_items(self, table_id: TableId, kept: list[Change]) -> list[ReadItem]:
        try:
            return [self._typed(table_id, kept)]
        except Exception as exc:  # noqa: BLE001 - what is not the table's is raised again
            if not is_table_fault(exc):
                raise
            error: BaseException = exc
        # rare: the first change that cannot be typed with the ones before it (the longest prefix that
        # types, by halving); the table's events before it go, then its failure
        typed, failing = 0, len(kept)  # kept[:typed] types, kept[:failing] does not (with ``error``)
        while failing - typed > 1:
            middle = (typed + failing) // 2
            found = self._typing_error(table_id, kept[:middle])
            typed, failing, error = (middle, failing, error) if found is None else (typed, middle, found)
        bad = kept[typed]
        before = [r for r in kept if r.offset < bad.offset]
        self.failed.add(table_id)
        failure = TableFailed(table_id, bad.offset, f"a change at {bad.offset} cannot be typed for the sink: "
                                                    f"{describe_error(error)}")
        return ([self._typed(table_id, before)] if before else []) + [marker(failure.offset.version, 0, FAILED,
                                                                             failure)]

    def _typing_error(self, table_id: TableId, records: list[Change]) -> BaseException | None:
        try:
            self._typed(table_id, records)
            return None
        except Exception as exc:  # noqa: BLE001
            if not is_table_fault(exc):
                raise
            return exc

    def _typed(self, table_id: TableId, kept: list[Change]) -> ReadItem:
        first = kept[0]
        schema = self._as_of(table_id, first.schema)
        data = change_columns(schema, kept, changelog=self.changelog)
        key = first.first_key if isinstance(first, ChangeRows) else (first.offset.version, first.row, first.part)
        return ReadItem(key, CHANGES, TableChanges(table_id, data, schema), data.num_rows,
                        max(r.timestamp_ms for r in kept))

    def _as_of(self, table_id: TableId, mapped: TableSchema | None) -> TableSchema | None:
        """The table's schema as of changes decoded under ``mapped`` (their table map's), which types
        their columns and travels with them: cdc/binlog/table_map.py ``schema_as_of``."""
        known = self.schemas.get(table_id)
        if mapped is None:
            return known
        held = self._as_of_schemas.get(id(mapped))
        if held is None or held[0] is not mapped or held[1] is not known:
            held = self._as_of_schemas[id(mapped)] = (mapped, known, schema_as_of(mapped, known))
        return held[2]


class BinlogReading:
    """The stream's reads of ``source``'s binlog for the pipeline at ``state``: ``changelog``, whether
    changes carry their images for the changelog table; tables whose names match ``table_patterns``
    (less ``exclude_tables``) are watched for DDL that makes them match (state/new_tables.py)."""

    def __init__(self, source: SourceConfig, state: PipelineState, *, changelog: bool = False,
                 table_patterns: Sequence[str] = (), exclude_tables: Sequence[str] = ()):
        self.source = source
        self.state = state
        self.changelog = changelog
        self.patterns = TableSelection.parse(list(table_patterns), list(exclude_tables))

    def read(self, read: BatchRead) -> Iterator[ReadItem]:
        """The items of one of a batch's reads (stream/batches.py)."""
        if isinstance(read, RangeRead):
            return self.read_range(read.generation, read.read_from, read.end, decode_after=read.decode_after,
                                   server_id=read.server_id, watermarks=read.watermarks)
        if isinstance(read, ActivationRead):
            return self.read_activation(read.previous, read.generation, read.start, server_id=read.server_id,
                                        on_binlog_purged=read.on_binlog_purged, watermarks=read.watermarks)
        if isinstance(read, GapRead):
            return iter([purged_gap(read.gap)])
        raise InternalError(f"unknown read of a batch: {read!r}")

    def read_range(self, generation_number: int, read_from: BinlogOffset, end: BinlogOffset, *,
                   decode_after: BinlogOffset | None = None, server_id: int, watermarks: Watermarks) -> Iterator[ReadItem]:
        """The items of ``(read_from, end]`` (decoded after ``decode_after`` where given: a piece of a
        range decoded in parallel, cdc/binlog/ranges.py) under generation ``generation_number`` with
        the high watermarks the driver translated, the read's timings last."""
        began_at, began = time.time(), time.monotonic()
        generation = with_watermarks(self.state.load(generation_number), watermarks)
        schemas, orderings = schemas_and_orderings(self.source, self.state, generation, generation.tables)
        typing = ChangeTyping(schemas={s.table_id: s for s in schemas}, changelog=self.changelog)
        split_filter = FinishedSplitFilter([f for f in generation.finished_splits if f.split.table_id in orderings],
                                           orderings)
        patterns = self.patterns
        reader = BinlogReader.for_schemas(self.source, schemas, start=read_from, end=end, decode_after=decode_after,
                                          server_id=server_id, columnar=not self.changelog,
                                          watch=patterns.pattern_matches if patterns.patterns else None)
        set_up = time.monotonic()
        batch: list[Change] = []
        held = 0  # the changes in ``batch``

        def typed() -> list[ReadItem]:
            nonlocal batch, held
            records = [c for c in batch if isinstance(c, ChangeRecord)]
            decided = iter(split_filter.filter(records))  # ``ChangeRows`` were decided as they came
            items = typing.changes(batch, [next(decided) if isinstance(c, ChangeRecord) else True for c in batch])
            batch, held = [], 0
            return items

        try:
            for item in reader:
                if isinstance(item, ChangeRows):
                    decision = split_filter.event_decision(item.table_id, item.offset, item.names)
                    if decision is None:
                        batch += item.records()
                    elif decision:
                        batch.append(item)
                    held += len(item)
                    if held >= RUN_LENGTH:
                        yield from typed()
                elif isinstance(item, ChangeRecord):
                    batch.append(item)
                    held += 1
                    if held >= RUN_LENGTH:
                        yield from typed()
                elif isinstance(item, SchemaChangeEvent):
                    yield from typed()
                    yield marker(item.offset.version, 0, DDL, item, item.timestamp_ms)
                elif isinstance(item, TableFailed) and split_filter.may_emit(item.table_id, item.offset):
                    yield from typed()
                    yield from typing.fail(item)
            yield from typed()
            yield ReadItem((0, 0, 0), PIECE, PieceRead(str(read_from), str(end), began_at, set_up - began,
                                                       time.monotonic() - set_up, typing.changes_sent), 0)
        finally:
            for ordering in orderings.values():
                ordering.close()

    def read_activation(self, previous: int, generation: int, start: BinlogOffset, *, server_id: int,
                        on_binlog_purged: str, watermarks: Watermarks) -> Iterator[ReadItem]:
        """The items of activating generation ``generation`` over ``previous`` at ``start``, as
        activation.py decides them: the tables announced, the tables a purge cost, the re-read
        changes, the staged splits."""
        plan = plan_activation(self.state.load(generation), self.state.load(previous), start, watermarks)
        yield marker(-1, 0, ACTIVATE, plan.activated)
        replay_from = plan.replay_from
        gap = None if replay_from is None else self.source.run(
            lambda conn: purged_or_raise(conn, replay_from, on_binlog_purged), "checking the binlog behind an activation")
        if gap is not None:  # these tables are re-snapshotted by the next run: nothing of them is applied now
            lost = plan.lost_to(gap)
            yield marker(lost.lost_from.version, 0, PURGED, lost)
            plan = plan.without(lost.tables)
        schemas, orderings = (schemas_and_orderings(self.source, self.state, plan.generation,
                                                    {f.split.table_id for f in plan.behind})
                              if plan.behind else ([], {}))
        replay = Replay(plan, orderings)
        if plan.behind:
            yield from self._replay(start, server_id, replay, schemas)
        for ready in replay.staged_ready():
            yield marker(start.version, -1, STAGED, ready)

    def _replay(self, start: BinlogOffset, server_id: int, replay: Replay,
                schemas: list[TableSchema]) -> Iterator[ReadItem]:
        """Re-read ``(replay_from, start]`` of the tables behind ``start``: what ``replay`` keeps."""
        typing = ChangeTyping(schemas={s.table_id: s for s in schemas}, changelog=self.changelog)
        reader = BinlogReader.for_schemas(self.source, schemas, start=replay.plan.replay_from, end=start,
                                          server_id=server_id)
        batch: list[ChangeRecord] = []

        def flush() -> list[ReadItem]:
            items = typing.changes(batch, replay.changes(batch))
            batch.clear()
            return items

        try:
            for item in reader:
                if isinstance(item, ChangeRecord):
                    batch.append(item)
                    if len(batch) >= RUN_LENGTH:
                        yield from flush()
                elif isinstance(item, SchemaChangeEvent):
                    yield from flush()
                    direct = replay.schema_change(item)
                    if direct is not None:
                        yield marker(item.offset.version, 0, DDL, direct, item.timestamp_ms)
                elif isinstance(item, TableFailed) and replay.split_filter.may_emit(item.table_id, item.offset):
                    yield from flush()
                    yield from typing.fail(item)  # a staged split of the table is then not applied
            yield from flush()
        finally:
            for ordering in replay.orderings.values():
                ordering.close()
