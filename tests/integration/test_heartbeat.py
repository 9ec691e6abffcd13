"""Heartbeats (Flink CDC's heartbeat.interval, Debezium's heartbeat.action.query) on a real continuous
stream whose captured table is quiet: the stream records its position, measured against the head,
at each heartbeat; its heartbeat query writes to a table the pipeline does not capture, which moves
the binlog, and with it the stream's position, on; a query the CDC user may not run is refused
before the stream writes anything."""

from __future__ import annotations

import os
import signal
import time

import pytest

from airflow_provider_mysqlcdc.cdc.errors import SparkJobFailed
from airflow_provider_mysqlcdc.cdc.source.schema import TableId
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.progress import StreamOffsetProgress
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


def test_a_quiet_stream_records_its_position_and_its_heartbeat_query_moves_it_on(mysql_server, cdc_user, database,
                                                                                 tmp_path, request):
    state, lake, query = _quiet_pipeline(mysql_server, cdc_user, database, tmp_path)
    admin = mysql_server.connect()
    with admin.cursor() as cur:
        cur.execute(f"GRANT INSERT, UPDATE ON `{database}`.heartbeat TO %s@'%%'", (cdc_user.user,))
    job = StreamJob(state=state.location, sink_root=lake, mode="continuous", trigger_interval_s=0.5,
                    heartbeat_interval_s=1, heartbeat_query=query)
    (tmp_path / "stream.json").write_text(job.to_json())
    log_file = tmp_path / "stream.log"
    proc = SparkSubmit(master="local[2]", work_dir=tmp_path / "spark").start(
        "binlog_stream.py", ["--job", str(tmp_path / "stream.json")],
        cdc_user.to_private_file(tmp_path / "secrets" / "source.json"), log_file)
    request.addfinalizer(lambda: proc.poll() is None and os.killpg(proc.pid, signal.SIGKILL))

    seen: list[StreamOffsetProgress] = []
    deadline = time.monotonic() + 300
    # waits on the records themselves: three positions, each further on, and a heartbeat's record of a
    # stream caught up with the head (no lag) after the first batch
    while len({p.offset.offset for p in seen}) < 3 or not any(p.bytes_behind == 0 and p.lag_s == 0.0
                                                               for p in seen[1:]):
        assert proc.poll() is None and time.monotonic() < deadline, log_file.read_text()[-3000:]
        found = state.read_progress(StreamOffsetProgress, STREAM_OFFSET)
        if found is not None and (not seen or found.committed_at > seen[-1].committed_at):
            seen.append(found)
        time.sleep(0.2)
    offsets = [p.offset.offset for p in seen]
    assert offsets == sorted(offsets)  # only the heartbeat table was written: it moved the position on
    with admin.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{database}`.heartbeat")
        assert cur.fetchone()[0] == 1


def test_a_heartbeat_query_the_cdc_user_may_not_run_is_refused_before_anything_is_written(
        mysql_server, cdc_user, database, tmp_path):
    state, lake, query = _quiet_pipeline(mysql_server, cdc_user, database, tmp_path)
    with pytest.raises(SparkJobFailed, match=r"heartbeat_query .* cannot run on the source .*GRANT the CDC user"):
        run_stream(cdc_user, tmp_path / "stream", StreamJob(state=state.location, sink_root=lake,
                                                            heartbeat_query=query))
    assert state.read_progress(StreamOffsetProgress, STREAM_OFFSET) is None
