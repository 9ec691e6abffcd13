"""Watching a detached stream (spark/supervision.py, triggers/stream.py) through real report folders
and leases in a state folder: what the trigger fires with in each way a stream can end."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace

import pytest

from airflow_provider_mysqlcdc.operators.stream import STOPPED_BY_ITS_TASK, MySqlCdcStreamOperator
from airflow_provider_mysqlcdc.protocol.envelope import decode, encode
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.results import DetachedStreamRef, StreamPhase, StreamStatus
from airflow_provider_mysqlcdc.spark.report import JobReport, stop_request
from airflow_provider_mysqlcdc.spark.supervision import ENDING_GRACE_S, DetachedStream, wait_for_a_stopping_stream
from airflow_provider_mysqlcdc.state.lease import StreamLeases
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.triggers.stream import MySqlCdcStreamTrigger


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def where(tmp_path):
    state = str(tmp_path / "state")
    return state, f"{state}/runs/r1/spark/stream--1-1"


def test_a_stream_not_holding_the_lease_yet_is_starting_until_its_start_timeout(where):
    state, report = where
    clock = Clock()
    stream = DetachedStream(state, report, submitted_at=clock.now, start_timeout_s=300, clock=clock)
    clock.now += 299
    assert stream.status().phase is StreamPhase.STARTING
    clock.now += 2
    lost = stream.status()
    assert lost.phase is StreamPhase.LOST and "within 300s" in lost.message


def test_a_stream_holding_the_lease_with_its_report_folder_is_running(where):
    state, report = where
    StreamLeases(PipelineState(state), host="worker-1").acquire("task t", report=report)
    assert DetachedStream(state, report, submitted_at=0).status().phase is StreamPhase.RUNNING


def test_a_failed_stream_reports_its_own_error(where):
    state, report = where
    with JobReport(report) as job:
        job.failed(RuntimeError("binlog.000042 was purged"))
    failed = DetachedStream(state, report, submitted_at=0).status()
    assert failed.phase is StreamPhase.FAILED and "binlog.000042 was purged" in failed.message


def test_a_stream_that_ended_hands_back_its_result(where):
    state, report = where
    with JobReport(report) as job:
        job.succeeded({"record": "stream-result", "changes_applied": 7})
    finished = DetachedStream(state, report, submitted_at=0).status()
    assert finished.phase is StreamPhase.FINISHED and finished.result["changes_applied"] == 7


def test_a_released_lease_without_a_result_is_ending_then_lost(where):
    state, report = where
    clock = Clock()
    StreamLeases(PipelineState(state), clock=clock, host="worker-1").acquire("task t", report=report).release()
    stream = DetachedStream(state, report, submitted_at=clock.now, clock=clock)
    assert stream.status().phase is StreamPhase.RUNNING
    clock.now += ENDING_GRACE_S + 1
    assert stream.status().phase is StreamPhase.LOST


def test_a_stream_whose_heartbeat_stopped_is_lost(where):
    state, report = where
    clock = Clock()
    StreamLeases(PipelineState(state), clock=clock, host="worker-1").acquire("task t", report=report, ttl_s=60)
    clock.now += 61
    lost = DetachedStream(state, report, submitted_at=0, clock=clock).status()
    assert lost.phase is StreamPhase.LOST and "no heartbeat for 61s" in lost.message


def test_a_stream_whose_lease_was_taken_over_is_lost_naming_the_taker(where):
    state, report = where
    clock = Clock()
    leases = StreamLeases(PipelineState(state), clock=clock, host="worker-1")
    leases.acquire("task t", report=report, ttl_s=60)
    stream = DetachedStream(state, report, submitted_at=0, clock=clock)
    assert stream.status().phase is StreamPhase.RUNNING
    clock.now += 61
    StreamLeases(PipelineState(state), clock=clock, host="worker-2").acquire("bin/stream by hand")
    lost = stream.status()
    assert lost.phase is StreamPhase.LOST and "bin/stream by hand" in lost.message


def test_asking_a_detached_stream_to_stop_reaches_it_through_its_report_folder(where):
    state, report = where
    DetachedStream(state, report, submitted_at=0).request_stop("its task was marked failed")
    assert stop_request(report).reason == "its task was marked failed"


def test_the_trigger_serializes_to_what_builds_it_again(where):
    state, report = where
    trigger = MySqlCdcStreamTrigger(state=state, report=report, submitted_at=5.0, poll_interval_s=0.5)
    path, kwargs = trigger.serialize()
    assert path == "airflow_provider_mysqlcdc.triggers.stream.MySqlCdcStreamTrigger"
    assert MySqlCdcStreamTrigger(**json.loads(json.dumps(kwargs))).serialize() == (path, kwargs)


def test_the_trigger_fires_with_the_streams_own_failure(where):
    state, report = where
    StreamLeases(PipelineState(state)).acquire("task t", report=report)
    trigger = MySqlCdcStreamTrigger(state=state, report=report, submitted_at=0, poll_interval_s=0.05)

    async def first_event():
        events = trigger.run()
        with JobReport(report) as job:
            job.failed(RuntimeError("the source went away"))
        return await anext(events)

    status = decode(StreamStatus, asyncio.run(first_event()).payload, "event")
    assert status.phase is StreamPhase.FAILED and "the source went away" in status.message


def test_a_stream_nobody_asked_to_stop_is_not_waited_for(where):
    state, report = where
    StreamLeases(PipelineState(state)).acquire("task t", report=report)
    wait_for_a_stopping_stream(state, timeout_s=30, poll_s=0.01)  # returns at once: the lease refuses a second


def test_a_new_try_waits_until_the_stream_asked_to_stop_lets_the_lease_go(where):
    state, report = where
    held = StreamLeases(PipelineState(state)).acquire("task t, try 1", report=report)
    DetachedStream(state, report, submitted_at=0).request_stop("its Airflow task was cleared")
    waited: list[str] = []
    waiter = threading.Thread(target=wait_for_a_stopping_stream, args=(state,),
                              kwargs={"timeout_s": 60, "poll_s": 0.01, "on_wait": waited.append})
    waiter.start()
    deadline = time.monotonic() + 10
    while not waited and time.monotonic() < deadline:
        time.sleep(0.01)
    assert waiter.is_alive() and "its Airflow task was cleared" in waited[0]
    held.release()
    waiter.join(10)
    assert not waiter.is_alive()


def test_a_stream_asked_to_stop_on_its_lease_is_waited_for_too(where):
    state, report = where
    leases = StreamLeases(PipelineState(state))
    held = leases.acquire("bin/stream by hand", report=report)
    leases.request_stop(held.lease.number, "stopped by hand")
    waited: list[str] = []
    wait_for_a_stopping_stream(state, timeout_s=0.05, poll_s=0.01, on_wait=waited.append)
    assert "stopped by hand" in waited[0]


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
    operator._job = StreamJob(state=state, sink_root="/lake", mode="continuous")
    monkeypatch.setattr(operator, "start_spark_program", lambda *args: events.append("start"))
    ti = SimpleNamespace(dag_id="d", task_id="stream", map_index=-1, try_number=1)
    store = RecordingStore(events)
    assert operator.submit_job({"ti": ti, "run_id": "r1", "task_state_store": store}) is None
    assert events == [f"set {operator.external_id_key}", "start"]
    stored = decode(DetachedStreamRef, store.values[operator.external_id_key], "stored")
    assert stored.report == operator._follow(None).folder
