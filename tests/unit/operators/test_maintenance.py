"""``MySqlCdcMaintenanceOperator``'s own logic (operators/maintenance.py): what it refuses before
touching anything, maintaining the tables itself when no stream runs, handing the work to a live
stream and waiting for its report, and taking it back when the stream ends without answering. The
stream is played by a thread that answers through the real state location; the sink is a real Delta
lake (what maintenance does to a table: tests/unit/sinks/test_maintenance.py)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError, MaintenanceNotAnswered
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.operators.maintenance import MySqlCdcMaintenanceOperator
from airflow_provider_mysqlcdc.protocol.envelope import decode
from airflow_provider_mysqlcdc.protocol.maintenance import MaintenanceReport, MaintenanceRequest, TableMaintenance
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.state.lease import StreamLeases
from airflow_provider_mysqlcdc.state.maintenance import MaintenanceRequests
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.sink import settle_sink

T = TableId("db", "t")
CONTEXT = {"ti": SimpleNamespace(dag_id="orders_cdc", task_id="maintain"), "run_id": "manual__1"}


@pytest.fixture
def pipeline(tmp_path) -> tuple[PipelineState, str]:
    """A state location capturing ``db.t``, and a lake where the table is six small files."""
    state = PipelineState(str(tmp_path / "state"))
    at = BinlogOffset("binlog.000001", 4)
    state.commit({T: CapturedTable("id", [FinishedSplit(SnapshotSplit(T, 0, "id"), at, at)])})
    lake = str(tmp_path / "lake")
    for i in range(6):
        write_deltalake(open_sink(SinkSpec(lake)).table_uri(T),
                        pa.table({"id": pa.array([i], pa.int64()), "_cdc_chunk": [f"k{i:04d}"]}), mode="append")
    return state, lake


def operator(state: PipelineState, lake: str, **kwargs) -> MySqlCdcMaintenanceOperator:
    return MySqlCdcMaintenanceOperator(task_id="maintain", sink_root=lake, state_location=state.location,
                                       poll_interval_s=0.01, **kwargs)


def files(lake: str) -> int:
    return len(DeltaTable(open_sink(SinkSpec(lake)).table_uri(T)).file_uris())


def pending_request(state: PipelineState, timeout_s: float = 60) -> MaintenanceRequest:
    """The request the operator submits, once it is there (the stream's side of the exchange)."""
    requests, deadline = MaintenanceRequests(state), time.monotonic() + timeout_s
    while not (pending := requests.pending()):
        assert time.monotonic() < deadline, "the operator submitted no maintenance request"
        time.sleep(0.01)
    return pending[0]


def run_beside(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_the_operator_refuses_a_table_the_pipeline_does_not_capture_before_touching_any(pipeline):
    state, lake = pipeline
    with pytest.raises(ConfigurationError, match=r"does not capture db.other: name tables it captures \(db.t\)"):
        operator(state, lake, tables=["db.other"]).execute(context=CONTEXT)
    assert files(lake) == 6


def test_the_operator_refuses_a_retention_that_is_not_a_number_of_hours(pipeline):
    state, lake = pipeline
    with pytest.raises(ConfigurationError, match="vacuum_retention_hours must be a number of hours"):
        operator(state, lake, vacuum_retention_hours="a week").execute(context=CONTEXT)
    assert files(lake) == 6


def test_without_a_stream_the_operator_maintains_every_captured_table_itself(pipeline):
    state, lake = pipeline
    report = decode(MaintenanceReport, operator(state, lake).execute(context=CONTEXT), "xcom")

    assert report.done_by == "this task"
    assert [(t.table, t.files_before, t.files_after) for t in report.tables
            if not t.table.endswith("_changelog")] == [(open_sink(SinkSpec(lake)).table_uri(T), 6, 1)]
    assert files(lake) == 1


def test_the_operator_maintains_the_sink_the_pipeline_recorded_when_it_names_none(pipeline):
    state, lake = pipeline
    settle_sink(state, SinkSpec(lake))  # the pipeline's first run
    maintain = MySqlCdcMaintenanceOperator(task_id="maintain", state_location=state.location, poll_interval_s=0.01)
    report = decode(MaintenanceReport, maintain.execute(context=CONTEXT), "xcom")
    assert report.done_by == "this task" and files(lake) == 1


def test_the_operator_refuses_another_sink_than_the_pipelines_before_touching_the_lake(pipeline):
    state, lake = pipeline
    settle_sink(state, SinkSpec(lake))
    with pytest.raises(ConfigurationError, match="sink_format 'delta' != 'iceberg'.*new state location"):
        operator(state, lake, sink_format="iceberg").execute(context=CONTEXT)
    assert files(lake) == 6


def test_the_operator_of_a_pipeline_that_recorded_no_sink_needs_sink_root(pipeline):
    state, lake = pipeline
    maintain = MySqlCdcMaintenanceOperator(task_id="maintain", state_location=state.location, poll_interval_s=0.01)
    with pytest.raises(ConfigurationError, match="has recorded no sink yet.*give sink_root"):
        maintain.execute(context=CONTEXT)
    assert files(lake) == 6


def test_with_a_live_stream_the_operator_hands_the_work_over_and_returns_the_streams_report(pipeline):
    state, lake = pipeline
    held = StreamLeases(state).acquire("the stream task")
    answers: list[MaintenanceReport] = []

    def stream() -> None:
        request = pending_request(state)
        answers.append(MaintenanceReport(request.request_id, "the stream task", request.policy,
                                         [TableMaintenance("the stream's table", 6, 1)]))
        MaintenanceRequests(state).answer(answers[0])

    helper = run_beside(stream)
    try:
        report = decode(MaintenanceReport, operator(state, lake).execute(context=CONTEXT), "xcom")
    finally:
        held.release()
    helper.join(10)

    assert [report] == answers
    assert files(lake) == 6  # the operator itself touched nothing
    assert MaintenanceRequests(state).pending() == []


def test_a_stream_that_ends_without_answering_leaves_the_work_to_the_operator(pipeline):
    state, lake = pipeline
    held = StreamLeases(state).acquire("the stream task")

    def stream() -> None:
        pending_request(state)
        held.release()  # it stopped before its next micro-batch

    helper = run_beside(stream)
    report = decode(MaintenanceReport, operator(state, lake).execute(context=CONTEXT), "xcom")
    helper.join(10)

    assert report.done_by == "this task" and files(lake) == 1
    assert MaintenanceRequests(state).pending() == []  # withdrawn


def test_a_stream_that_does_not_answer_in_time_fails_the_task_and_the_request_is_withdrawn(pipeline):
    state, lake = pipeline
    held = StreamLeases(state).acquire("the stream task")
    try:
        with pytest.raises(MaintenanceNotAnswered, match="did not answer maintenance request .* raise stream_timeout_s"):
            operator(state, lake, stream_timeout_s=0.2).execute(context=CONTEXT)
    finally:
        held.release()
    assert MaintenanceRequests(state).pending() == [] and files(lake) == 6
