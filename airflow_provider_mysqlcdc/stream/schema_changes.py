"""What a DDL statement, or binlog lost to a purge, does to the sink: the rules of
docs/events-and-types.md ("Event -> what happens to the sink") beyond row changes.

"Drift" means the stream goes on, records the event (state/drift.py) and the next DAG run
re-snapshots the table; "frozen" means in addition that from that offset none of the table's
changes apply. ``SchemaChangeRules`` follows them for ``BatchApplier`` (applier.py), its
collaborator: the applier holds the batch's state (``AppliedTables``) the rules read and write.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Protocol

from airflow_provider_mysqlcdc.cdc.errors import SchemaChangedError, SchemaChangeRefused
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import BinlogPurged, SchemaChangeEvent, TableChange, TableEventKind
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.source.selection import TableSelection
from airflow_provider_mysqlcdc.protocol.jobs import FOLLOWS_COLUMNS, StreamJob
from airflow_provider_mysqlcdc.protocol.registry import Generation
from airflow_provider_mysqlcdc.sinks.arrow_rows import METADATA_COLUMNS
from airflow_provider_mysqlcdc.sinks.base import Sink
from airflow_provider_mysqlcdc.sinks.routing import captured_target
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter
from airflow_provider_mysqlcdc.state.ddl_log import record_ddl
from airflow_provider_mysqlcdc.state.drift import Drift, frozen_since, record_drift
from airflow_provider_mysqlcdc.state.generations import first_high_watermark
from airflow_provider_mysqlcdc.state.new_tables import record_new_table
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.schemas import KnownSchemas, orders_differently
from airflow_provider_mysqlcdc.stream.tables import TableSource

log = logging.getLogger(__name__)


class AppliedTables(Protocol):
    """What the schema-change rules read and change of the batch being applied (``BatchApplier``)."""

    job: StreamJob
    sink: Sink
    state: PipelineState
    tables: TableSource
    known: KnownSchemas
    writers: dict[TableId, SinkWriter]
    table_changes: Counter[str]
    generation: Generation
    drift: Drift
    frozen: dict[TableId, BinlogOffset]
    removed: set[TableId]

    def _writer(self, table_id: TableId) -> SinkWriter: ...

    def _make_writer(self, schema: TableSchema, chunk_key: str, *, replace: bool = False) -> None: ...


class SchemaChangeRules:
    """DDL, purge gaps, drift and freezing, applied to the tables of ``batch`` (a ``BatchApplier``,
    which holds the batch's state and uses these rules as a collaborator)."""

    def __init__(self, batch: AppliedTables):
        self.batch = batch
        #: while a DDL is followed: what the policy did to each table (``_say``), for ``_report``
        self._said: dict[TableId, list[str]] | None = None

    def schema_changed(self, event: SchemaChangeEvent, version: int) -> bool:
        """Follow a DDL statement table by table (docs/events-and-types.md, "Event -> what happens to the
        sink"); True when it committed something to the sink under ``version``. What the policy did
        with it is one line of the stream's log, and each captured table's entry in the DDL log."""
        self._said = {}
        try:
            if self.batch.job.schema_changes == "fail":
                self._refuse_if_captured(event)
            committed = self._follow(event, version)
        except SchemaChangeRefused:
            self._report(event)
            raise
        self._report(event)
        return committed

    def _say(self, table_id: TableId, outcome: str) -> None:
        """Part of what the policy did to ``table_id`` with the DDL being followed (``_report`` says it)."""
        if self._said is not None:
            self._said.setdefault(table_id, []).append(outcome)

    def _report(self, event: SchemaChangeEvent) -> None:
        """The statement, and what the policy did with it to each captured table, in one log line and in
        the DDL log (state/ddl_log.py)."""
        said, self._said = {t: "; ".join(o) for t, o in (self._said or {}).items()}, None
        log.warning("schema change at %s: %s (%s)%s", event.offset, event.statement[:300],
                    ", ".join(f"{c.table} {c.kind.value}" for c in event.changes),
                    f" -- schema_changes={self.batch.job.schema_changes}: " + "; ".join(f"{t}: {o}" for t, o in sorted(said.items()))
                    if said else "")
        record_ddl(self.batch.state, event.offset, event.statement, self.batch.job.schema_changes, said)

    def _follow(self, event: SchemaChangeEvent, version: int) -> bool:
        committed = False
        altered = []
        for change in event.changes:
            table_id, kind = change.table, change.kind
            if kind in (TableEventKind.CREATED, TableEventKind.REPLACED, TableEventKind.RENAMED):
                self._new_table_seen(change.other if kind is TableEventKind.RENAMED else table_id, event)
            if not self._captured(table_id):
                continue
            if self._frozen_at(table_id, event.offset):
                self._say(table_id, f"not applied: the table is frozen since {self.batch.frozen[table_id]}")
                if kind in (TableEventKind.CREATED, TableEventKind.REPLACED):
                    self.drifted(table_id, TableEventKind.CREATED, event.offset,
                                  f"created again by {event.statement[:300]!r}")
                continue  # the name holds another table than the sink's: nothing of it applies
            if kind is TableEventKind.TRUNCATED:
                self._truncate(table_id, event, version)
                self._say(table_id, "the rows older than it removed")
                committed = True
            elif kind.ends_table:
                what = f"{kind.value}{f' (now {change.other})' if kind is TableEventKind.RENAMED else ''}"
                self.drifted(table_id, kind, event.offset, f"{what} by {event.statement[:300]!r}; the sink keeps its "
                                                            "last state")
                self.refreeze(table_id)
            elif kind is TableEventKind.ROWS_CHANGED:
                self.drifted(table_id, kind, event.offset, f"rows removed or exchanged without row events by "
                                                            f"{event.statement[:300]!r}")
            elif kind is TableEventKind.ALTERED:
                altered.append(table_id)
        return self._reload_altered(altered, event, version) or committed

    def _captured(self, table_id: TableId) -> bool:
        """The batch's generation captures the table, and it was not removed since."""
        return table_id in self.batch.generation.tables and table_id not in self.batch.removed

    def _frozen_at(self, table_id: TableId, offset: BinlogOffset) -> bool:
        """None of the table's changes at ``offset`` apply: it is frozen before it."""
        since = self.batch.frozen.get(table_id)
        return since is not None and offset > since

    def _refuse_if_captured(self, event: SchemaChangeEvent) -> None:
        """``schema_changes="fail"``: stop before a statement that changes a table whose changes apply."""
        followed = [c.table for c in event.changes
                    if self._captured(c.table) and not self._frozen_at(c.table, event.offset)]
        if followed:
            for table_id in followed:
                self._say(table_id, "refused: the stream stopped before it, nothing of it applied")
            raise SchemaChangeRefused(
                f"{event.statement[:300]!r} at {event.offset} changes {', '.join(map(str, sorted(set(followed))))}, and "
                "the stream runs with schema_changes='fail': it stopped before the statement, nothing of it applied "
                "(the changes before it are). Decide, then run the stream with schema_changes='evolve' to follow it "
                "(docs/events-and-types.md says what each statement does to the sink).")

    def _new_table_seen(self, table_id: TableId | None, event: SchemaChangeEvent) -> None:
        """A table took a name a pattern of the pipeline matches: the next run captures it (state/new_tables.py)."""
        if table_id is None or table_id in self.batch.generation.tables or not self.batch.job.table_patterns:
            return
        selection = TableSelection.parse(self.batch.job.table_patterns, self.batch.job.exclude_tables)
        if selection.pattern_matches(table_id) and record_new_table(self.batch.state, table_id, event.offset, event.statement):
            log.warning("%s now matches a table pattern of the pipeline (%s at %s): the next DAG run captures it",
                        table_id, event.statement[:300], event.offset)

    def purged(self, gap: BinlogPurged) -> None:
        """Binlog this batch needed was purged: freeze exactly the tables that needed it."""
        tables = gap.tables if gap.tables is not None else \
            [t for t, c in sorted(self.batch.generation.tables.items()) if first_high_watermark(c) < gap.resumed_at]
        log.warning("binlog from %s to %s was purged before the stream read it (on_binlog_purged='resnapshot'): %s",
                    gap.lost_from, gap.resumed_at, ", ".join(map(str, tables)) or "no table needed it")
        for table_id in tables:
            self.drifted(table_id, TableEventKind.BINLOG_PURGED, gap.resumed_at,
                          f"binlog from {gap.lost_from} to {gap.resumed_at} was purged before the stream read it; the "
                          "sink keeps the table as it was")
            self.refreeze(table_id)

    def _truncate(self, table_id: TableId, event: SchemaChangeEvent, version: int) -> None:
        """Remove the rows older than the TRUNCATE; a split read after it keeps its rows."""
        if self.batch._writer(table_id).truncate_before(event.offset, event.timestamp_ms, app_id=self.batch.job.app_id,
                                                  batch_id=version, changelog=self.batch.job.changelog):
            self.batch.table_changes[table_id.quoted] += 0  # changed, by no count of rows

    def _reload_altered(self, altered: list[TableId], event: SchemaChangeEvent, version: int) -> bool:
        """Reload the altered tables' schemas; True when it committed something under ``version``.
        A column that vanished is drift. A column the statement adds that rows existing before it hold
        a value in gets that value in the sink's older rows when it is a constant DEFAULT the server
        still has (``_fill_added``); otherwise (an expression, generated, NOT NULL without DEFAULT)
        it is drift too: the sink has those rows with NULL there until they are read again."""
        committed = False
        # first the statements the server's schema is not the result of (a later DDL of the table lies
        # ahead): nothing of the server's schema is read or given to the sink for them
        changes = {c.table: c for c in event.changes if c.kind is TableEventKind.ALTERED}
        ahead = [t for t in altered if not self.batch.tables.schema_is_after(t, event.offset)]
        for table_id in ahead:
            self._ahead_of(table_id, event, changes[table_id])
        altered = [t for t in altered if t not in ahead]
        # the columns before: this stream's schema, or (first time it meets the table) the sink's; a
        # shard's sink table has every shard's columns, so there the schema the stream remembers
        # remembered schema (read before a writer is made, which may remember the server's)
        met = {t for t in altered if t in self.batch.writers}
        remembered = {t: self.batch.known.remembered(t) for t in altered if t not in met}
        # read before a writer is made here: making one prepares the sink table, which may give it the
        # server's columns of now (Iceberg evolves its schema there)
        in_sink = {t: set(self.batch.sink.column_names(captured_target(t, self.batch.generation.table_rule(t)).table_id))
                   - set(METADATA_COLUMNS) for t in altered if t not in met}
        old = {t: self.batch._writer(t) for t in altered}  # the schema the table's changes so far were written under
        before = {t: set(w.schema.column_names) if t in met else
                  set(known.column_names) if w.target.shard and (known := remembered[t]) is not None else
                  in_sink[t] for t, w in old.items()}
        schemas = self.batch.tables.current_schemas(altered)
        added = {t: c.added_columns for t, c in changes.items()}
        for table_id, schema in zip(altered, schemas):
            keys, chunk_key = old[table_id].schema.key_columns, old[table_id].chunk_key
            if schema.key_columns != keys or chunk_key not in schema.column_names or orders_differently(
                    old[table_id].schema.column(chunk_key), schema.column(chunk_key)):
                # the sink's rows cannot be matched to the changes from here on: the old writer (and
                # the remembered schema, which a replay of the changes before this DDL needs) stay
                self.drifted(table_id, TableEventKind.KEY_CHANGED, event.offset,
                              f"key ({', '.join(keys)}; chunk key {chunk_key}) changed by {event.statement[:300]!r} "
                              f"to ({', '.join(schema.key_columns)}{_collated(schema, chunk_key)}); the sink keeps "
                              "the table's last state")
                self.refreeze(table_id)
                continue
            try:
                self.batch._make_writer(schema, chunk_key)
            except SchemaChangedError as exc:  # a type the sink's table cannot take: this table only stops
                self.drifted(table_id, TableEventKind.TYPE_CHANGED, event.offset,
                              f"{exc} (changed by {event.statement[:300]!r}; the sink keeps the table's last state)")
                self.refreeze(table_id)
                continue
            self.batch.known.remember(schema)
            self._say_columns(table_id, old[table_id].schema, before[table_id], schema)
            if not self.follows_columns:  # lenient, ignore: a column change is never drift
                unfilled, wrote = self._fill_added(table_id, self._fillable(table_id, added), event, version)
                if unfilled:
                    self._say(table_id, f"rows before it hold NULL in {', '.join(unfilled)} (no constant DEFAULT "
                                        "to give them)")
                committed = wrote or committed
                continue
            vanished = before[table_id] - set(schema.column_names)
            if vanished:
                self.drifted(table_id, TableEventKind.ALTERED, event.offset,
                              f"column(s) {', '.join(sorted(vanished))} dropped or renamed by {event.statement[:300]!r}")
            unfilled, wrote = self._fill_added(table_id, self._fillable(table_id, added), event, version)
            committed = committed or wrote
            if unfilled:
                self.drifted(table_id, TableEventKind.ALTERED, event.offset,
                              f"column(s) {', '.join(unfilled)} added by {event.statement[:300]!r} hold a default (or "
                              "generated) value in rows written before, which the binlog does not carry")
        return committed

    def _ahead_of(self, table_id: TableId, event: SchemaChangeEvent, change: TableChange) -> None:
        """A later DDL of the table lies between the statement and the server's head, so the server's
        schema of now is not the one the statement left: its changes bring their own columns (the
        writer follows them; a key or a type the sink cannot take freezes the table there). Which
        columns a statement that drops, renames or adds columns left, or what an added one holds in
        older rows, is not known here: drift where the policy follows columns exactly (the table is
        re-snapshotted), NULL in those rows otherwise. Other statements (a type, a default, an
        index) need nothing more."""
        self._say(table_id, "its changes bring their columns (a later DDL of the table lies ahead, so the server's "
                            "schema is not this statement's)")
        if self.follows_columns and (change.removes_columns or change.added_columns):
            self.drifted(table_id, TableEventKind.ALTERED, event.offset,
                          f"the columns {event.statement[:300]!r} left are not known here: a later DDL of the table "
                          "lies between it and the server's binlog head")

    def _say_columns(self, table_id: TableId, old: TableSchema, before: set[str], schema: TableSchema) -> None:
        """What the statement did to the sink table's columns (the writer of ``schema`` made)."""
        written = set(self.batch.writers[table_id].schema.column_names)
        new, gone = [n for n in schema.column_names if n not in before], sorted(before - set(schema.column_names))
        was = {c.name: c.column_type for c in old.columns}
        retyped = [c.name for c in schema.columns if c.name in was and was[c.name].lower() != c.column_type.lower()]
        parts = []
        if [n for n in new if n in written]:
            parts.append(f"column(s) {', '.join(n for n in new if n in written)} added to the sink")
        if [n for n in new if n not in written]:
            parts.append(f"column(s) {', '.join(n for n in new if n not in written)} not written (the sink keeps "
                         "its columns)")
        if gone:
            parts.append(f"column(s) {', '.join(gone)} gone from the source" + (
                "" if self.follows_columns else ", kept in the sink with their last values"))
        if retyped:
            parts.append(f"the type of {', '.join(retyped)} followed")
        self._say(table_id, "; ".join(parts) or "no column change for the sink")

    @property
    def follows_columns(self) -> bool:
        """Whether a column change the sink cannot follow exactly is drift (``evolve``, ``fail``); under
        ``lenient`` and ``ignore`` the sink goes on without it (docs/events-and-types.md)."""
        return self.batch.job.schema_changes in FOLLOWS_COLUMNS

    def _fillable(self, table_id: TableId, added: dict[TableId, tuple[str, ...]]) -> tuple[str, ...]:
        """The columns the statement added that the table's writer writes and older rows hold a value in."""
        present = {c.name: c for c in self.batch.writers[table_id].schema.columns}
        return tuple(n for n in added.get(table_id, ()) if n in present and present[n].fills_existing_rows)

    def _fill_added(self, table_id: TableId, names: tuple[str, ...], event: SchemaChangeEvent,
                    version: int) -> tuple[tuple[str, ...], bool]:
        """Give the sink's rows older than ``event`` the constant DEFAULT of the columns it added, as
        the server evaluates it now (``DEFAULT(col)``), provided no later DDL changed the table (the
        default would not be the one those rows got) within ``tables.FILL_LOOKAHEAD_EVENTS`` events.
        Returns the columns it could not fill, and whether it committed."""
        writer = self.batch.writers[table_id]
        constant = tuple(n for n in names if writer.schema.column(n).default_constant)
        if not constant:
            return names, False
        values = self.batch.tables.added_defaults(writer.schema, constant, event.offset)
        rest = tuple(n for n in names if n not in constant)
        if values is False:
            log.info("%s: not filling %s from DEFAULT: a later DDL changed the table, or it lies too far ahead",
                     table_id, ", ".join(constant))
            return names, False
        if values is None:  # no row now: every row older than the ALTER is deleted by a later change
            return rest, False
        try:
            wrote = writer.fill_before(event.offset, values, app_id=self.batch.job.app_id, batch_id=version)
            if wrote:
                self.batch.table_changes[table_id.quoted] += 0
        except ValueError as exc:  # a type without an SQL literal: re-snapshot instead
            log.warning("%s: cannot fill %s in place (%s)", table_id, ", ".join(constant), exc)
            return names, False
        log.info("%s: rows older than %s got the DEFAULT of %s", table_id, event.offset,
                 ", ".join(f"{n} = {values[n]!r}" for n in constant))
        self._say(table_id, f"rows before it given the DEFAULT of {', '.join(constant)}")
        return rest, wrote

    def refreeze(self, table_id: TableId) -> None:
        """Whether (from where) the table is frozen, by its drift under this batch's generation."""
        since = frozen_since(self.batch.drift, table_id, self.batch.generation.tables.get(table_id))
        if since is not None:
            self.batch.frozen[table_id] = since

    def drifted(self, table_id: TableId, kind: TableEventKind, offset: BinlogOffset, reason: str) -> None:
        self._say(table_id, f"{'frozen' if kind.freezes else 'drift'} ({kind.value}): the next DAG run re-snapshots "
                            "the table")
        if record_drift(self.batch.state, self.batch.drift, table_id, kind, offset, reason):
            log.warning("%s at %s: %s. The sink cannot follow this exactly by itself: the next DAG run re-snapshots "
                        "the table if it exists on the source (state/drift.py)", table_id, offset, reason)


def _collated(schema: TableSchema, chunk_key: str) -> str:
    column = schema.column(chunk_key) if chunk_key in schema.column_names else None
    return f"; chunk key {column.column_type} COLLATE {column.collation}" if column and column.collation else ""
