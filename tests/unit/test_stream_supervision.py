"""Watching a detached stream (spark/supervision.py, triggers/stream.py) through real report folders
and leases in a state folder: what the trigger fires with in each way a stream can end."""

from __future__ import annotations

import asyncio
import json

import pytest

from airflow_provider_mysqlcdc.protocol.envelope import decode
from airflow_provider_mysqlcdc.protocol.results import StreamPhase, StreamStatus
from airflow_provider_mysqlcdc.spark.report import JobReport, stop_request
from airflow_provider_mysqlcdc.spark.supervision import ENDING_GRACE_S, DetachedStream
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
