"""A PySpark streaming data source over the binlog (``spark.readStream.format("mysqlcdc_binlog")``).

Offsets are ``StreamOffset`` records (protocol/offsets.py): a binlog position read from ``SHOW
MASTER STATUS`` (always between transactions, so a micro-batch never ends inside one), the number
of the registry generation (state/registry.py) the batch captures, and which binlog the position
belongs to (the MariaDB GTID position there and the server id): each batch checks them, and the
first batch of a query checks exactly that the server's binlog holds the start
(server.py ``check_same_binlog``), so a reset, restored or other server's binlog is refused.

A micro-batch ``(start, end]`` is decoded with ``end``'s tables and finished-split filter, on the
executors. When ``end`` has a newer generation than ``start``, the splits it adds are activated
first, by one more partition, as stream/activation.py decides (this class only reads and emits):

- the tables it adds are announced (``TablesActivated``), so the driver prepares their sink tables;
- for every added split whose high watermark ``h`` is behind ``start``, the binlog ``(h, start]`` of
  its key range is read again: for a split the chunk job wrote directly, these changes are merged
  like any other (they are older than every change of the batch); for a staged split they travel
  with it (``StagedSplitReady``) and the driver merges them into the staged rows before replacing
  the range, so the sink jumps from its old state straight to the state at ``start``.

Every change of an added split after its high watermark is therefore applied exactly once: those up
to ``start`` by the activation, those after by this and later batches (the filter drops the rest).

A micro-batch ends where a transaction ends, after at most ``max_batch_bytes`` of binlog or
``max_batch_events`` events (ranges.py ``batch_end``; a larger transaction makes a batch of its own).
Its rows are described in batch_rows.py: what a partition decodes beyond ``inline_bytes`` travels
through spill files in the state location, not through Spark, so neither side holds a whole batch.

A change that cannot be decoded or typed because of its table's data or schema does not fail the
partition: the table's ``TableFailed`` takes its place (batch_rows.py), and the driver freezes that
table there, unless the change could not be applied anyway (before every split's high watermark).

Table DDL in an activation's re-read ``(h, start]`` counts too: for a table the chunk job wrote
directly, its ``SchemaChangeEvent`` travels like in any batch (a ``TRUNCATE`` there removes exactly
the rows older than it); for a staged split, a ``TRUNCATE`` of its table joins its ``changes``.
Executors describe a table that has left the server (dropped, renamed) by its last remembered
schema (state/schemas.py).

Options: ``job`` (the stream job file's JSON, protocol/jobs.py ``StreamJob``: the state location,
replica server ids, decode pieces, batch limits, inline bytes, ``on_binlog_purged`` and the retry
budget, each with its one default there), ``source`` (the source's settings as
``SourceConfig.for_executors`` gives them: the path of a private credentials file, never the
password itself, since options show up in query plans; on Spark Connect a file on the server),
``initial_offset`` (where a
query without a checkpointed offset starts; default: the registry's smallest high watermark, at
generation 0). With ``on_binlog_purged="resnapshot"``, a batch whose start was purged reads from
the oldest binlog left and announces the gap with ``BinlogPurged``, and an activation whose re-read
was purged skips those tables the same way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from airflow_provider_mysqlcdc.cdc.binlog.ranges import DecodeRange, batch_end, plan_decode_ranges
from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.cdc.binlog.split_filter import FinishedSplitFilter
from airflow_provider_mysqlcdc.cdc.errors import BinlogPurgedError, ConfigurationError, InternalError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import (
    BinlogPurged,
    ChangeRecord,
    SchemaChangeEvent,
    TableFailed,
)
from airflow_provider_mysqlcdc.cdc.model.schema import TableSchema
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig, parse_server_id_range, pick_server_id
from airflow_provider_mysqlcdc.cdc.source.selection import TableSelection
from airflow_provider_mysqlcdc.cdc.source.server import binlog_changed_error, check_offset_available
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.spark.batch_rows import RUN_LENGTH, SCHEMA, RowEmitter
from airflow_provider_mysqlcdc.state.credentials import install_from_private_file
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.servers import ServerEpochs
from airflow_provider_mysqlcdc.state.spill import new_spill_folder
from airflow_provider_mysqlcdc.stream.activation import Replay, plan_activation
from airflow_provider_mysqlcdc.stream.events import PieceRead
from airflow_provider_mysqlcdc.stream.positions import (
    Watermarks,
    all_in_epoch,
    purged_or_raise,
    registry_start_offset,
    watermarks_to_translate,
    with_watermarks,
)
from airflow_provider_mysqlcdc.stream.tables import schemas_and_orderings

SOURCE_NAME = "mysqlcdc_binlog"




class BinlogRange(InputPartition):
    """One piece of a micro-batch's binlog range (ranges.py), decoded by one executor task."""

    def __init__(self, read_from: BinlogOffset, decode_after: BinlogOffset | None, end: BinlogOffset,
                 server_id: int, generation: int, spill_folder: str, watermarks: Watermarks):
        self.read_from, self.decode_after, self.end = read_from, decode_after, end
        self.server_id = server_id  # distinct per piece: the server drops a replica connection that reuses an id
        self.generation = generation
        self.spill_folder = spill_folder
        self.watermarks = watermarks


