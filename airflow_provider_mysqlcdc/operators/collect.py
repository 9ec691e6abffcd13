"""``MySqlCdcCollectSplitsOperator``: this run's finished splits into the next registry generation.

It reads every group's plan (XCom key ``tables``) and the latest result of every chunk task (a
cleared and re-run chunk's new high watermark included), checks that every planned split finished,
and commits the next generation to the state location (state/changes.py decides what lands). A
running stream picks the new generation up at its next micro-batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_mysqlcdc.protocol.envelope import decode, encode
from airflow_provider_mysqlcdc.protocol.results import ChunkResult, CollectResult
from airflow_provider_mysqlcdc.protocol.plans import TablePlans
from airflow_provider_mysqlcdc.state.changes import next_tables
from airflow_provider_mysqlcdc.state.registry import PipelineState


class MySqlCdcCollectSplitsOperator(BaseOperator):
    """Checks that every planned split finished and lands the results as the registry's next generation.

    :param plan_task_ids: the plan tasks whose ``tables`` XCom says what this run planned
    :param results: the snapshot tasks' finished splits (the latest XCom of every chunk)
    :param state: the pipeline's state location
    """

    template_fields: Sequence[str] = ("results", "state")

    def __init__(self, *, plan_task_ids: Sequence[str], results: Any, state: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan_task_ids = list(plan_task_ids)
        self.results = results
        self.state = state

    def execute(self, context: Context) -> dict[str, Any]:
        groups = [decode(TablePlans, value, f"the 'tables' XCom of {task_id}") for task_id in self.plan_task_ids
                  if (value := context["ti"].xcom_pull(task_ids=task_id, key="tables"))]
        plans = [p for g in groups for p in g.plans]
        exact = bool(groups) and all(g.exact for g in groups)
        state = PipelineState(self.state)
        servers = state.servers()  # results read on a server the source failed over to compare as newer
        finished = [servers.place_split(f) for item in _items(self.results)
                    for f in decode(ChunkResult, item, "a snapshot task's XCom").finished_splits]
        before = state.latest()
        generation = state.commit(next_tables(before, plans, finished, exact=exact))
        added = generation.added_since(before)
        removed = sorted(set(before.tables) - set(generation.tables))
        self.log.info("registry generation %d at %s: %d table(s) captured; %d split(s) new or replaced; removed: %s",
                      generation.number, self.state, len(generation.tables), len(added),
                      ", ".join(map(str, removed)) or "none")
        return encode(CollectResult(self.state, generation.number, sorted(map(str, generation.tables)),
                                    len(generation.finished_splits), len(added), [str(t) for t in removed],
                                    generation.initial_offset()))


def _items(groups: Any) -> list[dict[str, Any]]:
    """One list out of per-group XCom values (each a list, or the lazy sequence of a mapped task)."""
    out: list[dict[str, Any]] = []
    for group in groups or []:
        if group is None:
            continue
        out.extend([group] if isinstance(group, dict) else [g for g in group if g])
    return out
