"""Heartbeats (Flink CDC's heartbeat.interval, Debezium's heartbeat.action.query) on a real continuous
stream whose captured table is quiet: the stream records its position, measured against the head,
at each heartbeat; its heartbeat query writes to a table the pipeline does not capture, which moves
the binlog, and with it the stream's position, on; a query the CDC user may not run is refused
before the stream writes anything."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from airflow_provider_mysqlcdc.cdc.errors import SparkJobFailed
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.progress import StreamOffsetProgress
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.registry import STREAM_OFFSET, PipelineState
from devtools.snapshot import snapshot_tables
from devtools.spark_submit import SparkSubmit

from .helpers import run_stream

pytestmark = pytest.mark.integration


def _quiet_pipeline(mysql_server, cdc_user, database, tmp_path) -> tuple[PipelineState, str, str]:
    table = TableId(database, "quiet")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, v INT)")
        cur.execute(f"INSERT INTO {table.quoted} VALUES (1, 1)")
        cur.execute(f"CREATE TABLE `{database}`.heartbeat (id INT PRIMARY KEY, ts DATETIME(6))")
    conn.commit()
    state, lake = PipelineState(str(tmp_path / "state")), str(tmp_path / "lake")
    snapshot_tables(cdc_user, [table], lake, state)
    return state, lake, f"INSERT INTO `{database}`.heartbeat VALUES (1, NOW(6)) ON DUPLICATE KEY UPDATE ts = NOW(6)"


def _follow_records(state: PipelineState, tmp_path, request, job: StreamJob, cdc_user,
                    enough: Callable[[list[StreamOffsetProgress]], bool]) -> list[StreamOffsetProgress]:
    """Run ``job`` (a continuous stream) and collect each new position record until ``enough``."""
    (tmp_path / "stream.json").write_text(job.to_json())
    log_file = tmp_path / "stream.log"
    proc = SparkSubmit(master="local[2]", work_dir=tmp_path / "spark").start(
        "binlog_stream.py", ["--job", str(tmp_path / "stream.json")],
        cdc_user.to_private_file(tmp_path / "secrets" / "source.json"), log_file)
    request.addfinalizer(lambda: proc.poll() is None and os.killpg(proc.pid, signal.SIGKILL))
    seen: list[StreamOffsetProgress] = []
    deadline = time.monotonic() + 300
    while not enough(seen):  # waits on the records themselves
        assert proc.poll() is None and time.monotonic() < deadline, log_file.read_text()[-3000:]
        found = state.read_progress(StreamOffsetProgress, STREAM_OFFSET)
        if found is not None and (not seen or found.committed_at > seen[-1].committed_at):
            seen.append(found)
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    return seen


def test_a_stream_over_a_quiet_source_records_its_position_again_caught_up_and_without_lag(
        mysql_server, cdc_user, database, tmp_path, request):
    state, lake, _ = _quiet_pipeline(mysql_server, cdc_user, database, tmp_path)
    job = StreamJob(state=state.location, sink=SinkSpec(lake), mode="continuous", trigger_interval_s=0.5, heartbeat_interval_s=1)
    # nothing is written: after the first batch only heartbeats record, at the same position
    seen = _follow_records(state, tmp_path, request, job, cdc_user, lambda seen: len(seen) >= 4)
    assert len({p.offset.offset for p in seen}) == 1
    assert all((p.bytes_behind, p.lag_s) == (0, 0.0) for p in seen[1:])


def test_a_heartbeat_query_moves_the_position_of_a_stream_over_a_quiet_table_on(mysql_server, cdc_user, database,
                                                                                tmp_path, request):
    state, lake, query = _quiet_pipeline(mysql_server, cdc_user, database, tmp_path)
    admin = mysql_server.connect()
    with admin.cursor() as cur:
        cur.execute(f"GRANT INSERT, UPDATE ON `{database}`.heartbeat TO %s@'%%'", (cdc_user.user,))
    job = StreamJob(state=state.location, sink=SinkSpec(lake), mode="continuous", trigger_interval_s=0.5, heartbeat_interval_s=1, heartbeat_query=query)
    seen = _follow_records(state, tmp_path, request, job, cdc_user, lambda seen: len({p.offset.offset for p in seen}) >= 3)
    offsets = [p.offset.offset for p in seen]
    assert offsets == sorted(offsets)  # only the heartbeat table was written: it moved the position on
    with admin.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{database}`.heartbeat")
        assert cur.fetchone()[0] == 1


def test_a_heartbeat_query_the_cdc_user_may_not_run_is_refused_before_anything_is_written(
        mysql_server, cdc_user, database, tmp_path):
    state, lake, query = _quiet_pipeline(mysql_server, cdc_user, database, tmp_path)
    with pytest.raises(SparkJobFailed, match=r"heartbeat_query .* cannot run on the source .*GRANT the CDC user"):
        run_stream(cdc_user, tmp_path / "stream", StreamJob(state=state.location, sink=SinkSpec(lake), heartbeat_query=query))
    assert state.read_progress(StreamOffsetProgress, STREAM_OFFSET) is None
