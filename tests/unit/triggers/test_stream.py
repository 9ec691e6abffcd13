"""``MySqlCdcStreamTrigger``: the triggerer's watch over a detached stream (triggers/stream.py)."""

from __future__ import annotations

import asyncio
import json

from airflow_provider_mysqlcdc.protocol.envelope import decode
from airflow_provider_mysqlcdc.protocol.results import StreamPhase, StreamStatus
from airflow_provider_mysqlcdc.spark.report import JobReport
from airflow_provider_mysqlcdc.state.lease import StreamLeases
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.triggers.stream import MySqlCdcStreamTrigger


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
