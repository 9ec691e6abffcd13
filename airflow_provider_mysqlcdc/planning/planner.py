"""What a plan task decides, apart from Airflow: preflight, an action per table against the registry
(changes.py), the splits it reads, and the chunks the mapped snapshot tasks take.

``Planner.plan`` reads the server (preflight, the binlog head, the splits) and writes to the state
location only once everything is checked: the server's epoch (servers.py) and the planned tables'
schemas (schemas.py). The plan operator (operators/plan.py) checks its arguments, asks the hook for
a planner, and hands on what it decided.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_mysqlcdc.cdc.binlog.start_points import (
    earliest_offset,
    gtid_offset,
    is_gtid_position,
    offset_at_time,
    parse_start_time,
)
from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.rules import route_of
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.planning.splitter import SplitOptions, TableSplitter
from airflow_provider_mysqlcdc.cdc.records.masking import missing_salt_error
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.preflight import PreflightReport, run_preflight
from airflow_provider_mysqlcdc.cdc.source.rules import TableRules
from airflow_provider_mysqlcdc.cdc.source.schema import base_tables, table_exists
from airflow_provider_mysqlcdc.cdc.source.selection import TableSelection
from airflow_provider_mysqlcdc.cdc.source.server import check_offset_available, current_offset
from airflow_provider_mysqlcdc.planning.changes import (
    ResnapshotRequest,
    check_request_bounds,
    decide_action,
    parse_offset,
    parse_startup_mode,
    splits_overlapping,
)
from airflow_provider_mysqlcdc.protocol.actions import PlanAction
from airflow_provider_mysqlcdc.protocol.plans import ChunkPlan, TablePlan
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, Generation
from airflow_provider_mysqlcdc.sinks.routing import fit_shards, sink_table_id
from airflow_provider_mysqlcdc.state.drift import Drift, pending_drift, read_drift
from airflow_provider_mysqlcdc.state.epochs import place
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.schemas import KnownSchemas
from airflow_provider_mysqlcdc.state.servers import ServerEpochs


@dataclass(frozen=True)
class PlanSettings:
    """A plan task's settings, checked (``parse``) before anything is read or written."""

    split_rows: int
    chunk_rows: int
    startup_mode: str = "initial"
    chunk_keys: dict[TableId, str] = field(default_factory=dict)
    start_offset: BinlogOffset | None = None
    resnapshot: list[ResnapshotRequest] = field(default_factory=list)
    #: startup mode ``offset`` with a MariaDB GTID position (``0-1-100``) instead of a file:position
    start_gtid: str | None = None
    #: startup mode ``timestamp``: seconds since the epoch
    start_time: float | None = None
    #: which columns and rows of each table reach the sink, and how columns are masked
    columns: TableRules = field(default_factory=TableRules)

    @classmethod
    def parse(cls, *, split_rows: Any, chunk_rows: Any, chunk_key_columns: Any = None, startup_mode: Any = None,
              start_offset: Any = None, resnapshot: Any = None, start_time: Any = None,
              columns: Any = None, row_filters: Any = None, route: Any = None) -> "PlanSettings":
        """The settings from the task's (rendered, then parsed) arguments; a clear error for bad ones."""
        split, chunk = int(split_rows), int(chunk_rows)
        if split < 1 or chunk < split:
            raise ConfigurationError(f"Need 1 <= split_rows <= chunk_rows, got {split} and {chunk}.")
        keys = chunk_key_columns or {}
        if not isinstance(keys, dict):
            raise ConfigurationError(f"chunk_key_columns must map 'db.table' to a column, got {keys!r}.")
        mode = parse_startup_mode(startup_mode or "initial")
        if mode == "offset" and start_offset is None:
            raise ConfigurationError("Startup mode 'offset' needs start_offset, e.g. 'binlog.000042:1234' or a MariaDB "
                                     "GTID position such as '0-1-100'.")
        if mode == "timestamp" and start_time is None:
            raise ConfigurationError("Startup mode 'timestamp' needs start_time, e.g. '2026-11-26T12:00:00+00:00'.")
        gtid = str(start_offset).strip() if start_offset is not None and is_gtid_position(start_offset) else None
        return cls(split, chunk, mode, {TableId.parse(t): c for t, c in keys.items()},
                   parse_offset(start_offset) if start_offset is not None and gtid is None else None,
                   ResnapshotRequest.parse_all(resnapshot), start_gtid=gtid,
                   start_time=parse_start_time(start_time) if start_time is not None else None,
                   columns=TableRules.parse(columns, row_filters, route))


