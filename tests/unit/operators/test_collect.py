"""``MySqlCdcCollectSplitsOperator``'s execute over the XComs a run's plan and snapshot tasks leave,
and a real state location: what lands as the next registry generation, and what does not."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_provider_mysqlcdc.cdc.errors import PlanNotFinished
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.operators.collect import MySqlCdcCollectSplitsOperator
from airflow_provider_mysqlcdc.protocol.actions import PlanAction
from airflow_provider_mysqlcdc.protocol.envelope import decode, encode
from airflow_provider_mysqlcdc.protocol.plans import ChunkPlan, TablePlan, TablePlans
from airflow_provider_mysqlcdc.protocol.results import ChunkResult, CollectResult
from airflow_provider_mysqlcdc.state.registry import PipelineState

A, B = TableId("shop", "a"), TableId("shop", "b")
HIGH = BinlogOffset("binlog.000002", 400)


@dataclass
class FakeTaskInstance:
    """The XComs of the run: ``(task_id, key)`` -> value; a mapped task's values by map index."""

    xcoms: dict[tuple[str, str], Any] = field(default_factory=dict)
    mapped: dict[str, list[Any]] = field(default_factory=dict)

    def xcom_pull(self, task_ids: str, key: str = "return_value", map_indexes: list[int] | None = None) -> Any:
        if map_indexes is not None:
            return [self.mapped[task_ids][i] for i in map_indexes]
        return self.xcoms.get((task_ids, key))


def _planned(ti: FakeTaskInstance, group: str, *tables: TableId) -> list[SnapshotSplit]:
    """A plan task of ``group`` that snapshots each table as one split in one chunk."""
    splits = [SnapshotSplit(t, 0, "id") for t in tables]
    plans = [TablePlan(s.table_id, "id", PlanAction.SNAPSHOT, [s]) for s in splits]
    ti.xcoms[(f"{group}.plan", "tables")] = encode(TablePlans(True, plans, planned_on=0))
    ti.xcoms[(f"{group}.plan", "return_value")] = [encode(ChunkPlan(f"{s.table_id} chunk 1/1", s.table_id, (s,)))
                                                   for s in splits]
    return splits


def _finished(split: SnapshotSplit) -> dict[str, Any]:
    return encode(ChunkResult(split.table_id.quoted, [FinishedSplit(split, HIGH, rows=5)], 5, 0, 1.0, "x"))


def _collect(tmp_path, ti: FakeTaskInstance, *groups: str) -> CollectResult:
    operator = MySqlCdcCollectSplitsOperator(task_id="collect_splits", state_location=str(tmp_path / "state"),
                                             groups=[(f"{g}.plan", f"{g}.snapshot") for g in groups])
    return decode(CollectResult, operator.execute({"ti": ti, "run_id": "manual__1"}),  # type: ignore[arg-type]
                  "the collect result")


def test_every_finished_split_lands_as_the_next_registry_generation(tmp_path):
    ti = FakeTaskInstance()
    splits = _planned(ti, "shop__a", A) + _planned(ti, "shop__b", B)
    ti.mapped = {"shop__a.snapshot": [_finished(splits[0])], "shop__b.snapshot": [_finished(splits[1])]}
    result = _collect(tmp_path, ti, "shop__a", "shop__b")
    generation = PipelineState(str(tmp_path / "state")).latest()
    assert result.generation == generation.number == 1 and set(generation.tables) == {A, B}
    assert generation.tables[A].splits[0].high_watermark == HIGH and result.left_out == []


def test_a_table_whose_chunk_task_failed_is_left_out_and_the_others_land(tmp_path):
    ti = FakeTaskInstance()
    splits = _planned(ti, "shop__a", A) + _planned(ti, "shop__b", B)
    ti.mapped = {"shop__a.snapshot": [None], "shop__b.snapshot": [_finished(splits[1])]}
    result = _collect(tmp_path, ti, "shop__a", "shop__b")
    assert set(PipelineState(str(tmp_path / "state")).latest().tables) == {B}
    assert result.left_out == [str(A)]


def test_a_plan_task_that_did_not_finish_lands_nothing(tmp_path):
    ti = FakeTaskInstance()
    splits = _planned(ti, "shop__b", B)
    ti.mapped = {"shop__b.snapshot": [_finished(splits[0])]}
    with pytest.raises(PlanNotFinished, match="shop__a.plan did not finish"):
        _collect(tmp_path, ti, "shop__b", "shop__a")
    assert PipelineState(str(tmp_path / "state")).latest_number() == 0
