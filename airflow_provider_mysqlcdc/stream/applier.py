"""``BatchApplier``: the items of one micro-batch applied to the sink in binlog order, unit by unit.

A batch is applied under the registry generation it was planned with (``gen`` on its rows), so a
batch replayed after a restart decides exactly as the first time: which tables are captured, and
which are frozen because their name stopped holding the captured table (state/drift.py). Tables a
newer generation no longer captures (the user removed them) are left out at once, so a batch that
failed because of one of them is not replayed into the same failure.

Each unit of work (a run of changes, a staged split, a TRUNCATE) commits on its own with the
position it reaches (sinks/writer.py), so a replayed batch redoes exactly what no table holds yet;
``batch_id * SEGMENTS + n`` names the unit in the sink's log. A run longer than
``max_apply_changes`` is merged in pieces, so memory never holds more.

One table's failure is that table's: a change the executors could not decode or type
(``TableFailed``), or that the sink refuses (``Sink.refuses``: a constraint, a type), freezes the
table at that change (``TableEventKind.FAILED``, the error as the reason) and the others go on; the
next DAG run re-snapshots it. Any other error fails the batch. What a DDL or a purge gap does is in
schema_changes.py.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from airflow_provider_mysqlcdc.cdc.errors import SchemaChangedError, describe_error
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import BinlogPurged, ChangeRecord, TableEventKind, TableFailed
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.progress import StreamBatchProgress
from airflow_provider_mysqlcdc.protocol.registry import Generation
from airflow_provider_mysqlcdc.sinks.arrow_rows import conform_to, merge_changes_into_table
from airflow_provider_mysqlcdc.sinks.base import Sink
from airflow_provider_mysqlcdc.sinks.change_columns import TableChanges, changes_before, conform_changes, offset_at
from airflow_provider_mysqlcdc.sinks.routing import captured_target, sink_target
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_table_changes, merge_outcomes, staged_position
from airflow_provider_mysqlcdc.state.drift import Drift, read_drift
from airflow_provider_mysqlcdc.state.generations import first_high_watermark
from airflow_provider_mysqlcdc.state.registry import STREAM_PROGRESS, PipelineState
from airflow_provider_mysqlcdc.state.schemas import KnownSchemas, orders_differently
from airflow_provider_mysqlcdc.state.staged import read_staged
from airflow_provider_mysqlcdc.stream.events import BatchItem, StagedSplitReady, TablesActivated
from airflow_provider_mysqlcdc.stream.schema_changes import SchemaChangeRules
from airflow_provider_mysqlcdc.stream.tables import TableSource

log = logging.getLogger(__name__)

#: merges of one micro-batch are versioned batch_id * SEGMENTS + segment (a DDL starts a new segment)
SEGMENTS = 1_000_000


@dataclass
class AppliedBatch:
    """What applying one batch did."""

    changes: int = 0  # row changes applied (of tables neither frozen nor removed)
    skipped: int = 0  # row changes of frozen or removed tables, left out
    units: int = 1  # units of work, each its own commit per table
    newest_ms: int = 0  # the newest event time among the batch's items
    last_change: BinlogOffset | None = None  # the offset of the batch's last row change
    merged_tables: set[TableId] = field(default_factory=set)  # tables a merge wrote into


class BatchApplier:
    """A micro-batch's items applied to ``sink`` (module doc). ``tables`` answers what the rules ask
    the source; ``fence`` raises when another stream took the pipeline over (state/lease.py)."""

    def __init__(self, job: StreamJob, sink: Sink, state: PipelineState, tables: TableSource, known: KnownSchemas,
                 fence: Callable[[], None] = lambda: None):
        self.job = job
        self.sink = sink
        self.state = state
        self.tables = tables
        self.known = known
        self.fence = fence
        self.writers: dict[TableId, SinkWriter] = {}
        #: the schema each table's writer was made for (under ``ignore``, before the sink's columns were kept)
        self.made_for: dict[TableId, TableSchema] = {}
        #: the tables the current batch activated whole whose writers are not made yet (``_activate``)
        self.whole_pending: set[TableId] = set()
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
        #: DDL, purge gaps, drift and freezing of this batch's tables (schema_changes.py)
        self.rules = SchemaChangeRules(self)

    def apply_batch(self, generation: int | None, items: Iterable[BatchItem], batch_id: int) -> AppliedBatch:
        """Apply a batch's items (in binlog order) under the registry ``generation`` it was planned
        with (None: an empty batch)."""
        if generation is not None:
            self._begin(generation)
        done = AppliedBatch()
        self.whole_pending = set()
        segment: list[TableChanges] = []
        under: dict[TableId, TableSchema | None] = {}  # the schema of each table's changes in the segment
        unit = staged = pending = 0
        for item in items:
            if isinstance(item, TableChanges):
                last = item.last_offset
                done.newest_ms = max(done.newest_ms, item.newest_ms)
                done.last_change = max(done.last_change or last, last)
                data = self._applicable(item.table_id, item.data)
                done.skipped += item.data.num_rows - data.num_rows
                if data.num_rows and under.get(item.table_id, item.schema) != item.schema:
                    # written under another schema than the table's changes before them in this unit
                    # (a DDL the reader did not see between them): a unit of their own
                    done.merged_tables |= self._apply(segment, batch_id * SEGMENTS + unit)
                    segment, under, unit, pending = [], {}, unit + 1, 0
                while data.num_rows:  # cut where a unit reaches max_apply_changes
                    under[item.table_id] = item.schema
                    room = self.job.max_apply_changes - pending
                    segment.append(TableChanges(item.table_id, data.slice(0, room), item.schema))
                    pending += min(room, data.num_rows)
                    done.changes += min(room, data.num_rows)
                    data = data.slice(room)
                    if pending >= self.job.max_apply_changes:
                        done.merged_tables |= self._apply(segment, batch_id * SEGMENTS + unit)
                        segment, under, unit, pending = [], {}, unit + 1, 0
                        rest = self._applicable(item.table_id, data)  # the table may have failed in that unit
                        done.skipped, data = done.skipped + data.num_rows - rest.num_rows, rest
                continue
            done.newest_ms = max(done.newest_ms, getattr(item, "timestamp_ms", 0))
            done.merged_tables |= self._apply(segment, batch_id * SEGMENTS + unit)
            segment, under, unit, pending = [], {}, unit + 1, 0
            if isinstance(item, TablesActivated):
                self._activate(item)
            elif isinstance(item, BinlogPurged):
                self.rules.purged(item)
            elif isinstance(item, TableFailed):
                self._failed(item.table_id, item.offset, item.reason)
            elif isinstance(item, StagedSplitReady):
                self._apply_staged(item, batch_id * SEGMENTS + unit, staged)
                unit, staged = unit + 1, staged + 1
            elif self.rules.schema_changed(item, batch_id * SEGMENTS + unit):
                unit += 1
        done.merged_tables |= self._apply(segment, batch_id * SEGMENTS + unit)
        done.units = unit + 1
        self.rows_applied += done.changes
        if done.skipped:
            log.info("skipped %d change(s) of frozen or removed table(s) %s", done.skipped,
                     ", ".join(map(str, sorted(self.frozen.keys() | self.removed))))
        return done

    def _load_writers(self, chunk_keys: dict[TableId, str], whole: tuple[TableId, ...] = ()) -> None:
        """Load the schema of each table and make its writer. A table that has left the server (a
        batch replayed from before its DROP) keeps its last remembered schema, and so does a table
        whose key or a column's type a DDL the stream has not reached yet changed (state/schemas.py).
        ``whole``: tables being (re-)snapshotted entirely, whose sink table takes the new schema even
        where the sink cannot evolve a column's type (it is replaced by an empty one of that schema).
        A whole re-snapshot that repairs a table the stream froze takes the server's schema (and the
        pipeline remembers it): the changes from before the statement that froze it, for which the
        remembered schema was kept, lie behind the re-snapshot's splits now."""
        fresh = [t for t in chunk_keys if t in whole and self._repairs_a_freeze(t)]
        for schema in self.tables.current_schemas(fresh) if fresh else ():
            self.known.remember(schema)
            self._make_writer(schema, chunk_keys[schema.table_id], replace=True)
        kept = {t: k for t, k in chunk_keys.items() if t not in fresh}
        for schema, chunk_key in zip(self.tables.schemas_for_stream(kept) if kept else (), kept.values()):
            self._make_writer(schema, chunk_key, replace=schema.table_id in whole)

    def _repairs_a_freeze(self, table_id: TableId) -> bool:
        captured = self.generation.tables.get(table_id)
        return captured is not None and any(event.kind.freezes and event.offset < first_high_watermark(captured)
                                            for event in self.drift.get(table_id, []))

    def _make_writer(self, schema: TableSchema, chunk_key: str, *, replace: bool = False) -> None:
        """The table's writer of ``schema``; under ``schema_changes="ignore"`` only of the columns its sink
        table has (one that exists, and is not being replaced by a whole re-snapshot)."""
        self.made_for[schema.table_id] = schema
        if self.job.schema_changes == "ignore" and not replace:
            present = set(self.sink.column_names(sink_target(schema).table_id))
            if present:
                schema = schema.keeping(present)
        try:
            self.sink.prepare(schema)  # refuses unsafe type changes with a clear error
        except SchemaChangedError as exc:
            if not replace:
                raise
            log.warning("%s: %s. Its whole re-snapshot is being applied now: the sink table is replaced by an "
                        "empty one of the new schema, which the re-snapshot fills", schema.table_id, exc)
            self.sink.replace_schema(schema)
        writer = SinkWriter(self.sink, schema, chunk_key, self.tables.ordering(schema.column(chunk_key)))
        before = self.writers.get(schema.table_id)
        if before is not None and not replace and before.target == writer.target:
            writer.carry_positions(before)  # the same sink table: what it holds is known already
        self.writers[schema.table_id] = writer

    def _writer_as_of(self, table_id: TableId, schema: TableSchema | None, offset: BinlogOffset) -> SinkWriter | None:
        """The table's writer for changes written under ``schema`` (their table map's columns and key:
        ``TableChanges.schema``), made anew when the table's writer was made for another; None when the
        sink's table cannot take that schema's column types (the table is frozen at ``offset``, as a
        DDL changing them would have frozen it)."""
        if schema is None or self.made_for.get(table_id) == schema:
            return self._writer(table_id)
        chunk_key = self._chunk_key(table_id)
        if chunk_key not in schema.column_names:  # the key went (frozen by that DDL): the changes keep their writer
            return self._writer(table_id)
        # the key the sink's rows were written under: the table's writer's, else the schema the stream
        # keeps for it (the remembered one where a key change lies ahead of it: state/schemas.py)
        current = self.writers.get(table_id)
        keyed = current.schema if current is not None else self.tables.schemas_for_stream({table_id: chunk_key})[0]
        if chunk_key in keyed.column_names and (schema.key_columns != keyed.key_columns or orders_differently(
                keyed.column(chunk_key), schema.column(chunk_key))):
            # a key change no DDL here decided on (one met behind another DDL of the table): the sink's
            # rows cannot be matched to these changes
            self.rules.drifted(table_id, TableEventKind.KEY_CHANGED, offset,
                          f"changes at {offset} were written under the key ({', '.join(schema.key_columns)}), the "
                          f"sink's rows under ({', '.join(keyed.key_columns)}); the sink keeps the table's last state")
            self.rules.refreeze(table_id)
            return None
        try:
            self._make_writer(schema, chunk_key)
        except SchemaChangedError as exc:
            self.rules.drifted(table_id, TableEventKind.TYPE_CHANGED, offset,
                          f"{exc} (changes at {offset} were written under that type; the sink keeps the table's "
                          "last state)")
            self.rules.refreeze(table_id)
            return None
        return self.writers[table_id]

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
            self.known.generation = self.generation  # its column rules describe the tables from now on
        self.drift = read_drift(self.state)
        self.unknown_noted = set()
        self.frozen = {}
        for table_id in self.generation.tables:
            self.rules.refreeze(table_id)
        latest = self.state.latest_number()
        self.removed = set() if latest == generation else \
            set(self.generation.tables) - set(self.state.load(latest).tables)
        if self.removed:
            log.info("batch of generation %d: %s no longer captured (generation %d), left out", generation,
                     ", ".join(map(str, sorted(self.removed))), latest)

    def _chunk_key(self, table_id: TableId) -> str:
        if table_id in self.writers:
            return self.writers[table_id].chunk_key
        return self.generation.chunk_keys[table_id]  # restarted after the batch that activated it

    def _writer(self, table_id: TableId) -> SinkWriter:
        if table_id not in self.writers:
            self._load_writers({table_id: self._chunk_key(table_id)}, tuple({table_id} & self.whole_pending))
        return self.writers[table_id]

    def _activate(self, event: TablesActivated) -> None:
        """Prepare the sink tables the activation needs now: those not written yet, and those a whole
        re-snapshot repairing a freeze replaces. The others get their writers when a change, a DDL or
        a staged split first needs one, a change's made for the schema as of it (``_writer_as_of``):
        the server's schema of now may hold a DDL the stream has not reached, which the sink must
        not take before it (``schema_changes="fail"`` refuses it there)."""
        chunk_keys = {t: k for t, k in event.chunk_keys.items() if t not in self.removed}
        now = {t: k for t, k in chunk_keys.items() if (t in event.whole and self._repairs_a_freeze(t))
               or not self.sink.column_names(captured_target(t, self.generation.table_rule(t)).table_id)}
        for table_id in chunk_keys.keys() - now.keys():  # made again when next needed
            self.writers.pop(table_id, None)
            self.made_for.pop(table_id, None)
        self.whole_pending |= set(event.whole) & (chunk_keys.keys() - now.keys())
        self._load_writers(now, event.whole)
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
        commit = writer.commit(self.job.app_id, version, staged_position(staged.as_of, sequence))
        if writer.is_applied(commit.position):  # its file may be gone already (state/cleanup.py)
            log.info("staged split %s was applied before a restart", staged.split.split.split_id)
            return
        as_of = dataclasses.replace(staged.split, high_watermark=max(staged.as_of, staged.split.high_watermark))
        assert staged.split.staged is not None  # a staged split names its rows' file
        data, unknown = conform_to(read_staged(staged.split.staged), writer.data_schema)
        if unknown and self.rules.follows_columns:  # read before a DDL this stream's schema already reflects
            self.rules.drifted(table_id, TableEventKind.ALTERED, as_of.high_watermark,
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
        """Apply a segment of changes (one table's in binlog order); the tables it merged into. The
        tables are merged at once where the sink allows it (sinks/writer.py ``merge_outcomes``). A
        table whose changes the sink refuses (``Sink.refuses``) is frozen at the first one it refuses;
        one whose sink table cannot be prepared or its changes conformed, at its first change here."""
        by_table: dict[TableId, list[TableChanges]] = {}
        for piece in segment:
            if piece.data.num_rows:
                by_table.setdefault(piece.table_id, []).append(piece)
        changes: dict[TableId, pa.Table] = {}
        for table_id, pieces in by_table.items():
            conformed = self._guarded(table_id, offset_at(pieces[0].data, 0), "cannot be prepared for the sink",
                                      lambda: self._conformed(table_id, pieces))  # noqa: B023 - called at once
            if conformed is not None:
                changes[table_id] = conformed
        outcomes = merge_outcomes(self.writers, changes, app_id=self.job.app_id, batch_id=version,
                                  changelog=self.job.changelog, tables_fault=self.sink.refuses)
        errors = [(t, e) for t, e in outcomes.items() if isinstance(e, Exception) and not self.sink.refuses(t, e)]
        if errors:  # the batch fails (its replay merges what no table holds): the first error in the segment's order
            for table_id, error in errors[1:]:
                log.warning("merging into %s failed too: %s", table_id, describe_error(error))
            raise errors[0][1]
        merged: dict[TableId, int] = {}
        for table_id, outcome in outcomes.items():
            count = self._after_refusal(table_id, changes[table_id], version, outcome) \
                if isinstance(outcome, Exception) else outcome
            if count:
                merged[table_id] = count
        self.table_changes.update({t.quoted: n for t, n in merged.items()})
        return set(merged)

    def _conformed(self, table_id: TableId, pieces: list[TableChanges]) -> pa.Table | None:
        """The table's pieces of changes (all written under one schema: ``apply_batch``) as one table of
        its writer's columns, its writer made for that schema first (None: the table froze there)."""
        writer = self._writer_as_of(table_id, pieces[0].schema, offset_at(pieces[0].data, 0))
        if writer is None:
            return None
        conformed = []
        for piece in pieces:
            data, unknown = conform_changes(piece.data, writer.data_schema)
            if unknown:
                self._note_unknown_columns(table_id, unknown, offset_at(piece.data, 0))
            conformed.append(data)
        return pa.concat_tables(conformed)

    def _merge_until_refused(self, table_id: TableId, changes: pa.Table, version: int) -> int:
        """Merge the table's changes in one commit (``_after_refusal`` when that fails). Returns how
        many were merged."""
        try:
            counts = apply_table_changes(self.writers, {table_id: changes}, app_id=self.job.app_id,
                                         batch_id=version, changelog=self.job.changelog)
            return counts.get(table_id, 0)
        except Exception as exc:  # noqa: BLE001 - what is not the table's is raised again
            return self._after_refusal(table_id, changes, version, exc)

    def _after_refusal(self, table_id: TableId, changes: pa.Table, version: int, error: Exception) -> int:
        """The table's merge of ``changes`` failed with ``error``: raised again unless the sink refuses
        the changes (``Sink.refuses``); then the changes before the first one it refuses are merged
        (halving: a few commits, on a rare path) and the table is frozen at that change. Returns how
        many were merged."""
        if not self.sink.refuses(table_id, error):
            raise error
        if changes.num_rows == 1:
            offset = offset_at(changes, 0)
            self._failed(table_id, offset, f"a change at {offset} cannot be written to the sink: "
                                           f"{describe_error(error)}")
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
        self.rules.drifted(table_id, TableEventKind.FAILED, offset, f"{reason}; the sink keeps the table's changes before "
                                                               "it and the other tables go on")
        self.rules.refreeze(table_id)

    def _note_unknown_columns(self, table_id: TableId, unknown: Iterable[str], offset: BinlogOffset) -> None:
        """Changes written before a DDL the loaded schema already reflects carry names it lacks (noted
        once per table and batch)."""
        if table_id in self.unknown_noted or not self.rules.follows_columns:  # lenient, ignore: left out, not drift
            return
        self.unknown_noted.add(table_id)
        self.rules.drifted(table_id, TableEventKind.ALTERED, offset,
                      f"changes carry column(s) {', '.join(sorted(unknown))} the table no longer has")

    def record_progress(self, batch_id: int, done: AppliedBatch, spill_files: int, read_s: float,
                        seconds: float, reading: str = "") -> None:
        """Log the batch and write the stream's progress record (bin/status, metrics, the UI page);
        ``reading``: how its decoding tasks spent the reading seconds (``reading_summary``)."""
        changes, units, newest, applied_to = done.changes, done.units, done.newest_ms, done.last_change
        head = self.tables.head()
        lag_s = time.time() - newest / 1000 if newest else 0.0
        log.info("stream batch %d: %d changes applied in %.2fs (%.2fs reading the binlog, %.2fs merging; %d unit(s), "
                 "%d table(s), %d spill file(s); %d in total); binlog head %s; event-time lag %.1fs%s", batch_id, changes,
                 seconds, read_s, seconds - read_s, units, len(done.merged_tables), spill_files, self.rows_applied, head,
                 lag_s,
                 f"; reading: {reading}" if reading else "")
        self.state.write_progress(STREAM_PROGRESS, StreamBatchProgress(
            app_id=self.job.app_id, batch=batch_id, finished_at=time.time(), changes_in_batch=changes,
            changes_total=self.rows_applied, last_change_offset=applied_to, last_change_time_ms=newest or None,
            head_at_batch_end=head, tables=sorted(str(t) for t in self.writers), table_changes=dict(self.table_changes),
            started_at=self.started_at, generation=self.generation.number, batch_seconds=round(seconds, 3),
            lag_s=round(lag_s, 3)))

