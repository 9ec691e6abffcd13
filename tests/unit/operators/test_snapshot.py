"""``MySqlCdcSnapshotOperator``'s own logic, with its hook and Spark runner replaced (the chunk job
itself runs for real in tests/integration): the job it asks for, staging for a table already
captured, the result it hands on and the run's progress it records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.operators.snapshot import MySqlCdcSnapshotOperator
from airflow_provider_mysqlcdc.protocol.envelope import decode, encode
from airflow_provider_mysqlcdc.protocol.jobs import ChunkJob
from airflow_provider_mysqlcdc.protocol.plans import ChunkPlan
from airflow_provider_mysqlcdc.protocol.progress import ChunkProgress
from airflow_provider_mysqlcdc.protocol.results import ChunkResult
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials
from airflow_provider_mysqlcdc.state.registry import PipelineState, captured_tables, run_folder

T = TableId("shop", "orders")
SPLITS = (SnapshotSplit(T, 0, "id", None, 100), SnapshotSplit(T, 1, "id", 100, None))
HIGH = BinlogOffset("binlog.000002", 400)


class FakeHook:
    def source_config(self) -> SourceConfig:
        return SourceConfig(host="db.example", port=3306, user="cdc", password="pw")

    def server_id_range(self) -> tuple[int, int]:
        return (5400, 5499)

    def retry_budget_s(self) -> float:
        return 42.0


@dataclass
class FakeRunner:
    """Runs nothing: records the job, answers as the chunk job does."""

    jobs: list[ChunkJob] = field(default_factory=list)

    def run(self, script: str, job_json: str, **_: Any) -> dict[str, Any]:
        job = ChunkJob.from_json(job_json)
        self.jobs.append(job)
        return encode(ChunkResult(job.table, [FinishedSplit(s, HIGH, rows=10) for s in job.splits], 20, 3, 1.5))


@dataclass
class FakeTaskInstance:
    map_index: int = 0
    try_number: int = 1
    pushed: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def _snapshot(tmp_path, **options: Any) -> tuple[ChunkResult, FakeRunner]:
    operator = MySqlCdcSnapshotOperator(task_id="snapshot", sink_root=str(tmp_path / "lake"),
                                        state_location=str(tmp_path / "state"),
                                        chunk=encode(ChunkPlan("shop.orders chunk 1/1", T, SPLITS)), **options)
    runner = FakeRunner()
    operator.__dict__.update(hook=FakeHook(), spark_runner=runner, object_store=ObjectStoreCredentials({}))
    result = operator.execute({"ti": FakeTaskInstance(), "run_id": "manual__1"})  # type: ignore[arg-type]
    return decode(ChunkResult, result, "the snapshot result"), runner


def test_it_asks_the_chunk_job_for_its_chunks_splits_with_the_connections_settings(tmp_path):
    result, runner = _snapshot(tmp_path)
    [job] = runner.jobs
    assert job.table == T.quoted and tuple(job.splits) == SPLITS and job.stage_to is None
    assert job.server_id_range == (5400, 5499) and job.retry_budget_s == 42.0
    assert result.label == "shop.orders chunk 1/1" and result.rows == 20


def test_the_chunk_job_reads_at_least_once_when_asked_and_exactly_once_by_default(tmp_path):
    assert _snapshot(tmp_path)[1].jobs[0].replays_windows
    [job] = _snapshot(tmp_path, snapshot_consistency="at-least-once")[1].jobs
    assert job.snapshot_consistency == "at-least-once" and not job.replays_windows


def test_an_unknown_snapshot_consistency_is_refused_when_the_operator_is_made():
    with pytest.raises(ConfigurationError, match="snapshot_consistency must be one of"):
        MySqlCdcSnapshotOperator(task_id="snapshot", sink_root="/lake", state_location="/state", chunk={},
                                 snapshot_consistency="sometimes")


def test_a_table_captured_before_is_staged_for_the_stream(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    state.commit(captured_tables([FinishedSplit(SnapshotSplit(T, 0, "id"), HIGH)]))
    _, runner = _snapshot(tmp_path)
    assert runner.jobs[0].stage_to and runner.jobs[0].stage_to.startswith(state.storage.url("staged"))


def test_the_chunk_is_recorded_for_the_runs_count_of_chunks_done(tmp_path):
    _snapshot(tmp_path)
    progress = PipelineState(str(tmp_path / "state")).read_progress(
        ChunkProgress, f"{run_folder('manual__1')}/chunk-snapshot-0.json")
    assert progress == ChunkProgress("shop.orders chunk 1/1", T.quoted, 20, HIGH)
