"""Watching a detached stream (launch/supervision.py) through real report folders and leases in a state
folder: what the watch finds in each way a stream can end (the trigger and the operator over it:
tests/unit/triggers/test_stream.py, tests/unit/operators/test_stream.py)."""

from __future__ import annotations

import threading
import time

from airflow_provider_mysqlcdc.launch.supervision import ENDING_GRACE_S, DetachedStream, wait_for_a_stopping_stream
from airflow_provider_mysqlcdc.protocol.results import StreamPhase
from airflow_provider_mysqlcdc.spark.report import JobReport, stop_request
from airflow_provider_mysqlcdc.state.lease import StreamLeases
from airflow_provider_mysqlcdc.state.registry import PipelineState


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


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
