"""The stream job: Structured Streaming over the binlog source, merged into the sink per micro-batch.

Exactly once: Spark's checkpoint records each batch's offsets before it runs; ``foreachBatch``
merges the batch into every table in one commit per table, which records the binlog position of
its last change (sinks/base.py), so a batch replayed after a crash (kill -9 included) applies only
what a table does not hold yet. The same makes a lost or replaced checkpoint safe: a stream whose
checkpoint is new starts where the pipeline's last stream into the same sink committed
(``progress/stream-offset.json``), else at the registry's smallest high watermark, and applies to
each table only the changes after its recorded position; a table recorded beyond the server's
binlog head (the binlog was reset, or this is another server) is refused before anything is written.
``available-now`` catches up to the binlog head as of start and exits; ``continuous`` runs
micro-batches every ``trigger_interval_s`` until stopped. Tables added to the registry while it
runs are picked up at the next micro-batch (binlog_source.py); staged splits are applied here, in
binlog order with the batch's changes, under the same idempotency keys.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import fsspec
import pyarrow as pa

from airflow_provider_mysqlcdc.cdc.binlog.listing import table_ddl_after
from airflow_provider_mysqlcdc.cdc.binlog.row_decoder import chosen_decoder
from airflow_provider_mysqlcdc.cdc.errors import LeaseLost, SchemaChangedError, describe_error
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import (
    BinlogPurged,
    ChangeRecord,
    SchemaChangeEvent,
    TableEventKind,
    TableFailed,
)
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.cdc.records.values import column_defaults
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.source.server import binlog_changed_error, current_offset
from airflow_provider_mysqlcdc.protocol.envelope import decode, encode
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy, MaintenanceReport, TableMaintenance
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.protocol.results import StreamResult
from airflow_provider_mysqlcdc.protocol.state import (
    CheckpointIdentity,
    Generation,
    HistoryPoint,
    StreamBatchProgress,
    StreamHistory,
    StreamOffsetProgress,
)
from airflow_provider_mysqlcdc.sinks.arrow_rows import METADATA_COLUMNS, conform_to, merge_changes_into_table
from airflow_provider_mysqlcdc.sinks.base import Sink, StreamCommit
from airflow_provider_mysqlcdc.sinks.change_columns import TableChanges, changes_before, conform_changes, offset_at
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_table_changes, staged_position
from airflow_provider_mysqlcdc.spark.batch_rows import batch_items, row_key, spill_urls
from airflow_provider_mysqlcdc.spark.binlog_source import (
    SOURCE_NAME,
    BinlogDataSource,
    StagedSplitReady,
    TablesActivated,
    registry_start_offset,
)
from airflow_provider_mysqlcdc.spark.connect import application_of, is_connect
from airflow_provider_mysqlcdc.spark.report import stop_request
from airflow_provider_mysqlcdc.state.cleanup import release_staged_files
from airflow_provider_mysqlcdc.state.credentials import install_from_private_file
from airflow_provider_mysqlcdc.state.drift import Drift, frozen_since, read_drift, record_drift
from airflow_provider_mysqlcdc.state.lease import LeaseKeeper, StreamLeases
from airflow_provider_mysqlcdc.state.maintenance import MaintenanceRequests
from airflow_provider_mysqlcdc.state.registry import STREAM_HISTORY, STREAM_OFFSET, STREAM_PROGRESS, PipelineState
from airflow_provider_mysqlcdc.state.schemas import KnownSchemas, orders_differently
from airflow_provider_mysqlcdc.state.servers import ServerEpochs
from airflow_provider_mysqlcdc.state.spill import remove_all_spill_folders, remove_spill_folder
from airflow_provider_mysqlcdc.state.staged import read_staged

log = logging.getLogger(__name__)

#: the stream's identity, a file of ours inside Spark's checkpoint folder
CHECKPOINT_IDENTITY = "mysqlcdc-stream.json"
#: merges of one micro-batch are versioned batch_id * SEGMENTS + segment (a DDL starts a new segment)
SEGMENTS = 1_000_000
#: how often a stream looks for maintenance requests (state/maintenance.py)
MAINTENANCE_POLL_S = 5.0
#: an added column's DEFAULT is filled in place only if no DDL of the table follows within this many
#: binlog events (a later one may have changed the default); else the table is re-snapshotted
FILL_LOOKAHEAD_EVENTS = 200_000


class BatchApplier:
    """The ``foreachBatch`` function: decode the batch, apply it segment by segment, log progress.

    A batch is applied under the registry generation it was planned with (``gen`` on its rows), so a
    batch replayed after a restart decides exactly as the first time: which tables are captured,
    and which are frozen because their name stopped holding the captured table (state/drift.py).
    Tables a newer generation no longer captures (the user removed them) are left out at once, so
    a batch that failed because of one of them is not replayed into the same failure.

    One table's failure is that table's: a change the executors could not decode or type
    (``TableFailed``), or that the sink refuses (``Sink.refuses``: a constraint, a type), freezes
    the table at that change (``TableEventKind.FAILED``, the error as the reason) and the others
    go on; the next DAG run re-snapshots it. Any other error fails the batch.
    """

    def __init__(self, source: SourceConfig, job: StreamJob, fence: Callable[[], None] = lambda: None):
        #: on a Spark Connect session this object runs in the server's foreachBatch worker, so ``source``
        #: holds no password but the private file it is read from, which holds the object store's
        #: credentials too: each batch installs them there (spark/connect.py)
        self.source = source
        self.job = job
        self.fence = fence  # raises when another stream took the pipeline over (state/lease.py)
        self.sink = open_sink(job.sink_root)
        self.state = PipelineState(job.state)
        self.known = KnownSchemas(self.state)
        self.writers: dict[TableId, SinkWriter] = {}
        self.rows_applied = 0
        #: per table (quoted), the rows this stream merged or wrote into it (0: truncated or filled only)
        self.table_changes: Counter[str] = Counter()
        self.started_at = time.time()
        self.generation = Generation(0)
        self.drift: Drift = {}
        #: per frozen table, the offset from which none of its changes apply (for the current batch)
        self.frozen: dict[TableId, BinlogOffset] = {}
        #: the batch's tables a newer generation no longer captures: nothing of them is applied
        self.removed: set[TableId] = set()
        #: the tables whose changes carried columns their writer lacks (drift noted) in the current batch
        self.unknown_noted: set[TableId] = set()
        #: held while a batch is applied or the tables are maintained: never both at once
        self.applying = threading.Lock()
        self.maintenance = MaintenanceRequests(self.state)
        self.maintained_at = time.monotonic()  # the stream's own maintenance (maintenance_every_s)
        self.requests_seen_at = 0.0

    def _load_writers(self, chunk_keys: dict[TableId, str], whole: tuple[TableId, ...] = ()) -> None:
        """Load the schema of each table and make its writer. A table that has left the server (a
        batch replayed from before its DROP) keeps its last remembered schema, and so does a table
        whose key a DDL the stream has not reached yet changed (state/schemas.py). ``whole``: tables
        being (re-)snapshotted entirely, whose sink table takes the new schema even where Delta
        cannot evolve a column's type."""
        if not chunk_keys:
            return
        schemas = self.source.run(lambda conn: [self.known.for_stream(conn, t, k) for t, k in chunk_keys.items()],
                                  "reading table schemas")
        for schema, chunk_key in zip(schemas, chunk_keys.values()):
            self._make_writer(schema, chunk_key, replace=schema.table_id in whole)

    def _make_writer(self, schema: TableSchema, chunk_key: str, *, replace: bool = False) -> None:
        try:
            self.sink.prepare(schema)  # refuses unsafe type changes with a clear error
        except SchemaChangedError as exc:
            if not replace:
                raise
            log.warning("%s: %s. Its whole re-snapshot is being applied now: the sink table is replaced by an "
                        "empty one of the new schema, which the re-snapshot fills", schema.table_id, exc)
            self.sink.replace_schema(schema)
        self.writers[schema.table_id] = SinkWriter(self.sink, schema, chunk_key,
                                                   KeyOrdering(schema.column(chunk_key), self.source.connect))

    def __getstate__(self) -> dict[str, Any]:
        """On a Spark Connect session this object is pickled to the server: a lock does not travel."""
        state = dict(self.__dict__)
        del state["applying"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.applying = threading.Lock()

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        with self.applying:  # maintenance between batches waits for it, and it waits for maintenance
            self._apply_batch(batch_df, batch_id)
            self.maintain_due()

    def _apply_batch(self, batch_df: Any, batch_id: int) -> None:
        started = time.monotonic()
        install_from_private_file(self.source.password_file)
        self.fence()
        # Sorted here, not with orderBy: Spark's sort samples its input first, which would read the
        # binlog range twice. The rows are small: what does not fit a task's inline budget comes
        # through spill files, read one run at a time (batch_rows.py).
        rows = sorted(batch_df.collect(), key=row_key)
        read_s = time.monotonic() - started
        if rows:
            self._begin(rows[0].gen)
        # Each unit of work (a run of changes, a staged split, a TRUNCATE) commits on its own with the
        # position it reaches (sinks/writer.py), so a replayed batch redoes exactly what no table holds
        # yet; batch_id * SEGMENTS + n names the unit in the Delta log. A run longer than
        # max_apply_changes is merged in pieces, so memory never holds more.
        segment: list[TableChanges] = []
        unit = staged = 0
        changes = skipped = pending = 0
        merged_tables: set[TableId] = set()
        newest_ms, last_change = 0, None
        for item in batch_items(rows):
            if isinstance(item, TableChanges):
                last = item.last_offset
                newest_ms, last_change = max(newest_ms, item.newest_ms), max(last_change or last, last)
                data = self._applicable(item.table_id, item.data)
                skipped += item.data.num_rows - data.num_rows
                while data.num_rows:  # cut where a unit reaches max_apply_changes
                    room = self.job.max_apply_changes - pending
                    segment.append(TableChanges(item.table_id, data.slice(0, room)))
                    pending += min(room, data.num_rows)
                    changes += min(room, data.num_rows)
                    data = data.slice(room)
                    if pending >= self.job.max_apply_changes:
                        merged_tables |= self._apply(segment, batch_id * SEGMENTS + unit)
                        segment, unit, pending = [], unit + 1, 0
                        rest = self._applicable(item.table_id, data)  # the table may have failed in that unit
                        skipped, data = skipped + data.num_rows - rest.num_rows, rest
                continue
            newest_ms = max(newest_ms, getattr(item, "timestamp_ms", 0))
            merged_tables |= self._apply(segment, batch_id * SEGMENTS + unit)
            segment, unit, pending = [], unit + 1, 0
            if isinstance(item, TablesActivated):
                self._activate(item)
            elif isinstance(item, BinlogPurged):
                self._purged(item)
            elif isinstance(item, TableFailed):
                self._failed(item.table_id, item.offset, item.reason)
            elif isinstance(item, StagedSplitReady):
                self._apply_staged(item, batch_id * SEGMENTS + unit, staged)
                unit, staged = unit + 1, staged + 1
            elif self._schema_changed(item, batch_id * SEGMENTS + unit):
                unit += 1
        merged_tables |= self._apply(segment, batch_id * SEGMENTS + unit)
        self.rows_applied += changes
        if skipped:
            log.info("skipped %d change(s) of frozen or removed table(s) %s", skipped,
                     ", ".join(map(str, sorted(self.frozen.keys() | self.removed))))
        spilled = spill_urls(rows)
        for folder in sorted({url.rsplit("/", 1)[0] for url in spilled}):
            remove_spill_folder(folder)
        self._log_progress(batch_id, changes, unit + 1, len(spilled), newest_ms, last_change, read_s,
                           time.monotonic() - started)
        self._cluster_due(merged_tables)

    def _applicable(self, table_id: TableId, data: pa.Table) -> pa.Table:
        """The changes of ``data`` (one table's) to apply: none of a table no longer captured, and none
        of a frozen table from where it froze."""
        if table_id in self.removed:
            return data.slice(0, 0)
        since = self.frozen.get(table_id)
        return data if since is None else changes_before(data, since)

    def _begin(self, generation: int) -> None:
        """The batch's generation, its tables' drift, and which of them are frozen."""
        if generation != self.generation.number:
            self.generation = self.state.load(generation)
        self.drift = read_drift(self.state)
        self.unknown_noted = set()
        self.frozen = {}
        for table_id in self.generation.tables:
            self._refreeze(table_id)
        latest = self.state.latest_number()
        self.removed = set() if latest == generation else \
            set(self.generation.tables) - set(self.state.load(latest).tables)
        if self.removed:
            log.info("batch of generation %d: %s no longer captured (generation %d), left out", generation,
                     ", ".join(map(str, sorted(self.removed))), latest)

    def _refreeze(self, table_id: TableId) -> None:
        """Whether (from where) the table is frozen, by its drift under this batch's generation."""
        since = frozen_since(self.drift, table_id, self.generation.tables.get(table_id))
        if since is not None:
            self.frozen[table_id] = since

    def _chunk_key(self, table_id: TableId) -> str:
        if table_id in self.writers:
            return self.writers[table_id].chunk_key
        return self.generation.chunk_keys[table_id]  # restarted after the batch that activated it

    def _writer(self, table_id: TableId) -> SinkWriter:
        if table_id not in self.writers:
            self._load_writers({table_id: self._chunk_key(table_id)})
        return self.writers[table_id]

    def _activate(self, event: TablesActivated) -> None:
        chunk_keys = {t: k for t, k in event.chunk_keys.items() if t not in self.removed}
        self._load_writers(chunk_keys, event.whole)
        if chunk_keys:
            log.info("registry changes activated for %s", ", ".join(str(t) for t in chunk_keys))

    def _apply_staged(self, staged: StagedSplitReady, version: int, sequence: int) -> None:
        """Replace a staged split's range by its rows brought forward to the batch start, in one commit.

        Not of a table frozen at or before that point (a change of it in the re-read failed). A split
        the sink refuses still fails the batch: the table could only be frozen at ``as_of``, which may
        equal its new splits' smallest high watermark, where drift does not count (state/drift.py),
        so the stream would go on over rows the re-snapshot did not replace. Removing the table from
        the pipeline lets the batch through."""
        table_id = staged.split.split.table_id
        since = self.frozen.get(table_id)
        if table_id in self.removed or (since is not None and since <= staged.as_of):
            log.info("staged split %s not applied: its table is %s", staged.split.split.split_id,
                     "no longer captured" if table_id in self.removed else f"frozen from {since}")
            return
        writer = self._writer(table_id)
        commit = StreamCommit(self.job.app_id, version, staged_position(staged.as_of, sequence))
        if writer.is_applied(commit.position):  # its file may be gone already (state/cleanup.py)
            log.info("staged split %s was applied before a restart", staged.split.split.split_id)
            return
        as_of = dataclasses.replace(staged.split, high_watermark=max(staged.as_of, staged.split.high_watermark))
        assert staged.split.staged is not None  # a staged split names its rows' file
        data, unknown = conform_to(read_staged(staged.split.staged), writer.data_schema)
        if unknown:  # read before a DDL this stream's schema already reflects
            self._drifted(table_id, TableEventKind.ALTERED, as_of.high_watermark,
                          f"staged rows carry column(s) {', '.join(unknown)} the table no longer has")
        names = set(writer.schema.column_names)
        for record in staged.changes:
            if isinstance(record, ChangeRecord) and not record.image.keys() <= names:
                self._note_unknown_columns(table_id, record.image.keys() - names, record.offset)
        merged = merge_changes_into_table(writer.schema, data, staged.changes)
        if writer.write_split_table(as_of, merged, commit=commit):
            self.table_changes[table_id.quoted] += merged.num_rows
        log.info("applied staged split %s (%d rows, %d later changes merged, as of %s)",
                 staged.split.split.split_id, merged.num_rows, len(staged.changes), as_of.high_watermark)

    def _apply(self, segment: list[TableChanges], version: int) -> set[TableId]:
        """Apply a segment of changes (one table's in binlog order); the tables it merged into. A table
        whose changes the sink refuses (``Sink.refuses``) is frozen at the first one it refuses; one
        whose sink table cannot be prepared or its changes conformed, at its first change here."""
        by_table: dict[TableId, list[TableChanges]] = {}
        for piece in segment:
            if piece.data.num_rows:
                by_table.setdefault(piece.table_id, []).append(piece)
        merged: dict[TableId, int] = {}
        for table_id, pieces in by_table.items():
            count = self._guarded(table_id, offset_at(pieces[0].data, 0), "cannot be prepared for the sink",
                                  lambda: self._merge(table_id, pieces, version))  # noqa: B023 - called at once
            if count:
                merged[table_id] = count
        self.table_changes.update({t.quoted: n for t, n in merged.items()})
        return set(merged)

    def _merge(self, table_id: TableId, pieces: list[TableChanges], version: int) -> int:
        writer = self._writer(table_id)
        conformed = []
        for piece in pieces:
            data, unknown = conform_changes(piece.data, writer.data_schema)
            if unknown:
                self._note_unknown_columns(table_id, unknown, offset_at(piece.data, 0))
            conformed.append(data)
        return self._merge_until_refused(table_id, pa.concat_tables(conformed), version)

    def _merge_until_refused(self, table_id: TableId, changes: pa.Table, version: int) -> int:
        """Merge the table's changes in one commit; when the sink refuses them (``Sink.refuses``), the
        changes before the first one it refuses are merged (halving: a few commits, on a rare path)
        and the table is frozen at that change. Returns how many were merged."""
        try:
            counts = apply_table_changes(self.writers, {table_id: changes}, app_id=self.job.app_id,
                                         batch_id=version, changelog=self.job.changelog)
            return counts.get(table_id, 0)
        except Exception as exc:  # noqa: BLE001 - what is not the table's is raised again
            if not self.sink.refuses(table_id, exc):
                raise
            if changes.num_rows == 1:
                offset = offset_at(changes, 0)
                self._failed(table_id, offset, f"a change at {offset} cannot be written to the sink: "
                                               f"{describe_error(exc)}")
                return 0
        half = changes.num_rows // 2
        merged = self._merge_until_refused(table_id, changes.slice(0, half), version)
        if table_id in self.frozen:
            return merged
        return merged + self._merge_until_refused(table_id, changes.slice(half), version)

    def _guarded(self, table_id: TableId, offset: BinlogOffset, what: str, operation: Callable[[], Any]) -> Any:
        """``operation`` on one table; when the sink refuses it as this table's fault, the table is
        frozen at ``offset`` (its change there ``what``) instead of the batch failing."""
        try:
            return operation()
        except Exception as exc:  # noqa: BLE001 - what is not the table's is raised again
            if not self.sink.refuses(table_id, exc):
                raise
            self._failed(table_id, offset, f"a change at {offset} {what}: {describe_error(exc)}")
            return None

    def _failed(self, table_id: TableId, offset: BinlogOffset, reason: str) -> None:
        """A change of the table at ``offset`` cannot be applied: the table stops there, the others go on."""
        since = self.frozen.get(table_id)
        if table_id not in self.generation.tables or table_id in self.removed or (since is not None and since <= offset):
            return
        self._drifted(table_id, TableEventKind.FAILED, offset, f"{reason}; the sink keeps the table's changes before "
                                                               "it and the other tables go on")
        self._refreeze(table_id)

    def _cluster_due(self, tables: set[TableId]) -> None:
        """Between two batches (no merge of this stream runs meanwhile), cluster the data files of the
        tables this batch merged into, where ``cluster_after_files`` files need it."""
        if not self.job.cluster_after_files or not tables:
            return
        self.fence()  # a stream another one took over stops here, as at the next batch
        for table_id in sorted(tables - set(self.frozen)):
            started = time.monotonic()
            try:
                result = self.sink.cluster(table_id, min_files=self.job.cluster_after_files)
            except Exception as exc:  # noqa: BLE001 - the batch is applied; clustering can wait for the next one
                log.warning("clustering %s failed (the batch stands; the next batch tries again): %s: %s", table_id,
                            type(exc).__name__, exc)
                continue
            if result is not None:
                log.info("clustered %s by its chunk key: %s in %.1fs", table_id, result, time.monotonic() - started)

    def maintain_idle(self) -> None:
        """From the driver's loop while the query waits for binlog (no batch runs): what ``maintain_due``
        does, so a maintenance task is answered by a quiet stream too. A batch that starts meanwhile
        waits for it."""
        if self.applying.acquire(blocking=False):
            try:
                self.maintain_due()
            finally:
                self.applying.release()

    def maintain_due(self) -> None:
        """Between two batches (no merge of this stream runs): answer the maintenance tasks' requests
        (state/maintenance.py), looked for every ``MAINTENANCE_POLL_S``, and run the stream's own
        maintenance every ``maintenance_every_s``. A failure is logged and reported, never the batch's."""
        now = time.monotonic()
        requests = []
        if now - self.requests_seen_at >= MAINTENANCE_POLL_S:
            self.requests_seen_at = now
            requests = self.maintenance.pending()
        own = bool(self.job.maintenance_every_s) and now - self.maintained_at >= self.job.maintenance_every_s
        if not requests and not own:
            return
        self.fence()  # a stream another one took over touches nothing
        captured = sorted(self.state.load(self.state.latest_number()).tables)
        for request in requests:
            wanted = set(request.tables)
            tables = [t for t in captured if not wanted or t.quoted in wanted]
            log.info("maintenance asked by %s: %s of %d table(s)", request.requested_by, request.policy, len(tables))
            self.maintenance.answer(self._maintain(request.request_id, request.policy, tables))
        if own:
            self.maintained_at = time.monotonic()
            policy = MaintenancePolicy(vacuum_retention_s=self.job.vacuum_retention_s)
            log.info("the stream's maintenance, every %.0fs: %s of %d table(s)", self.job.maintenance_every_s, policy,
                     len(captured))
            self._maintain(f"stream-{self.job.app_id}", policy, captured)

    def _maintain(self, request_id: str, policy: MaintenancePolicy, tables: list[TableId]) -> MaintenanceReport:
        started = time.monotonic()
        done: list[TableMaintenance] = []
        for table_id in tables:
            try:
                done += self.sink.maintain(table_id, policy)
            except Exception as exc:  # noqa: BLE001 - the stream goes on; the report says what failed
                log.warning("maintenance of %s failed (the stream goes on): %s: %s", table_id, type(exc).__name__, exc)
                done.append(TableMaintenance(self.sink.table_uri(table_id), 0, 0, note=f"failed: {exc}"))
        return MaintenanceReport(request_id, f"the stream {self.job.app_id}", policy, done,
                                 round(time.monotonic() - started, 3))

    def _schema_changed(self, event: SchemaChangeEvent, version: int) -> bool:
        """Follow a DDL statement table by table (docs/events-and-types.md, "Event -> what happens to the sink");
        True when it committed something to the sink under ``version``."""
        committed = False
        altered = []
        for change in event.changes:
            table_id, kind = change.table, change.kind
            if table_id not in self.generation.tables or table_id in self.removed:
                continue
            since = self.frozen.get(table_id)
            if since is not None and event.offset > since:
                if kind in (TableEventKind.CREATED, TableEventKind.REPLACED):
                    self._drifted(table_id, TableEventKind.CREATED, event.offset,
                                  f"created again by {event.statement[:300]!r}")
                continue  # the name holds another table than the sink's: nothing of it applies
            if kind is TableEventKind.TRUNCATED:
                self._truncate(table_id, event, version)
                committed = True
            elif kind.ends_table:
                what = f"{kind.value}{f' (now {change.other})' if kind is TableEventKind.RENAMED else ''}"
                self._drifted(table_id, kind, event.offset, f"{what} by {event.statement[:300]!r}; the sink keeps its "
                                                            "last state")
                self._refreeze(table_id)
            elif kind is TableEventKind.ROWS_CHANGED:
                self._drifted(table_id, kind, event.offset, f"rows removed or exchanged without row events by "
                                                            f"{event.statement[:300]!r}")
            elif kind is TableEventKind.ALTERED:
                altered.append(table_id)
        log.warning("schema change at %s: %s (%s)", event.offset, event.statement,
                    ", ".join(f"{c.table} {c.kind.value}" for c in event.changes))
        return self._reload_altered(altered, event, version) or committed

    def _purged(self, gap: BinlogPurged) -> None:
        """Binlog this batch needed was purged: freeze exactly the tables that needed it."""
        tables = gap.tables if gap.tables is not None else \
            [t for t, c in sorted(self.generation.tables.items()) if c.first_high_watermark < gap.resumed_at]
        log.warning("binlog from %s to %s was purged before the stream read it (on_binlog_purged='resnapshot'): %s",
                    gap.lost_from, gap.resumed_at, ", ".join(map(str, tables)) or "no table needed it")
        for table_id in tables:
            self._drifted(table_id, TableEventKind.BINLOG_PURGED, gap.resumed_at,
                          f"binlog from {gap.lost_from} to {gap.resumed_at} was purged before the stream read it; the "
                          "sink keeps the table as it was")
            self._refreeze(table_id)

    def _truncate(self, table_id: TableId, event: SchemaChangeEvent, version: int) -> None:
        """Remove the rows older than the TRUNCATE; a split read after it keeps its rows."""
        if self._writer(table_id).truncate_before(event.offset, event.timestamp_ms, app_id=self.job.app_id,
                                                  batch_id=version, changelog=self.job.changelog):
            self.table_changes[table_id.quoted] += 0  # changed, by no count of rows

    def _reload_altered(self, altered: list[TableId], event: SchemaChangeEvent, version: int) -> bool:
        """Reload the altered tables' schemas; True when it committed something under ``version``.
        A column that vanished is drift. A column the statement adds that rows existing before it hold
        a value in gets that value in the sink's older rows when it is a constant DEFAULT the server
        still has (``_fill_added``); otherwise (an expression, generated, NOT NULL without DEFAULT)
        it is drift too: the sink has those rows with NULL there until they are read again."""
        committed = False
        # the columns before: this stream's schema, or (first time it meets the table) the sink's
        before = {t: set(self.writers[t].schema.column_names) if t in self.writers else
                  set(self.sink.column_names(t)) - set(METADATA_COLUMNS) for t in altered}
        old = {t: self._writer(t) for t in altered}  # the schema the table's changes so far were written under
        schemas = self.source.run(lambda conn: [self.known.load(conn, t, remember=False) for t in altered],
                                  "reading table schemas")
        added = {c.table: c.added_columns for c in event.changes if c.kind is TableEventKind.ALTERED}
        for table_id, schema in zip(altered, schemas):
            keys, chunk_key = old[table_id].schema.key_columns, old[table_id].chunk_key
            if schema.key_columns != keys or chunk_key not in schema.column_names or orders_differently(
                    old[table_id].schema.column(chunk_key), schema.column(chunk_key)):
                # the sink's rows cannot be matched to the changes from here on: the old writer (and
                # the remembered schema, which a replay of the changes before this DDL needs) stay
                self._drifted(table_id, TableEventKind.KEY_CHANGED, event.offset,
                              f"key ({', '.join(keys)}; chunk key {chunk_key}) changed by {event.statement[:300]!r} "
                              f"to ({', '.join(schema.key_columns)}{_collated(schema, chunk_key)}); the sink keeps "
                              "the table's last state")
                self._refreeze(table_id)
                continue
            try:
                self._make_writer(schema, chunk_key)
            except SchemaChangedError as exc:  # a type the sink's table cannot take: this table only stops
                self._drifted(table_id, TableEventKind.TYPE_CHANGED, event.offset,
                              f"{exc} (changed by {event.statement[:300]!r}; the sink keeps the table's last state)")
                self._refreeze(table_id)
                continue
            self.known.remember(schema)
            vanished = before[table_id] - set(schema.column_names)
            if vanished:
                self._drifted(table_id, TableEventKind.ALTERED, event.offset,
                              f"column(s) {', '.join(sorted(vanished))} dropped or renamed by {event.statement[:300]!r}")
            present = {c.name: c for c in schema.columns}
            filled = tuple(n for n in added.get(table_id, ()) if n in present and present[n].fills_existing_rows)
            unfilled, wrote = self._fill_added(table_id, filled, event, version)
            committed = committed or wrote
            if unfilled:
                self._drifted(table_id, TableEventKind.ALTERED, event.offset,
                              f"column(s) {', '.join(unfilled)} added by {event.statement[:300]!r} hold a default (or "
                              "generated) value in rows written before, which the binlog does not carry")
        return committed

    def _fill_added(self, table_id: TableId, names: tuple[str, ...], event: SchemaChangeEvent,
                    version: int) -> tuple[tuple[str, ...], bool]:
        """Give the sink's rows older than ``event`` the constant DEFAULT of the columns it added, as
        the server evaluates it now (``DEFAULT(col)``), provided no later DDL changed the table (the
        default would not be the one those rows got) within ``FILL_LOOKAHEAD_EVENTS`` events.
        Returns the columns it could not fill, and whether it committed."""
        writer = self.writers[table_id]
        constant = tuple(n for n in names if writer.schema.column(n).default_constant)
        if not constant:
            return names, False

        def defaults(conn: Any) -> dict[str, Any] | None | Literal[False]:
            head = current_offset(conn).in_epoch(event.offset.epoch)  # the server the event was just read from
            later = table_ddl_after(conn, table_id, event.offset, head, FILL_LOOKAHEAD_EVENTS)
            return False if later is not False else column_defaults(conn, writer.schema, constant)

        values = self.source.run(defaults, "reading the added columns' defaults")
        rest = tuple(n for n in names if n not in constant)
        if values is False:
            log.info("%s: not filling %s from DEFAULT: a later DDL changed the table, or it lies too far ahead",
                     table_id, ", ".join(constant))
            return names, False
        if values is None:  # no row now: every row older than the ALTER is deleted by a later change
            return rest, False
        try:
            wrote = writer.fill_before(event.offset, values, app_id=self.job.app_id, batch_id=version)
            if wrote:
                self.table_changes[table_id.quoted] += 0
        except ValueError as exc:  # a type without an SQL literal: re-snapshot instead
            log.warning("%s: cannot fill %s in place (%s)", table_id, ", ".join(constant), exc)
            return names, False
        log.info("%s: rows older than %s got the DEFAULT of %s", table_id, event.offset,
                 ", ".join(f"{n} = {values[n]!r}" for n in constant))
        return rest, wrote

    def _note_unknown_columns(self, table_id: TableId, unknown: Iterable[str], offset: BinlogOffset) -> None:
        """Changes written before a DDL the loaded schema already reflects carry names it lacks (noted
        once per table and batch)."""
        if table_id in self.unknown_noted:
            return
        self.unknown_noted.add(table_id)
        self._drifted(table_id, TableEventKind.ALTERED, offset,
                      f"changes carry column(s) {', '.join(sorted(unknown))} the table no longer has")

    def _drifted(self, table_id: TableId, kind: TableEventKind, offset: BinlogOffset, reason: str) -> None:
        if record_drift(self.state, self.drift, table_id, kind, offset, reason):
            log.warning("%s at %s: %s. The sink cannot follow this exactly by itself: the next DAG run re-snapshots "
                        "the table if it exists on the source (state/drift.py)", table_id, offset, reason)

    def _log_progress(self, batch_id: int, changes: int, units: int, spill_files: int, newest: int,
                      applied_to: BinlogOffset | None, read_s: float, seconds: float) -> None:
        head = self.source.run(ServerEpochs(self.state).head, "reading the binlog head")
        lag_s = time.time() - newest / 1000 if newest else 0.0
        log.info("stream batch %d: %d changes applied in %.2fs (%.2fs reading the binlog, %.2fs merging; %d unit(s), "
                 "%d spill file(s); %d in total); binlog head %s; event-time lag %.1fs", batch_id, changes, seconds,
                 read_s, seconds - read_s, units, spill_files, self.rows_applied, head, lag_s)
        self.state.write_progress(STREAM_PROGRESS, StreamBatchProgress(
            app_id=self.job.app_id, batch=batch_id, finished_at=time.time(), changes_in_batch=changes,
            changes_total=self.rows_applied, last_change_offset=applied_to, last_change_time_ms=newest or None,
            head_at_batch_end=head, tables=sorted(str(t) for t in self.writers), table_changes=dict(self.table_changes),
            started_at=self.started_at, generation=self.generation.number, batch_seconds=round(seconds, 3),
            lag_s=round(lag_s, 3)))


def progress_offset(progress: Any, which: str) -> StreamOffset | None:
    """``startOffset`` or ``endOffset`` of a query progress (StreamingQueryProgress and SourceProgress are dicts)."""
    sources = (progress or {}).get("sources")
    text = sources[0].get(which) if sources else None
    try:
        data = json.loads(text) if text else None
    except ValueError:  # no offset yet (the first batch of a query)
        return None
    return StreamOffset.from_spark(data, f"the query progress's {which}") if data else None


def record_processed_offset(state: PipelineState, job: StreamJob, progress: Any,
                            measure: Callable[[BinlogOffset], tuple[BinlogOffset, int | None]] | None = None) -> None:
    """Where the stream has processed to (a query progress's end offset), for ``bin/status``, the
    metrics and a later stream whose checkpoint is new (``resume_offset``); with ``measure`` (the
    server's head, and the bytes from the end to it), how far behind the head that is, also added
    to the stream's history (the UI's lag chart) with the batch's lag."""
    end = progress_offset(progress, "endOffset")
    if not end:
        return
    head, behind = None, None
    if measure is not None:
        try:
            head, behind = measure(end.offset)
        except Exception as exc:  # noqa: BLE001 - a figure for people: never stop the stream for it
            log.info("could not measure how far the stream is behind the binlog head: %s", exc)
    now = time.time()
    state.write_progress(STREAM_OFFSET, StreamOffsetProgress(end, now, job.sink_root, job.app_id, head, behind))
    if measure is not None:
        batch = state.read_progress(StreamBatchProgress, STREAM_PROGRESS)
        ours = batch if batch is not None and batch.app_id == job.app_id and batch.batch == progress.get("batchId") \
            else None
        history = state.read_progress(StreamHistory, STREAM_HISTORY) or StreamHistory()
        state.write_progress(STREAM_HISTORY, history.with_point(HistoryPoint(
            now, ours.lag_s if ours else 0.0, behind, ours.changes_in_batch if ours else 0)))


@dataclass(frozen=True)
class StreamIdentity:
    app_id: str  # the app id of the stream's Delta txn actions
    initial_offset: StreamOffset | None  # where batch 0 starts, the same if Spark runs batch 0 again
    new: bool  # the checkpoint was created now


def stream_identity(checkpoint: str, first_offset: Callable[[], StreamOffset]) -> StreamIdentity:
    """The stream's identity, kept in a file of ours inside its checkpoint (a deleted checkpoint takes
    it along). A new checkpoint also records where its first batch starts (``first_offset()``):
    Spark asks the source for that again when it re-runs a batch 0 that did not commit, and the
    registry may have moved on meanwhile."""
    fs, path = fsspec.core.url_to_fs(checkpoint)
    path = path.rstrip("/")
    file = f"{path}/{CHECKPOINT_IDENTITY}"
    if fs.exists(file):
        with fs.open(file, "r") as f:
            known = decode(CheckpointIdentity, json.load(f), f"{checkpoint.rstrip('/')}/{CHECKPOINT_IDENTITY}")
        return StreamIdentity(known.app_id, known.initial_offset, False)
    new = not (fs.exists(f"{path}/offsets") and fs.ls(f"{path}/offsets", detail=False))
    identity = StreamIdentity(f"mysqlcdc-{uuid.uuid4().hex[:16]}", first_offset() if new else None, new)
    fs.makedirs(path, exist_ok=True)
    with fs.open(file, "w") as f:
        json.dump(encode(CheckpointIdentity(identity.app_id, identity.initial_offset, time.time())), f)
    return identity


def resume_offset(state: PipelineState, job: StreamJob) -> StreamOffset | None:
    """Where a stream with a new checkpoint starts: the end of the last batch a stream of this
    pipeline committed into the same sink (every table holds every change up to it)."""
    progress = state.read_progress(StreamOffsetProgress, STREAM_OFFSET)
    return progress.offset if progress and progress.sink_root == job.sink_root else None


def refuse_positions_beyond_the_head(source: SourceConfig, state: PipelineState, sink: Sink) -> None:
    """A sink table recorded past the server's binlog head was written from another binlog: the
    server's binlog was reset (RESET MASTER), restored, or this is another server."""
    head = source.run(ServerEpochs(state).head, "reading the binlog head")  # in its epoch: after a failover, later
    for table_id in sorted(state.latest().tables):
        position = sink.applied_position(table_id)
        if position is not None and position[:2] > head.sort_key:
            raise binlog_changed_error(f"The sink table of {table_id} holds changes up to binlog file number "
                                       f"{position[0]} position {position[1]}, beyond the server's binlog head {head}")


def release_applied_staged_files(state: PipelineState, committed: StreamOffset | None) -> None:
    """Delete staged files no restart from a checkpoint at ``committed`` can read (state/cleanup.py)."""
    if not committed:
        return
    try:
        release_staged_files(state, committed.generation)
    except Exception as exc:  # never stop the stream for housekeeping: the files stay until the next batch
        log.warning("could not release staged split files yet: %s", exc)


class BatchFollower:
    """Follows the query's finished micro-batches from the process that started it, polled while it
    runs (``follow``): records each one's end offset and releases the staged files it made
    unreplayable, unless another stream took the pipeline over meanwhile (``fence``). With
    ``echo_batches`` it also logs each batch's progress as the batch recorded it: on a Spark Connect
    session the batch is applied, and logs, on the server, while this runs here, where the task log is.

    Polled rather than a ``StreamingQueryListener``: on Spark Connect a listener runs in a client
    thread fed by a long-running call, and removing it while an event is pending can deadlock
    (SPARK-59623); the query's ``recentProgress`` serves both kinds of session alike."""

    def __init__(self, state: PipelineState, job: StreamJob, fence: Callable[[], None], *, echo_batches: bool = False,
                 measure: Callable[[BinlogOffset], tuple[BinlogOffset, int | None]] | None = None):
        self.state = state
        self.job = job
        self.fence = fence
        self.echo_batches = echo_batches
        self.measure = measure  # the head and the bytes behind it of a batch's end (record_processed_offset)
        self.last_batch = -1

    def follow(self, query: Any) -> None:
        """Handle the batches that finished since the last call, in order."""
        new = [p for p in query.recentProgress or () if p.get("batchId", -1) > self.last_batch]
        if not new:
            return
        try:
            self.fence()
        except LeaseLost:
            return
        for progress in new:
            if self.last_batch < 0:  # the start-up's share of the first batch, in the task log
                log.info("first batch %d, Spark's phases: %s", progress["batchId"], ", ".join(
                    f"{name} {ms} ms" for name, ms in sorted((progress.get("durationMs") or {}).items())))
            self.last_batch = progress["batchId"]
            last = progress is new[-1]  # the server is asked once per look, for the newest batch
            record_processed_offset(self.state, self.job, progress, self.measure if last else None)
            # the batch's start is the previous batch's end: committed in the checkpoint, never replayed
            release_applied_staged_files(self.state, progress_offset(progress, "startOffset"))
        if self.echo_batches:
            self._echo(self.last_batch)

    def _echo(self, batch_id: int) -> None:
        batch = self.state.read_progress(StreamBatchProgress, STREAM_PROGRESS)
        if batch is None or batch.app_id != self.job.app_id or batch.batch != batch_id:
            return
        lag_s = batch.finished_at - batch.last_change_time_ms / 1000 if batch.last_change_time_ms else 0.0
        log.info("stream batch %d: %d changes applied (%d in total); binlog head %s; event-time lag %.1fs", batch_id,
                 batch.changes_in_batch, batch.changes_total, batch.head_at_batch_end, lag_s)


def _collated(schema: TableSchema, chunk_key: str) -> str:
    column = schema.column(chunk_key) if chunk_key in schema.column_names else None
    return f"; chunk key {column.column_type} COLLATE {column.collation}" if column and column.collation else ""


def run_stream_job(spark: Any, source: SourceConfig, job: StreamJob, *, source_file: str) -> dict[str, Any]:
    """Run the stream on ``spark``. Its Spark side reads the source's password (and the object store's
    credentials) from the private file ``source_file``: the task's under spark-submit, the server's on
    a Spark Connect session (spark/connect.py). Nothing secret travels with the functions Spark runs."""
    if not source_file:
        raise ValueError("the stream's Spark side needs source_file, the private credentials file it reads")
    state = PipelineState(job.state)
    app_id, ui_url = application_of(spark)
    log.info("stream job started on Spark application %s; binlog rows decoded by the %s decoder here (executors "
             "without the compiled one use its Python twin)", app_id, chosen_decoder())
    # first of all: nothing below may run while another stream runs (it deletes spill folders, too)
    held = StreamLeases(state).acquire(job.holder or f"a stream started outside Airflow ({app_id})",
                                       ttl_s=job.lease_ttl_s, report=job.report)
    held.renew(app_id=app_id, ui_url=ui_url)
    # a detached stream is asked to stop through its report folder: even before it holds the lease
    requested = (lambda: stop_request(job.report)) if job.report else (lambda: None)
    with LeaseKeeper(held, stop_stream=lambda: stop_queries(spark), stop_requested=requested) as keeper:
        result = _run_stream(spark, source, job, source_file, state, held.check)
        if keeper.lost:
            raise keeper.lost
        if keeper.stop_reason:
            log.info("the stream stopped on request: %s", keeper.stop_reason)
        return result


def stop_queries(spark: Any, grace_s: float = 10.0) -> None:
    """Stop the stream's query; end the driver when it has not stopped within ``grace_s`` (a query
    stopped in the middle of planning a batch may wait forever). Either way is safe: the stream
    resumes exactly from its checkpoint, as after a kill -9."""
    stopper = threading.Thread(target=lambda: [query.stop() for query in spark.streams.active], daemon=True)
    stopper.start()
    stopper.join(grace_s)
    if stopper.is_alive():
        log.error("the stream's query did not stop within %.0fs: ending its driver", grace_s)
        if is_connect(spark):  # the query runs on the server: ending the session there stops it
            release = threading.Thread(target=spark.stop, daemon=True)
            release.start()
            release.join(grace_s)
        logging.shutdown()
        os._exit(3)


def _run_stream(spark: Any, source: SourceConfig, job: StreamJob, source_file: str, state: PipelineState,
                fence: Callable[[], None]) -> dict[str, Any]:
    preparing = time.monotonic()
    source = source.with_retry(job.retry_budget_s)
    connect = is_connect(spark)  # the applier and the source's readers run on a Spark Connect server
    spark_side = source.for_executors(source_file)  # what the functions Spark runs get: no password
    applier = BatchApplier(spark_side, job, fence)
    refuse_positions_beyond_the_head(source, state, applier.sink)
    remove_all_spill_folders(state)
    identity = stream_identity(job.checkpoint, lambda: resume_offset(state, job) or registry_start_offset(state))
    job.app_id = job.app_id or identity.app_id
    if identity.new:
        log.info("stream checkpoint %s is new (identity %s): it starts at %s, and applies to each table only the "
                 "changes after the position the table records", job.checkpoint, identity.app_id, identity.initial_offset)
    log.info("stream prepared in %.2fs (lease, sink positions against the binlog head, spill folders, checkpoint "
             "identity)", time.monotonic() - preparing)
    setting_up = time.monotonic()
    spark.dataSource.register(BinlogDataSource)
    reader = spark.readStream.format(SOURCE_NAME).option("job", job.to_json()).option("source", spark_side.to_json())
    if identity.initial_offset:
        reader = reader.option("initial_offset", json.dumps(identity.initial_offset.to_spark()))
    stream = reader.load()
    writer = stream.writeStream.foreachBatch(applier).option("checkpointLocation", job.checkpoint)
    if job.mode == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{job.trigger_interval_s} seconds")
    started, started_at = time.monotonic(), time.time()
    log.info("stream query set up in %.2fs (Spark plans the binlog source in a Python worker); starting it",
             started - setting_up)
    epochs = ServerEpochs(state)
    follower = BatchFollower(state, job, fence, echo_batches=connect, measure=lambda end: source.run(
        lambda conn: epochs.behind(conn, end), "measuring the stream's distance to the binlog head"))
    query = writer.start()
    while not query.awaitTermination(1):
        follower.follow(query)
        if not connect:  # on a Spark Connect session the applier lives on the server: between batches only
            applier.maintain_idle()
    fence()  # stopped because another stream took over: record nothing
    follower.follow(query)  # the batches that finished since its last look (all of a short available-now run)
    progress = query.lastProgress or {}
    # the query ended without error: its last batch is committed too
    end = progress_offset(progress, "endOffset")
    release_applied_staged_files(state, end)
    if connect:
        applied, table_changes = changes_applied_since(state, job, started_at)
    else:
        applied, table_changes = applier.rows_applied, dict(applier.table_changes)
    return encode(StreamResult(job.mode, applied, job.app_id, round(time.monotonic() - started, 3),
                               progress.get("batchId"), end, table_changes))


def changes_applied_since(state: PipelineState, job: StreamJob, since: float) -> tuple[int, dict[str, int]]:
    """The changes this stream applied, in all and per table, by its batches' progress record: on a
    Spark Connect session the ``BatchApplier`` that counts them runs on the server, not in this process."""
    progress = state.read_progress(StreamBatchProgress, STREAM_PROGRESS)
    if progress is None or progress.app_id != job.app_id or progress.finished_at < since:
        return 0, {}
    return progress.changes_total, progress.table_changes
