"""``MySqlCdcPlanOperator``: preflight, then what this run reads, as chunks for the mapped snapshot task.

The operator checks its arguments and the run's tables; its hook's planner (planning/planner.py) does
the rest: preflight checks every table and the server at once and fails before any Spark job
starts; then each table gets an action against the registry (planning/changes.py): new tables are
planned split by split and grouped into chunks (one spark-submit each); captured tables are not
read again unless a re-snapshot asks for it. The chunks (``ChunkPlan`` records) are the return
value, what ``MySqlCdcSnapshotOperator`` is mapped over; the per-table plans go to the XCom key
``tables`` for the collect step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.selection import TableSelection
from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook
from airflow_provider_mysqlcdc.hooks.object_store import open_object_store
from airflow_provider_mysqlcdc.metrics.pipeline_metrics import PipelineMetrics, pipeline_name
from airflow_provider_mysqlcdc.operators.arguments import native, state_location_of
from airflow_provider_mysqlcdc.planning.changes import (
    ResnapshotRequest,
)
from airflow_provider_mysqlcdc.planning.planner import PlanSettings
from airflow_provider_mysqlcdc.protocol.actions import PlanAction
from airflow_provider_mysqlcdc.protocol.envelope import encode
from airflow_provider_mysqlcdc.protocol.plans import TablePlans
from airflow_provider_mysqlcdc.protocol.progress import RunPlanProgress
from airflow_provider_mysqlcdc.state.registry import PipelineState, run_folder

#: Rows per split (one atomic replace in the sink) and per chunk (one spark-submit). A spark-submit
#: costs 15-20 s before any work here and a chunk reads ~190k rows/s, so 2M rows per chunk keeps
#: the fixed cost under half of the chunk's time while leaving chunks small enough to retry.
DEFAULT_SPLIT_ROWS = 250_000
DEFAULT_CHUNK_ROWS = 2_000_000


def parse_tables(tables: Any, exclude_tables: Any = None, *, allow_empty: bool = False) -> TableSelection | None:
    """Tables (names and patterns, cdc/source/selection.py) as a list, a comma-separated string or a
    rendered list, less ``exclude_tables``; None stays None (not given)."""
    tables = native(tables)
    if tables is None:
        return None
    if not isinstance(tables, (str, list, tuple)):
        raise ConfigurationError(f"Malformed table list {tables!r}: write ['db.table', 'db.pattern_\\d+', ...].")
    selection = TableSelection.parse(tables, native(exclude_tables))
    if not selection.include and not allow_empty:
        raise ConfigurationError("No tables to capture: give tables as ['db.table', ...].")
    return selection


def _refuse_duplicates(table_ids: list[TableId]) -> None:
    twice = sorted({t for t in table_ids if table_ids.count(t) > 1})
    if twice:
        raise ConfigurationError(f"Table(s) {', '.join(t.quoted for t in twice)} named more than once in this run's "
                                 "tables: name each table once.")


class MySqlCdcPlanOperator(BaseOperator):
    """Preflight and the chunk plan of ``tables``. A list is the complete set for this group.
    ``tables=None`` (a trigger-time param left unset) removes nothing and plans nothing, except with
    ``unset_covers_captured_except``: then the group covers the captured tables other than those
    (the DAG's parse-time tables), so re-snapshot requests and schema drift still reach them.

    :param tables: ``db.table`` names and patterns such as ``shop.order_\\d+`` (regular expressions on
        the database and table names, resolved against the server at each run: cdc/source/selection.py),
        as a list, a comma-separated string or a rendered list; or None
    :param exclude_tables: names and patterns left out of ``tables`` (and of the run's other groups)
    :param state_location: the pipeline's state location (``<state_dir>/<dag_id>``)
    :param mysqlcdc_conn_id: the ``mysqlcdc`` connection of the source
    :param split_rows: rows per split (one atomic replace in the sink)
    :param chunk_rows: rows per chunk (one spark-submit)
    :param chunk_key_columns: ``{"db.table": "column"}``, a chunk key other than the first key column
    :param startup_mode: for tables new to the pipeline: ``initial``, ``latest`` or ``offset``
    :param start_offset: ``binlog.000042:1234``, or a MariaDB GTID position (``0-1-100``), for startup mode ``offset``
    :param start_time: for startup mode ``timestamp``: ISO 8601 with a time zone, or seconds since the epoch
    :param resnapshot: ``"db.table"`` or ``{"table": ..., "from": low, "to": high}`` items
    :param columns: per table name or pattern, which columns reach the sink and which are masked:
        ``{"shop.customers": {"exclude": [...], "hash": [...], "truncate": {"col": 10}, "null": [...]}}``
        or ``{"crm.*": {"include": [...]}}`` (cdc/source/rules.py); a table whose rule changes is
        re-snapshotted whole. ``hash`` is keyed by the source connection's ``mask_salt``
    :param row_filters: per table name or pattern, a predicate its rows must satisfy to reach the
        sink (``{"shop.orders": "status IN ('paid', 'shipped') AND amount > 10"}``; the language:
        cdc/records/row_filter.py); a table whose filter changes is re-snapshotted whole
    :param route: per table name or pattern, a sink table shared by every table it matches (Flink
        CDC's ``route``): ``{"shop_\\d+.orders": "shop.orders"}``, or ``{"sink": ..., "key":
        "global"}`` when the row keys are unique across those tables (cdc/source/rules.py,
        sinks/routing.py); the shards' keys must agree; a table whose route changes is re-snapshotted
        whole into its new sink table
    :param unset_covers_captured_except: see above
    :param leave_to_other_groups: names and patterns of the run's other groups that take precedence: a
        table this group's patterns (or trigger-time tables) match that they also cover is theirs, so
        no table is planned twice in one run (``mysqlcdc_pipeline`` passes it: names before patterns,
        earlier patterns before later ones, the DAG's groups before the trigger-time one)
    :param run_tables: every table this run names, across the DAG's groups: ``{"dag": parse-time
        tables, "param": the trigger-time tables param}`` (no ``"param"``: the DAG has no such group;
        ``mysqlcdc_pipeline`` passes it); with it, a re-snapshot
        request naming a table the pipeline neither captures nor is given, or one this run stops
        capturing, is refused. None: not known (a plan task used alone), not checked
    :param aws_conn_id: an ``aws`` connection whose credentials open the state location on an object
        store (hooks/object_store.py); none: the machine's own credentials
    """

    template_fields: Sequence[str] = ("tables", "exclude_tables", "state_location", "split_rows", "chunk_rows",
                                      "chunk_key_columns", "startup_mode", "start_offset", "start_time", "resnapshot",
                                      "run_tables", "columns", "row_filters", "route")

    def __init__(self, *, tables: Any, exclude_tables: Any = None, state_location: str | None = None,
                 state: str | None = None,
                 mysqlcdc_conn_id: str = MySqlCdcHook.default_conn_name,
                 split_rows: int | str = DEFAULT_SPLIT_ROWS, chunk_rows: int | str = DEFAULT_CHUNK_ROWS,
                 chunk_key_columns: dict[str, str] | str | None = None, startup_mode: str = "initial",
                 start_offset: Any = None, start_time: Any = None, resnapshot: Any = None,
                 unset_covers_captured_except: Sequence[str] | None = None,
                 leave_to_other_groups: Sequence[str] | None = None, aws_conn_id: str | None = None,
                 run_tables: dict[str, Any] | None = None, columns: Any = None, row_filters: Any = None,
                 route: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.columns = columns
        self.row_filters = row_filters
        self.route = route
        self.run_tables = run_tables
        self.aws_conn_id = aws_conn_id
        self.unset_covers_captured_except = unset_covers_captured_except
        self.leave_to_other_groups = leave_to_other_groups
        self.tables = tables
        self.exclude_tables = exclude_tables
        self.state_location = state_location_of(state_location, state, "MySqlCdcPlanOperator")
        self.mysqlcdc_conn_id = mysqlcdc_conn_id
        self.split_rows = split_rows
        self.chunk_rows = chunk_rows
        self.chunk_key_columns = chunk_key_columns
        self.startup_mode = startup_mode
        self.start_offset = start_offset
        self.start_time = start_time
        self.resnapshot = resnapshot

    @cached_property
    def hook(self) -> MySqlCdcHook:
        return MySqlCdcHook(self.mysqlcdc_conn_id)

    def execute(self, context: Context) -> list[dict[str, Any]]:
        open_object_store(self.aws_conn_id)
        self._refuse_overlapping_runs(context)
        # every parameter is checked before anything is written (state, schemas, servers)
        selection = parse_tables(self.tables, self.exclude_tables, allow_empty=True)
        _refuse_duplicates(selection.names if selection else [])
        settings = self._settings()
        state = PipelineState(self.state_location)
        registry = state.latest()
        self._check_requests(settings.resnapshot, registry, selection)
        planner = self.hook.planner(state, log=self.log)
        exact = selection is not None
        table_ids: list[TableId] = []
        if selection is not None:
            table_ids = planner.tables(selection, registry)  # patterns resolved against the server
            theirs = TableSelection.parse(list(self.leave_to_other_groups or []))
            left = [t for t in table_ids if theirs.covers(t)]
            if left:
                self.log.info("left to the run's other groups, which name or match them first: %s",
                              ", ".join(map(str, left)))
                table_ids = [t for t in table_ids if t not in left]
        elif self.unset_covers_captured_except is not None:
            others = TableSelection.parse(list(self.unset_covers_captured_except), native(self.exclude_tables))
            table_ids = [t for t in sorted(registry.tables) if not (others.covers(t) or others.excluded(t))]
        if not table_ids and not exact:
            self.log.info("no tables given for this group: nothing planned, the captured set unchanged")
            context["ti"].xcom_push(key="tables", value=encode(TablePlans(exact=False, planned_on=registry.number)))
            return []
        run = planner.plan(table_ids, settings, registry)
        for plan in run.plans:
            self.log.info("%s: %s%s", plan.table_id, plan.action,
                          f", {len(plan.splits)} split(s)" if plan.splits else
                          f" from {plan.stream_from}" if plan.action == PlanAction.STREAM_ONLY else
                          " (already captured)")
        self.log.info("planned %d chunk(s) for %d table(s); binlog head at planning: %s", len(run.chunks),
                      len(run.plans), run.head)
        PipelineMetrics(pipeline_name(self.state_location)).resnapshots(
            [p.table_id for p in run.plans if p.action in (PlanAction.RESNAPSHOT, PlanAction.RESNAPSHOT_SPLITS)])
        context["ti"].xcom_push(key="tables", value=encode(TablePlans(exact, run.plans, planned_on=registry.number)))
        state.write_progress(
            f"{run_folder(context['run_id'])}/plan-{self.task_id}.json",
            RunPlanProgress(chunks=len(run.chunks), planned_at=time.time(),
                            actions={str(p.table_id): p.action.value for p in run.plans},
                            chunk_tables=[c.table_id.quoted for c in run.chunks]))
        return [encode(chunk) for chunk in run.chunks]

    def _settings(self) -> PlanSettings:
        """The rendered arguments, checked."""
        return PlanSettings.parse(split_rows=native(self.split_rows), chunk_rows=native(self.chunk_rows),
                                  chunk_key_columns=native(self.chunk_key_columns),
                                  startup_mode=native(self.startup_mode), start_offset=native(self.start_offset),
                                  start_time=native(self.start_time),
                                  resnapshot=native(self.resnapshot), columns=native(self.columns),
                                  row_filters=native(self.row_filters), route=native(self.route))

    def _refuse_overlapping_runs(self, context: Context) -> None:
        """Runs of one pipeline share its registry and must not overlap. The builder requires
        ``max_active_runs=1``, but a backfill applies its own max_active_runs apart from the DAG's."""
        dag_id = context["dag"].dag_id
        running = context["ti"].get_dr_count(dag_id=dag_id, states=["running"])
        if running > 1:
            raise ConfigurationError(
                f"{running - 1} other run(s) of DAG {dag_id!r} are running, and runs of one CDC pipeline must not "
                "overlap (they share its registry). Let the other run finish, then clear this one; for a backfill, "
                "pass --max-active-runs 1 (or max_active_runs=1 in the REST call).")

    def _check_requests(self, requests: list[ResnapshotRequest], registry: Any, selection: TableSelection | None) -> None:
        """Re-snapshot requests against the tables of the whole run (``run_tables``), when known."""
        if self.run_tables is None:
            return
        given = parse_tables(self.run_tables.get("param"), self.exclude_tables, allow_empty=True)
        dag = parse_tables(list(self.run_tables.get("dag") or []), self.exclude_tables, allow_empty=True)
        selections = [s for s in (selection, dag, given) if s is not None]
        # the run names the complete set (captured tables it leaves out are removed), unless the DAG
        # has a trigger-time group whose param is unset (it keeps the captured tables)
        exact = "param" not in self.run_tables or given is not None
        for request in requests:
            table_id = request.table_id
            named = any(s.covers(table_id) for s in selections)
            if not named and table_id not in registry.tables:
                raise ConfigurationError(f"resnapshot names {table_id.quoted}, which this pipeline neither captures nor "
                                         "is given in this run's tables: check the name, or add the table to tables.")
            if not named and exact:
                raise ConfigurationError(f"resnapshot asks for {table_id.quoted}, which this run's tables stop capturing: "
                                         "keep it in tables to re-snapshot it, or drop the request.")