class Activation(InputPartition):
    """The splits ``generation`` adds to ``previous``, activated at ``start`` (see the module doc)."""

    def __init__(self, previous: int, generation: int, start: BinlogOffset, server_id: int, on_binlog_purged: str,
                 spill_folder: str, watermarks: Watermarks):
        self.previous, self.generation, self.start, self.server_id = previous, generation, start, server_id
        self.on_binlog_purged = on_binlog_purged
        self.spill_folder = spill_folder
        self.watermarks = watermarks


class PurgedGap(InputPartition):
    """The start of a micro-batch's range was purged: the batch reads from the oldest binlog left, and
    this partition tells the driver which changes were lost (``on_binlog_purged="resnapshot"``)."""

    def __init__(self, gap: BinlogPurged, generation: int):
        self.gap, self.generation = gap, generation


class BinlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Driver side plans ranges of the binlog; ``read`` runs on executors (on a pickled copy)."""

    def __init__(self, options: dict[str, str]):
        job = StreamJob.from_json(options["job"])
        self.state_location = job.state
        if "source" not in options:
            raise ConfigurationError(f"the {SOURCE_NAME} source needs the option source: the source's settings "
                                     "as SourceConfig.for_executors(private_file).to_json() gives them")
        self.source = SourceConfig.from_json(options["source"])
        # the planner (a Python worker of the driver's JVM) reads the state location, maybe on an
        # object store: its credentials are in the private file too (state/credentials.py)
        self._install_credentials()
        self.server_id_range = parse_server_id_range(job.server_id_range)
        self.decode_pieces = job.decode_pieces
        self.initial_offset = json.loads(options["initial_offset"]) if options.get("initial_offset") else None
        self.retry_budget_s = job.retry_budget_s
        self.on_binlog_purged = job.on_binlog_purged
        self.max_batch_bytes = job.max_batch_bytes
        self.max_batch_events = job.max_batch_events
        self.inline_bytes = job.inline_bytes
        self.changelog = job.changelog
        #: tables that take a name these match are handed on (their DDL), for the next run (state/new_tables.py)
        self.table_patterns, self.exclude_tables = job.table_patterns, job.exclude_tables
        self._target: dict[str, Any] | None = None
        self._verified = False
        self._epochs: ServerEpochs | None = None  # driver only

    def _install_credentials(self) -> None:
        install_from_private_file(self.source.password_file)

    def _source(self) -> SourceConfig:
        return self.source.with_retry(self.retry_budget_s)

    def _state(self) -> PipelineState:
        return PipelineState(self.state_location)

    def _servers(self) -> ServerEpochs:
        if self._epochs is None:
            self._epochs = ServerEpochs(self._state())
        return self._epochs

    def _latest(self) -> dict[str, Any]:
        head = self._source().run(self._servers().head, "reading the binlog head")
        return StreamOffset(head, self._state().latest_number()).to_spark()

    def _server_ids(self, count: int) -> list[int]:
        low, high = self.server_id_range
        base = pick_server_id(self.server_id_range)
        return [low + (base - low + i) % (high - low + 1) for i in range(count)]

    # --- driver ----------------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        # fixed when the checkpoint was created (stream_job.stream_identity), so that a batch 0 Spark
        # runs again starts where it started the first time
        if self.initial_offset is not None:
            return self.initial_offset
        return registry_start_offset(self._state()).to_spark()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxBytes(self.max_batch_bytes) if self.max_batch_bytes else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        latest = self._target if self._target is not None else self._latest()
        begin_at, head_at = StreamOffset.from_spark(start), StreamOffset.from_spark(latest)
        begin, head = begin_at.offset, head_at.offset
        if head < begin:  # never a stall: say what happened
            raise binlog_changed_error(f"The stream has processed the binlog up to {begin}, but the "
                                       f"server's binlog now ends at {head}")
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else 0
        max_events = limit.max_rows if isinstance(limit, ReadMaxRows) else self.max_batch_events
        limited = not isinstance(limit, ReadAllAvailable) and (max_bytes or max_events)

        def end(conn: Any) -> BinlogOffset:
            here = self._servers().follow(conn, begin)  # the same point on a server the source failed over to
            self._check_start(conn, here)
            return batch_end(conn, here, head, max_bytes=max_bytes, max_events=max_events) if limited else head

        end_offset = self._source().run(end, "finding the batch's end")
        return StreamOffset(end_offset, max(head_at.generation, begin_at.generation)).to_spark()

    def _check_start(self, conn: Any, begin: BinlogOffset) -> None:
        """The start lies in this server's binlog: cheaply every time, exactly once per query (a reset
        binlog may have grown past it). A purged start is left to ``partitions`` (on_binlog_purged)."""
        try:
            check_offset_available(conn, begin, exact=not self._verified)
        except BinlogPurgedError:
            return
        self._verified = True

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin_at, end_at = StreamOffset.from_spark(start), StreamOffset.from_spark(end)
        begin, finish = begin_at.offset, end_at.offset
        generation, previous = end_at.generation, begin_at.generation

        def plan(conn: Any) -> tuple[BinlogOffset, Watermarks, BinlogPurged | None, list[DecodeRange]]:
            here = self._servers().follow(conn, begin)  # the same point on a server the source failed over to
            watermarks = self._translated_watermarks(conn, begin, here, generation, previous)
            gap = purged_or_raise(conn, here, self.on_binlog_purged) if finish > here else None
            read_from = gap.resumed_at if gap else here
            ranges = plan_decode_ranges(conn, read_from, finish, self.decode_pieces) if finish > read_from else []
            return here, watermarks, gap, ranges

        here, watermarks, gap, ranges = self._source().run(plan, "planning the binlog range")
        ids = self._server_ids(len(ranges) + 1)
        spill = new_spill_folder(self._state())
        parts: list[InputPartition] = [BinlogRange(r.read_from, r.decode_after, r.end, server_id, generation, spill,
                                                   watermarks) for r, server_id in zip(ranges, ids)]
        if gap is not None:
            parts.insert(0, PurgedGap(gap, generation))
        if generation != previous:
            parts.insert(0, Activation(previous, generation, here, ids[-1], self.on_binlog_purged, spill, watermarks))
        return parts

    def _translated_watermarks(self, conn: Any, begin: BinlogOffset, here: BinlogOffset, number: int,
                               previous: int) -> Watermarks:
        """High watermarks of generation ``number`` read on an earlier server than the one this batch
        reads (a failover) that the stream still compares changes with exactly (after the batch's
        start ``begin``, or of a split this batch activates), translated into this server's binlog
        by their GTID positions."""
        if here.epoch == 0:  # the first server: no watermark was read on an earlier one
            return {}
        state = self._state()
        new = state.load(number)
        if all_in_epoch(new, here.epoch):
            return {}
        older = state.load(previous) if number != previous else new
        return {f.split.split_id: self._servers().translate(conn, f.high_watermark, here.epoch)
                for f in watermarks_to_translate(new, older, begin, here.epoch)}

    def commit(self, end: dict[str, Any]) -> None:
        pass

    # --- executors -------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[tuple]:
        self._install_credentials()  # on an executor too: generations, spill files
        if isinstance(partition, Activation):
            yield from self._read_activation(partition)
            return
        if isinstance(partition, PurgedGap):
            yield from RowEmitter(partition.generation).marker(partition.gap.lost_from.version, 0, "purged", 0,
                                                               partition.gap)
            return
        if not isinstance(partition, BinlogRange):
            raise InternalError(f"unknown partition of the binlog source: {partition!r}")
        began_at, began = time.time(), time.monotonic()
        source, state = self._source(), self._state()
        generation = with_watermarks(state.load(partition.generation), partition.watermarks)
        schemas, orderings = schemas_and_orderings(source, state, generation, generation.tables)
        rows = self._emitter(partition.generation, partition.spill_folder, schemas)
        split_filter = FinishedSplitFilter([f for f in generation.finished_splits if f.split.table_id in orderings],
                                           orderings)
        patterns = TableSelection.parse(self.table_patterns, self.exclude_tables)
        reader = BinlogReader.for_schemas(source, schemas, start=partition.read_from, end=partition.end,
                                          decode_after=partition.decode_after, server_id=partition.server_id,
                                          watch=patterns.pattern_matches if patterns.patterns else None)
        set_up = time.monotonic()
        batch: list[ChangeRecord] = []
        try:
            for item in reader:
                if isinstance(item, ChangeRecord):
                    batch.append(item)
                    if len(batch) >= RUN_LENGTH:
                        yield from rows.changes(batch, split_filter.filter(batch))
                        batch = []
                elif isinstance(item, SchemaChangeEvent):
                    yield from rows.changes(batch, split_filter.filter(batch))
                    batch = []
                    yield from rows.marker(item.offset.version, 0, "ddl", item.timestamp_ms, item)
                elif isinstance(item, TableFailed) and split_filter.may_emit(item.table_id, item.offset):
                    yield from rows.changes(batch, split_filter.filter(batch))
                    batch = []
                    yield from rows.fail(item)
            yield from rows.changes(batch, split_filter.filter(batch))
            yield from rows.close()
            yield rows.piece(PieceRead(str(partition.read_from), str(partition.end), began_at, set_up - began,
                                       time.monotonic() - set_up, rows.changes_sent))
        finally:
            for ordering in orderings.values():
                ordering.close()

    def _emitter(self, generation: int, spill_folder: str | None, schemas: Sequence[TableSchema] = ()) -> RowEmitter:
        return RowEmitter(generation, schemas={s.table_id: s for s in schemas}, changelog=self.changelog,
                          spill_folder=spill_folder, inline_bytes=self.inline_bytes)

    def _read_activation(self, partition: Activation) -> Iterator[tuple]:
        """The activation's items, as stream/activation.py decides them: the tables announced, the
        tables a purge cost, the re-read changes, the staged splits."""
        state = self._state()
        plan = plan_activation(state.load(partition.generation), state.load(partition.previous), partition.start,
                               partition.watermarks)
        rows = self._emitter(partition.generation, partition.spill_folder)
        yield from rows.marker(-1, 0, "activate", 0, plan.activated)
        replay_from = plan.replay_from
        gap = None if replay_from is None else self._source().run(
            lambda conn: purged_or_raise(conn, replay_from, partition.on_binlog_purged),
            "checking the binlog behind an activation")
        if gap is not None:  # these tables are re-snapshotted by the next run: nothing of them is applied now
            lost = plan.lost_to(gap)
            yield from rows.marker(lost.lost_from.version, 0, "purged", 0, lost)
            plan = plan.without(lost.tables)
        source = self._source()
        schemas, orderings = (schemas_and_orderings(source, state, plan.generation, {f.split.table_id for f in plan.behind})
                              if plan.behind else ([], {}))
        replay = Replay(plan, orderings)
        if plan.behind:
            rows.schemas = {s.table_id: s for s in schemas}
            yield from self._replay(partition, replay, schemas, rows)
        for ready in replay.staged_ready():
            yield from rows.marker(partition.start.version, -1, "staged", 0, ready)
        yield from rows.close()

    def _replay(self, partition: Activation, replay: Replay, schemas: list[TableSchema],
                rows: RowEmitter) -> Iterator[tuple]:
        """Re-read ``(replay_from, start]`` of the tables behind ``start`` and emit what ``replay`` keeps."""
        reader = BinlogReader.for_schemas(self._source(), schemas, start=replay.plan.replay_from, end=partition.start,
                                          server_id=partition.server_id)
        batch: list[ChangeRecord] = []

        def flush() -> Iterator[tuple]:
            yield from rows.changes(batch, replay.changes(batch))
            batch.clear()

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
                        yield from rows.marker(item.offset.version, 0, "ddl", item.timestamp_ms, direct)
                elif isinstance(item, TableFailed) and replay.split_filter.may_emit(item.table_id, item.offset):
                    yield from flush()
                    yield from rows.fail(item)  # a staged split of the table is then not applied
            yield from flush()
        finally:
            for ordering in replay.orderings.values():
                ordering.close()


class BinlogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> BinlogStreamReader:
        return BinlogStreamReader(dict(self.options))
