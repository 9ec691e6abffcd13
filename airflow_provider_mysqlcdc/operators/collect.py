"""``MySqlCdcCollectSplitsOperator``: this run's finished splits into the next registry generation.

It reads every group's plan (XCom key ``tables``) and the latest result of every chunk task (a
cleared and re-run chunk's new high watermark included), checks that every planned split finished,
and commits the next generation to the state location (planning/changes.py decides what lands). A
running stream picks the new generation up at its next micro-batch.

It pulls only XComs that exist: a group with nothing to read maps to zero chunk tasks, and asking
for their results would log an error (Airflow logs every missing XCom as one) in a healthy run.

One table's failed chunk task (after its retries) does not hold back the others: the collect runs
once every chunk task is done (``all_done``), lands every table whose chunks all finished, and
leaves a table with a failed chunk as it was registered (a new table is not captured yet), saying
so; the stream then goes on with the rest, and the next run plans that table again. A failed plan
task is not one table's matter (a preflight problem, another run of the pipeline): nothing lands.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_mysqlcdc.cdc.errors import PlanNotFinished
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.hooks.object_store import open_object_store
from airflow_provider_mysqlcdc.operators.arguments import state_location_of
from airflow_provider_mysqlcdc.planning.changes import next_tables
from airflow_provider_mysqlcdc.protocol.actions import PlanAction
from airflow_provider_mysqlcdc.protocol.envelope import decode, encode
from airflow_provider_mysqlcdc.protocol.plans import ChunkPlan, TablePlan, TablePlans
from airflow_provider_mysqlcdc.protocol.results import ChunkResult, CollectResult
from airflow_provider_mysqlcdc.state.epochs import place_split
from airflow_provider_mysqlcdc.state.generations import added_since, start_offset
from airflow_provider_mysqlcdc.state.registry import PipelineState


class MySqlCdcCollectSplitsOperator(BaseOperator):
    """Checks that every planned split finished and lands the results as the registry's next generation.

    :param groups: per table group, its plan task (whose ``tables`` XCom says what this run planned, and
        whose return value lists the chunks) and its mapped snapshot task (one finished-splits XCom per chunk)
    :param state_location: the pipeline's state location
    :param aws_conn_id: an ``aws`` connection whose credentials open the state location on an object
        store (hooks/object_store.py); none: the machine's own credentials
    """

    template_fields: Sequence[str] = ("state_location",)

    def __init__(self, *, groups: Sequence[tuple[str, str]], state_location: str | None = None,
                 state: str | None = None, aws_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.aws_conn_id = aws_conn_id
        self.groups = [(plan, snapshot) for plan, snapshot in groups]
        self.state_location = state_location_of(state_location, state, "MySqlCdcCollectSplitsOperator")

    def execute(self, context: Context) -> dict[str, Any]:
        open_object_store(self.aws_conn_id)
        ti = context["ti"]
        groups: list[Any] = []
        results: list[Any] = []
        failed: dict[Any, Any] = {}
        for plan_id, snapshot_id in self.groups:
            value = ti.xcom_pull(task_ids=plan_id, key="tables")
            if value is None:
                raise PlanNotFinished(f"Plan task {plan_id} did not finish (see its log): nothing of this run lands, "
                                   "and the stream does not start. Fix what it reports, then clear it or trigger a "
                                   "new run.")
            groups.append(decode(TablePlans, value, f"the 'tables' XCom of {plan_id}"))
            chunks = ti.xcom_pull(task_ids=plan_id) or []
            if chunks:
                pulled = ti.xcom_pull(task_ids=snapshot_id, map_indexes=list(range(len(chunks))))
                results.extend(r for r in pulled if r is not None)
                for table_id, indexes in failed_chunks(chunks, pulled).items():
                    failed.setdefault(table_id, []).extend(f"{snapshot_id}[{i}]" for i in indexes)
        for table_id, tasks in sorted(failed.items()):
            self.log.warning("%s is left as it was registered: chunk task(s) %s failed (see their logs). The other "
                             "tables land and stream on; the next run plans %s again (a re-snapshot you asked for "
                             "by a param: ask again).", table_id, ", ".join(tasks), table_id)
        plans = kept_if_failed([p for g in groups for p in g.plans], set(failed))
        exact = bool(groups) and all(g.exact for g in groups)
        state = PipelineState(self.state_location)
        servers = state.servers()  # results read on a server the source failed over to compare as newer
        finished = [place_split(servers, f) for item in results
                    for f in decode(ChunkResult, item, "a snapshot task's XCom").finished_splits]
        for planned_on in sorted({g.planned_on for g in groups if g.planned_on is not None}):
            state.refuse_stale_plans(planned_on, context["run_id"])
        before = state.latest()
        generation = state.commit(next_tables(before, plans, finished, exact=exact), landed_by=context["run_id"])
        added = added_since(generation, before)
        removed = sorted(set(before.tables) - set(generation.tables))
        self.log.info("registry generation %d at %s: %d table(s) captured; %d split(s) new or replaced; removed: %s",
                      generation.number, self.state_location, len(generation.tables), len(added),
                      ", ".join(map(str, removed)) or "none")
        return encode(CollectResult(self.state_location, generation.number, sorted(map(str, generation.tables)),
                                    len(generation.finished_splits), len(added), [str(t) for t in removed],
                                    start_offset(generation), [str(t) for t in sorted(failed)]))



def failed_chunks(chunks: Sequence[dict[str, Any]], results: Sequence[Any]) -> dict[TableId, list[int]]:
    """Per table, the indexes of its chunk tasks that left no result (they failed), given the plan's
    chunks (``ChunkPlan`` records) and the results pulled for their map indexes (None where none)."""
    failed: dict[TableId, list[int]] = {}
    for index, (chunk, result) in enumerate(zip(chunks, results)):
        if result is None:
            table_id = decode(ChunkPlan, chunk, f"chunk {index} of the plan").table_id
            failed.setdefault(table_id, []).append(index)
    return failed


def kept_if_failed(plans: Sequence[TablePlan], failed: set[TableId]) -> list[TablePlan]:
    """The plans to land: a table with a failed chunk is kept as registered (not captured if new)."""
    return [dataclasses.replace(p, action=PlanAction.KEEP) if p.table_id in failed else p for p in plans]
