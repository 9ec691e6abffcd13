"""``MySqlCdcPlanOperator``'s own logic, with its hook's planner replaced (what the planner decides
against a real server is tested in tests/integration): the arguments checked first, the tables a
group covers, what it hands on (the chunks it returns, the plans it pushes, the run's progress)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.source.selection import TableSelection
from airflow_provider_mysqlcdc.operators.plan import MySqlCdcPlanOperator
from airflow_provider_mysqlcdc.planning.planner import PlanSettings, RunPlan
from airflow_provider_mysqlcdc.protocol.actions import PlanAction
from airflow_provider_mysqlcdc.protocol.envelope import decode, encode
from airflow_provider_mysqlcdc.protocol.plans import ChunkPlan, TablePlan, TablePlans
from airflow_provider_mysqlcdc.protocol.progress import RunPlanProgress
from airflow_provider_mysqlcdc.state.registry import PipelineState, captured_tables, run_folder

A, B = TableId("shop", "a"), TableId("shop", "b")
HEAD = BinlogOffset("binlog.000002", 400)


@dataclass
class FakeTaskInstance:
    running_runs: int = 1
    pushed: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value

    def get_dr_count(self, dag_id: str, states: list[str]) -> int:
        return self.running_runs


@dataclass
class FakeDag:
    dag_id: str = "shop_cdc"


@dataclass
class FakePlanner:
    """Plans each table it is given as a snapshot of one split, in one chunk; patterns resolve against
    ``server`` (the real resolution: cdc/source/selection.py)."""

    asked: list[tuple[list[TableId], PlanSettings]] = field(default_factory=list)
    server: list[TableId] = field(default_factory=list)

    def tables(self, selection: TableSelection, registry: Any) -> list[TableId]:
        return selection.resolve(self.server)

    def plan(self, table_ids: list[TableId], settings: PlanSettings, registry: Any) -> RunPlan:
        self.asked.append((list(table_ids), settings))
        plans = [TablePlan(t, "id", PlanAction.SNAPSHOT, [SnapshotSplit(t, 0, "id")]) for t in table_ids]
        return RunPlan(plans, [ChunkPlan(f"{p.table_id} chunk 1/1", p.table_id, tuple(p.splits)) for p in plans], HEAD)


@dataclass
class FakeHook:
    planner_: FakePlanner = field(default_factory=FakePlanner)

    def planner(self, state: PipelineState, *, log: Any = None) -> FakePlanner:
        return self.planner_


def _run(tmp_path, ti: FakeTaskInstance | None = None, server: tuple[TableId, ...] = (),
         **arguments: Any) -> tuple[Any, FakeTaskInstance, FakePlanner]:
    operator = MySqlCdcPlanOperator(task_id="plan", state_location=str(tmp_path / "state"), **arguments)
    hook = FakeHook(FakePlanner(server=list(server)))
    operator.__dict__["hook"] = hook  # the cached_property, replaced
    ti = ti or FakeTaskInstance()
    returned = operator.execute({"ti": ti, "dag": FakeDag(), "run_id": "manual__1"})  # type: ignore[arg-type]
    return returned, ti, hook.planner_


def test_the_chunks_it_returns_are_the_planners_as_records_and_the_plans_go_to_the_tables_xcom(tmp_path):
    returned, ti, planner = _run(tmp_path, tables=["shop.a", "shop.b"], split_rows=10, chunk_rows=30)
    assert [decode(ChunkPlan, c, "x").table_id for c in returned] == [A, B]
    pushed = decode(TablePlans, ti.pushed["tables"], "the tables XCom")
    assert pushed.exact and [p.table_id for p in pushed.plans] == [A, B] and pushed.planned_on == 0
    [(tables, settings)] = planner.asked
    assert tables == [A, B] and (settings.split_rows, settings.chunk_rows) == (10, 30)


def test_the_runs_progress_records_its_chunks_for_the_snapshot_tasks_count(tmp_path):
    _run(tmp_path, tables=["shop.a", "shop.b"])
    progress = PipelineState(str(tmp_path / "state")).read_progress(RunPlanProgress,
                                                                    f"{run_folder('manual__1')}/plan-plan.json")
    assert progress is not None and progress.chunks == 2 and progress.chunk_tables == [A.quoted, B.quoted]


def test_an_unset_tables_param_plans_nothing_and_hands_on_an_inexact_plan(tmp_path):
    returned, ti, planner = _run(tmp_path, tables=None)
    assert returned == [] and planner.asked == []
    assert decode(TablePlans, ti.pushed["tables"], "the tables XCom") == TablePlans(exact=False, planned_on=0)


def test_an_unset_param_group_covers_the_captured_tables_the_dag_does_not_name(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    state.commit(captured_tables([FinishedSplit(SnapshotSplit(t, 0, "id"), HEAD) for t in (A, B)]))
    returned, ti, planner = _run(tmp_path, tables=None, unset_covers_captured_except=["shop.a"])
    assert planner.asked[0][0] == [B]
    assert not decode(TablePlans, ti.pushed["tables"], "the tables XCom").exact


def test_overlapping_runs_are_refused_before_anything_is_planned(tmp_path):
    with pytest.raises(ConfigurationError, match="1 other run"):
        _run(tmp_path, FakeTaskInstance(running_runs=2), tables=["shop.a"])
    assert not (tmp_path / "state").exists() or not list((tmp_path / "state").rglob("plan-*.json"))


def test_bad_settings_are_refused_before_the_planner_is_asked(tmp_path):
    operator = MySqlCdcPlanOperator(task_id="plan", state_location=str(tmp_path / "state"), tables=["shop.a"],
                                    split_rows=100, chunk_rows=10)
    hook = FakeHook()
    operator.__dict__["hook"] = hook
    with pytest.raises(ConfigurationError, match="split_rows <= chunk_rows"):
        operator.execute({"ti": FakeTaskInstance(), "dag": FakeDag(), "run_id": "r"})  # type: ignore[arg-type]
    assert hook.planner_.asked == []


def test_the_chunk_records_it_returns_carry_the_label_the_ui_shows(tmp_path):
    returned, _, _ = _run(tmp_path, tables=["shop.a"])
    assert returned[0]["label"] == "shop.a chunk 1/1" and returned == [encode(decode(ChunkPlan, returned[0], "x"))]


SHARDS = (TableId("shop", "order_1"), TableId("shop", "order_2"), TableId("shop", "order_x"), A)


def test_a_pattern_plans_the_tables_it_matches_on_the_server_less_the_excluded(tmp_path):
    _, ti, planner = _run(tmp_path, server=SHARDS, tables=["shop.a", "shop.order_\\d+"],
                          exclude_tables="shop.order_2")
    assert planner.asked[0][0] == [A, TableId("shop", "order_1")]
    assert decode(TablePlans, ti.pushed["tables"], "the tables XCom").exact


def test_a_pattern_that_matches_nothing_fails_the_plan_before_anything_is_planned(tmp_path):
    with pytest.raises(ConfigurationError, match=r"'shop\.ordr_\\d\+' matches no table on the source"):
        _run(tmp_path, server=SHARDS, tables=["shop.ordr_\\d+"])
    assert not (tmp_path / "state").exists() or not list((tmp_path / "state").rglob("plan-*.json"))


def test_an_unset_param_group_leaves_the_tables_the_dags_patterns_cover_to_their_group(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    state.commit(captured_tables([FinishedSplit(SnapshotSplit(t, 0, "id"), HEAD) for t in SHARDS]))
    _, _, planner = _run(tmp_path, tables=None, unset_covers_captured_except=["shop.order_\\d+"])
    assert planner.asked[0][0] == [A, TableId("shop", "order_x")]


def test_tables_another_group_names_or_matches_first_are_left_to_it(tmp_path):
    _, ti, planner = _run(tmp_path, server=SHARDS, tables=["shop.order_\\d+"],
                          leave_to_other_groups=["shop.order_1", "shop.order_[x]"])
    assert planner.asked[0][0] == [TableId("shop", "order_2")]