@dataclass
class RunPlan:
    """What one plan task decided: per table its plan, and the chunks of the splits to read."""

    plans: list[TablePlan]
    chunks: list[ChunkPlan]
    #: the binlog head when planned, in its server epoch
    head: BinlogOffset


class Planner:
    def __init__(self, source: SourceConfig, state: PipelineState, log: Any = None):
        self.source = source
        self.state = state
        self.log = log if log is not None else logging.getLogger(__name__)

    def plan(self, table_ids: list[TableId], settings: PlanSettings, registry: Generation) -> RunPlan:
        """Plan ``table_ids`` against ``registry``. Tables the stream saw dropped or renamed away and
        that are not back on the server are kept as they are (preflight would fail them)."""
        drift = read_drift(self.state)
        gone = self._gone_tables(table_ids, registry, drift)
        report = run_preflight(self.source, [t for t in table_ids if t not in gone], settings.chunk_keys)
        self._apply_table_rules(report, settings.columns, registry)
        odd_shards = self._check_routes(report, registry)
        conn = self.source.connect()
        try:
            read = current_offset(conn, report.server)
            head = place(self.state.servers(), read)  # in its epoch after a failover (recorded below, once checked)
            stream_from = self._stream_start(conn, settings, head)
            plans = [TablePlan(t, registry.tables[t].chunk_key, PlanAction.KEEP) if t in gone or t in odd_shards else
                     self._plan_table(conn, report, registry.tables.get(t), t, settings, stream_from, drift)
                     for t in table_ids]
        finally:
            conn.close()
        ServerEpochs(self.state).begin(read)
        known = KnownSchemas(self.state)
        for table_id, schema in report.schemas.items():  # the stream describes a table that later leaves the server by it
            captured = registry.tables.get(table_id)
            known.remember_planned(schema, captured.chunk_key if captured else None)
        return RunPlan(plans, chunk_plans(plans, settings), head)

    def tables(self, selection: TableSelection, registry: Generation) -> list[TableId]:
        """The tables ``selection`` names or matches on the server now (cdc/source/selection.py), and
        the captured tables a pattern covers that the stream saw dropped or renamed away: those keep
        their sink's last state, as a named table does (``plan``)."""
        if not selection.patterns:
            return [t for t in selection.names if not selection.excluded(t)]
        conn = self.source.connect()
        try:
            server = base_tables(conn)
        finally:
            conn.close()
        drift = read_drift(self.state)
        ended = [t for t, captured in registry.tables.items()
                 if any(e.kind.ends_table for e in pending_drift(drift, t, captured))]
        tables = selection.resolve(server + ended)
        for pattern in selection.patterns:
            self.log.info("table pattern '%s' matches %s", pattern,
                          ", ".join(str(t) for t in tables if pattern.matches(t)) or "only excluded tables")
        return tables

    def _stream_start(self, conn: Any, settings: PlanSettings, head: BinlogOffset) -> BinlogOffset:
        """Where tables new to the pipeline start streaming without a snapshot (startup modes other
        than ``initial``; cdc/binlog/start_points.py), as an offset of the server planned on."""
        mode = settings.startup_mode
        if mode == "earliest":
            start = earliest_offset(conn)
        elif mode == "timestamp":
            assert settings.start_time is not None  # checked by PlanSettings.parse
            start = offset_at_time(self.source, conn, settings.start_time)
        elif mode == "offset" and settings.start_gtid is not None:
            start = gtid_offset(conn, settings.start_gtid)
        elif mode == "offset":
            assert settings.start_offset is not None  # checked by PlanSettings.parse
            start = settings.start_offset
        else:
            return head
        stream_from = start.in_epoch(head.epoch)
        check_offset_available(conn, stream_from)
        if stream_from > head:
            raise ConfigurationError(f"Start offset {stream_from} is beyond the server's binlog head {head}.")
        if mode != "offset" or settings.start_gtid is not None:
            self.log.info("startup mode %s%s: new tables stream from %s", mode,
                          f" ({settings.start_gtid})" if settings.start_gtid else "", stream_from)
        return stream_from

    def _apply_table_rules(self, report: PreflightReport, columns: TableRules, registry: Generation) -> None:
        """Each table's schema as the pipeline captures it (cdc/source/rules.py): a rule that names a
        column the table lacks, or touches its key, is refused here, and so is a hash without a salt."""
        for table_id, schema in report.schemas.items():
            registered = registry.tables.get(table_id)
            for chunk_key in {report.chunk_keys[table_id]} | ({registered.chunk_key} if registered else set()):
                report.schemas[table_id] = columns.captured(schema, chunk_key)
            rule = report.schemas[table_id].table_rule
            if rule is not None:
                self.log.info("%s: columns captured by its rule (%s): %s", table_id, rule,
                              ", ".join(report.schemas[table_id].column_names))
                if rule.hashes and not self.source.salt():
                    raise missing_salt_error(table_id)

    def _check_routes(self, report: PreflightReport, registry: Generation) -> dict[TableId, str]:
        """Tables routed into one sink table (sinks/routing.py) must agree on their row key, and each
        column needs one type in the sink: the widest of the shards' at first capture, and after that
        the type the shards captured before wrote (as the pipeline remembers them), which a shard's
        own type must widen into (``fit_shards``); each planned shard's schema gets those types. The
        sink table must not be one a table is captured into by itself. A shard captured before that
        no longer fits (a DDL changed its key or widened a column past the table's type) is kept as
        it is, frozen, with the others going on: it is returned with the reason. Anything else is
        refused here, before anything is written."""
        shards: dict[TableId, list[TableSchema]] = {}
        for table_id, schema in report.schemas.items():
            if schema.route is not None:
                shards.setdefault(sink_table_id(table_id, schema.table_rule), []).append(schema)
        known, odd = KnownSchemas(self.state), {}
        for target, planned in sorted(shards.items()):
            own = [t for t, rule in [*((t, s.table_rule) for t, s in report.schemas.items()),
                                     *((t, c.table_rule) for t, c in registry.tables.items() if t not in report.schemas)]
                   if t == target and route_of(rule) is None]
            if own:
                raise ConfigurationError(
                    f"The route into {target} names the sink table that {target} itself is captured into: the shards' "
                    f"rows would mix with its own. Route the shards into a table of another name.")
            captured = [t for t, c in registry.tables.items()
                        if route_of(c.table_rule) is not None and sink_table_id(t, c.table_rule) == target]
            fit = fit_shards([s for t in captured if (s := known.remembered(t)) is not None], planned)
            new = {t: why for t, why in fit.unfit.items() if t not in registry.tables}
            if new or fit.problems:
                raise ConfigurationError(
                    f"The tables routed into {target} cannot share it: {'; '.join([*new.values(), *fit.problems])}. "
                    "Every shard of a route needs the same row key, and each column a type that widens into the sink "
                    "table's (a Delta table cannot widen a column it has): align the tables on the source, or route "
                    "the odd ones into another sink table.")
            for table_id, why in fit.unfit.items():
                odd[table_id] = why
                self.log.warning(
                    "%s: kept as it is, frozen: it no longer fits %s, which its shards wrote (%s). A Delta table "
                    "cannot change a column's type: route the shards into a new sink table", table_id, target, why)
            for shard in planned:
                if shard.table_id not in odd:
                    report.schemas[shard.table_id] = fit.typed(shard)
            every = sorted({*captured, *(s.table_id for s in planned)})
            self.log.info("%s: the sink table of %d shard(s): %s", target, len(every), ", ".join(map(str, every)))
        return odd

    def _gone_tables(self, table_ids: list[TableId], registry: Generation, drift: Drift) -> set[TableId]:
        """Captured tables the stream saw dropped or renamed away and that are not back on the server:
        their sink keeps its last state, and they are kept as they are instead of failing preflight."""
        candidates = [t for t in table_ids if any(e.kind.ends_table for e in
                                                  pending_drift(drift, t, registry.tables.get(t)))]
        if not candidates:
            return set()
        conn = self.source.connect()
        try:
            gone = {t for t in candidates if not table_exists(conn, t)}
        finally:
            conn.close()
        for table_id in sorted(gone):
            event = [e for e in pending_drift(drift, table_id, registry.tables[table_id]) if e.kind.ends_table][-1]
            self.log.warning("%s is no longer on the source: %s at %s. Its sink table keeps its state as of then and is "
                             "not captured from the binlog until a table of that name exists again (the next run then "
                             "re-snapshots it); leave it out of the DAG's tables to stop capturing it.",
                             table_id, event.reason, event.offset)
        return gone

    def _plan_table(self, conn: Any, report: PreflightReport, registered: CapturedTable | None, table_id: TableId,
                    settings: PlanSettings, stream_from: BinlogOffset, drift: Drift) -> TablePlan:
        pending = pending_drift(drift, table_id, registered)
        for event in pending:
            self.log.warning("%s: re-snapshotting the whole table after schema drift: the stream saw it %s at %s (%s)",
                             table_id, event.kind.value, event.offset, event.reason)
        rule = report.schemas[table_id].table_rule
        rule_changed = registered is not None and registered.table_rule != rule
        if registered is not None and rule_changed:
            self.log.warning("%s: re-snapshotting the whole table: its rule changed from '%s' to '%s'",
                             table_id, registered.table_rule or "every column as it is",
                             rule or "every column as it is")
        action, request = decide_action(table_id, registered, settings.resnapshot, settings.startup_mode,
                                        drifted=bool(pending) or rule_changed)
        keeps_key = registered is not None and action in (PlanAction.KEEP, PlanAction.RESNAPSHOT_SPLITS)
        chunk_key = registered.chunk_key if registered is not None and keeps_key else report.chunk_keys[table_id]
        plan = TablePlan(table_id, chunk_key, action, table_rule=rule)
        if action == PlanAction.STREAM_ONLY:
            plan.stream_from = stream_from
        elif action in (PlanAction.SNAPSHOT, PlanAction.RESNAPSHOT):
            options = SplitOptions(split_rows=settings.split_rows, chunk_key_column=chunk_key)
            plan.splits = TableSplitter(conn, report.schemas[table_id], options).split()
        elif action == PlanAction.RESNAPSHOT_SPLITS:
            assert request is not None and registered is not None  # decide_action gives the request it re-snapshots
            check_request_bounds(request, report.schemas[table_id].column(chunk_key))
            ordering = KeyOrdering(report.schemas[table_id].column(chunk_key), self.source.connect)
            try:
                plan.splits = splits_overlapping(registered, ordering, request)
            finally:
                ordering.close()
        return plan


def chunk_plans(plans: list[TablePlan], settings: PlanSettings) -> list[ChunkPlan]:
    """Each table's splits in groups of ``chunk_rows // split_rows``: one snapshot task each."""
    per_chunk = max(1, settings.chunk_rows // settings.split_rows)
    chunks = []
    for plan in plans:
        groups = [plan.splits[i:i + per_chunk] for i in range(0, len(plan.splits), per_chunk)]
        for number, group in enumerate(groups, start=1):
            chunks.append(ChunkPlan(f"{plan.table_id} chunk {number}/{len(groups)}", plan.table_id, tuple(group),
                                    plan.table_rule))
    return chunks
