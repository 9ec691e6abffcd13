"""``MySqlCdcStreamOperator``'s own logic as a deferrable, detached stream task: reconnecting or
starting anew on a retry, and where it keeps the stream's id (operators/stream.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.launch.supervision import DetachedStream
from airflow_provider_mysqlcdc.operators.stream import STOPPED_BY_ITS_TASK, MySqlCdcStreamOperator
from airflow_provider_mysqlcdc.protocol.envelope import decode, encode
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.results import DetachedStreamRef
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.spark.report import JobReport
from airflow_provider_mysqlcdc.state.lease import StreamLeases
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.sink import recorded_sink, settle_sink


def test_a_retry_starts_anew_instead_of_reconnecting_to_a_stream_its_task_asked_to_stop(where):
    state, report = where
    StreamLeases(PipelineState(state)).acquire("task t, try 1", report=report)
    operator = MySqlCdcStreamOperator(task_id="stream", state_location=state, sink_root="/lake", mode="continuous")
    ref = encode(DetachedStreamRef(report, 0.0))
    running = operator.get_job_status(ref, context={})
    assert operator.is_job_active(running)

    DetachedStream(state, report, submitted_at=0).request_stop("its Airflow task was cleared")
    for status in (operator.get_job_status(ref, context={}), STOPPED_BY_ITS_TASK):
        assert not operator.is_job_active(status) and not operator.is_job_succeeded(status)
    with JobReport(report) as job:  # it stopped cleanly, with a result: still not a success to hand back
        job.succeeded({"record": "stream-result", "changes_applied": 7})
    assert operator.get_job_status(ref, context={}) == STOPPED_BY_ITS_TASK


class RecordingStore:
    """The task state store as the task sees it (``set``/``get``), recording when each key was set."""

    def __init__(self, events: list[str]):
        self.events = events
        self.values: dict[str, object] = {}

    def set(self, key: str, value: object) -> None:
        self.events.append(f"set {key}")
        self.values[key] = value

    def get(self, key: str) -> object:
        return self.values.get(key)


def test_the_stream_id_is_in_the_task_state_store_before_the_stream_starts(where, monkeypatch):
    state, _ = where
    events: list[str] = []
    operator = MySqlCdcStreamOperator(task_id="stream", state_location=state, sink_root="/lake", mode="continuous")
    operator._job = StreamJob(state=state, sink=SinkSpec("/lake"), mode="continuous")
    monkeypatch.setattr(operator, "start_spark_program", lambda *args: events.append("start"))
    ti = SimpleNamespace(dag_id="d", task_id="stream", map_index=-1, try_number=1)
    store = RecordingStore(events)
    assert operator.submit_job({"ti": ti, "run_id": "r1", "task_state_store": store}) is None
    assert events == [f"set {operator.external_id_key}", "start"]
    stored = decode(DetachedStreamRef, store.values[operator.external_id_key], "stored")
    assert stored.report == operator._follow(None).folder


def test_a_stream_naming_another_sink_than_the_pipelines_is_refused_before_its_program_starts(tmp_path, monkeypatch):
    state = PipelineState(str(tmp_path / "state"))
    settle_sink(state, SinkSpec(str(tmp_path / "lake")))  # the pipeline's first run
    started: list[str] = []
    operator = MySqlCdcStreamOperator(task_id="stream", state_location=state.location, sink_root=str(tmp_path / "lake"),
                                      sink_format="iceberg")
    monkeypatch.setattr(operator, "run_spark_program", lambda *args: started.append("run"))
    with pytest.raises(ConfigurationError, match="sink_format 'delta' != 'iceberg'"):
        operator.execute(context={})
    assert started == [] and recorded_sink(state) == SinkSpec(str(tmp_path / "lake"))
