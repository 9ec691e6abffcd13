"""The stream's heartbeat (stream/heartbeat.py, spark/stream_job.py's BatchFollower): when it is due,
what it records while no batch finishes, and the settings refused before anything runs."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.protocol.progress import StreamHistory, StreamOffsetProgress
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.spark.stream_job import BatchFollower
from airflow_provider_mysqlcdc.state.registry import STREAM_HISTORY, STREAM_OFFSET, PipelineState
from airflow_provider_mysqlcdc.stream.heartbeat import Heartbeat, idle_lag

END = BinlogOffset("bin.000003", 4000)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_heartbeat_is_due_an_interval_after_the_last_batch_or_heartbeat():
    clock = Clock()
    beat = Heartbeat(30, clock)
    clock.now += 29.9
    assert not beat.due()
    clock.now += 0.1
    assert beat.due()
    beat.batch_finished()
    assert not beat.due()
    clock.now += 30
    beat.beat()
    assert not beat.due()


def test_no_heartbeat_with_an_interval_of_zero():
    clock = Clock()
    beat = Heartbeat(0, clock)
    clock.now += 10**6
    assert not beat.due()


def test_a_stream_caught_up_with_the_head_has_no_lag_and_one_behind_keeps_its_last():
    assert idle_lag(0, 12.5) == 0.0
    assert idle_lag(4096, 12.5) == 12.5 and idle_lag(None, 12.5) == 12.5


@pytest.mark.parametrize("settings, message", [
    ({"heartbeat_interval_s": -1}, "heartbeat_interval_s must be 0"),
    ({"heartbeat_interval_s": 0, "heartbeat_query": "UPDATE hb SET ts = NOW()"}, "which is 0: give an interval"),
    ({"heartbeat_query": "UPDATE hb SET ts = NOW(); DROP TABLE x"}, "must be one statement"),
])
def test_heartbeat_settings_that_cannot_be_right_are_refused(tmp_path, settings, message):
    with pytest.raises(ConfigurationError, match=message):
        StreamJob(str(tmp_path / "state"), SinkSpec(str(tmp_path / "lake")), **settings)


class Query:
    """What the follower reads of a Spark query: its finished batches' progress."""

    def __init__(self, batches: list[dict]) -> None:
        self.recentProgress = batches

    @property
    def lastProgress(self) -> dict | None:
        return self.recentProgress[-1] if self.recentProgress else None


def progress(batch: int, end: BinlogOffset) -> dict:
    import json

    return {"batchId": batch, "sources": [{"startOffset": None, "endOffset": json.dumps(StreamOffset(end, 1).to_spark())}]}


def test_a_quiet_stream_records_its_position_measured_again_runs_the_query_and_has_no_lag(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    job = StreamJob(state.location, SinkSpec(str(tmp_path / "lake")), heartbeat_interval_s=30, heartbeat_query="UPDATE hb SET x = 1")
    ran: list[str] = []
    measured = iter([(BinlogOffset("bin.000003", 9000), 5000), (END, 0)])
    follower = BatchFollower(state, job, lambda: None, measure=lambda end: next(measured), run_query=ran.append)
    clock = Clock()
    follower.heartbeat = Heartbeat(30, clock)
    query = Query([progress(0, END)])
    follower.follow(query)  # the batch: measured 5000 bytes behind
    first = state.read_progress(StreamOffsetProgress, STREAM_OFFSET)
    assert first is not None and first.bytes_behind == 5000
    clock.now += 10
    follower.follow(query)  # nothing new, no heartbeat yet
    assert ran == [] and state.read_progress(StreamOffsetProgress, STREAM_OFFSET) == first
    clock.now += 20
    follower.follow(query)  # quiet for 30 s: the heartbeat
    again = state.read_progress(StreamOffsetProgress, STREAM_OFFSET)
    assert ran == ["UPDATE hb SET x = 1"]
    assert again is not None and again.offset.offset == END and again.committed_at > first.committed_at
    assert (again.bytes_behind, again.lag_s) == (0, 0.0)
    history = state.read_progress(StreamHistory, STREAM_HISTORY)
    assert history is not None and [(p.bytes_behind, p.changes) for p in history.points][-1] == (0, 0)


def test_before_its_first_batch_a_heartbeat_only_runs_the_query(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    job = StreamJob(state.location, SinkSpec(str(tmp_path / "lake")), heartbeat_query="UPDATE hb SET x = 1")
    ran: list[str] = []
    follower = BatchFollower(state, job, lambda: None, measure=lambda end: (end, 0), run_query=ran.append)
    clock = Clock()
    follower.heartbeat = Heartbeat(30, clock)
    clock.now += 31
    follower.follow(Query([]))
    assert ran == ["UPDATE hb SET x = 1"] and state.read_progress(StreamOffsetProgress, STREAM_OFFSET) is None
