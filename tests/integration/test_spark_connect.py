"""Chunk tasks and the stream as Spark Connect sessions: a Spark Connect server the test starts (the
pip pyspark's own server class, in local mode on loopback) and an Airflow ``spark_connect``
connection to it.

Chunk tasks and the available-now stream run their driver side in the task's process, a continuous
stream in a Python process of its own: no spark-submit, no JVM of the task's own.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_provider_mysqlcdc.cdc.model.split import SnapshotSplit
from airflow_provider_mysqlcdc.cdc.source.preflight import run_preflight
from airflow_provider_mysqlcdc.launch.connect_runner import SparkConnectJobRunner
from airflow_provider_mysqlcdc.launch.supervision import DetachedStream
from airflow_provider_mysqlcdc.protocol.jobs import ChunkJob, StreamJob
from airflow_provider_mysqlcdc.protocol.progress import StreamBatchProgress
from airflow_provider_mysqlcdc.protocol.results import StreamPhase
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.spark.connect import CONNECT_MODE_VARIABLES
from airflow_provider_mysqlcdc.state.lease import StreamLeases
from airflow_provider_mysqlcdc.state.registry import STREAM_PROGRESS, PipelineState
from devtools.dag_runner import example_dag_env, run_dag
from devtools.snapshot import snapshot_tables
from devtools.spark_connect_server import SparkConnectServer
from devtools.verify import source_rows
from devtools.workload import SAMPLE_TABLES, RandomWriters, create_sample_tables

from .helpers import (
    Http2Recorder,
    SecretWatch,
    assert_same_rows,
    delta_rows,
    files_holding,
    spark_processes_of,
    stream_drivers,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    with SparkConnectServer(tmp_path_factory.mktemp("connect")) as server:
        yield server


def test_a_dag_run_on_spark_connect_alone_runs_chunks_and_stream_as_sessions_and_is_exact(
        mysql_server, cdc_user, database, tmp_path, connect_server, monkeypatch):
    """Every byte the tasks send the server passes a recorder: the functions it runs for them hold the
    server's credentials file's path, never the password."""
    conn = mysql_server.connect()
    [table] = create_sample_tables(conn, database, rows_per_table=2000, seed=31, tables=SAMPLE_TABLES[2:3])
    schema = run_preflight(cdc_user, [table]).schemas[table]
    lake, state_dir = tmp_path / "lake", tmp_path / "state"
    env = example_dag_env(tmp_path / "airflow", cdc_user, [table], sink_root=lake, state_dir=state_dir,
                          split_rows=800, chunk_rows=1000)
    recorder = Http2Recorder(connect_server.port)
    env.update(MYSQLCDC_SPARK_CONN_ID="cdc_connect", AIRFLOW_CONN_CDC_CONNECT=json.dumps(
        connect_server.connection(cdc_user.password, port=recorder.port)))
    with RandomWriters(mysql_server.admin, database, writers=1, seed=311, pause_s=0.01, tables=SAMPLE_TABLES[2:3]):
        result = run_dag("mysqlcdc_example", env, conf={"stream_mode": "available-now"})
    recorder.close()
    assert result["state"] == "success", result["output"][-5000:]
    group = f"{table.database}__{table.table}"
    chunks = [key for key in result["xcoms"] if key.startswith(f"{group}.snapshot[") and key.endswith("]")]
    assert len(chunks) >= 2, result["xcoms"].keys()
    assert "Spark Connect session" in result["output"]  # each chunk task and the stream opened one
    assert "chunk job " in result["output"] and "stream batch " in result["output"]  # progress in the task log
    assert "Spark-Submit cmd" not in result["output"]  # no spark-submit: no JVM started by a task
    assert result["xcoms"]["stream[-1]"]["changes_applied"] > 0  # counted on the server, reported here
    sent = recorder.sent_messages()
    assert any(str(connect_server.credentials_file).encode() in message for message in sent)  # the functions
    leaks = sum(cdc_user.password.encode() in message for message in sent)
    assert leaks == 0, f"{leaks} of {len(sent)} messages to the server hold the source's password"

    # the next run's stream, as a session in this process: it applies what came after the DAG's stream
    runner = connect_runner(connect_server, cdc_user.password, monkeypatch)
    job = StreamJob(state=str(state_dir / "mysqlcdc_example"), sink=SinkSpec(str(lake)))
    runner.run("binlog_stream.py", job.to_json(), source=cdc_user, report_folder="")
    assert_same_rows(table, source_rows(mysql_server.admin, schema), delta_rows(str(lake), schema))


def test_a_continuous_stream_on_spark_connect_runs_detached_without_a_jvm_and_stops_on_request(
        mysql_server, cdc_user, database, tmp_path, connect_server, monkeypatch):
    """The operator's path for a continuous stream (``start``, then the report folder): the stream's
    client is a Python process of its own that outlives the caller; a stop request ends it, its query
    on the server and its session, and the sink is exact."""
    conn = mysql_server.connect()
    tables = create_sample_tables(conn, database, rows_per_table=200, seed=33, tables=SAMPLE_TABLES[:1])
    schemas = run_preflight(cdc_user, tables).schemas
    lake, state = str(tmp_path / "lake"), PipelineState(str(tmp_path / "state"))
    snapshot_tables(cdc_user, tables, lake, state, split_rows=100)
    runner = connect_runner(connect_server, cdc_user.password, monkeypatch)
    report = str(tmp_path / "report")
    job = StreamJob(state=state.location, sink=SinkSpec(lake), mode="continuous", trigger_interval_s=0.5, report=report)
    stream = DetachedStream(state.location, report, submitted_at=time.time())
    watch = SecretWatch(cdc_user.password).start()
    with RandomWriters(mysql_server.admin, database, writers=1, seed=331, pause_s=0.01, tables=SAMPLE_TABLES[:1]):
        runner.start("binlog_stream.py", job.to_json(), source=cdc_user, report_folder=report)
        [driver] = stream_drivers(tmp_path)
        assert not [p for p in spark_processes_of(tmp_path) if "java" in p.split(":", 1)[1].split()[0]]
        wait_for(lambda: (state.read_progress(StreamBatchProgress, STREAM_PROGRESS) or SimpleNamespace(
            changes_total=0)).changes_total > 0, "a batch of changes applied")
        assert stream.status().phase is StreamPhase.RUNNING
    stream.request_stop("the test is done")
    wait_for(lambda: stream.status().phase is StreamPhase.FINISHED, "the stream ends on request", timeout_s=60)
    wait_for(lambda: not Path(f"/proc/{driver}").exists(), "the stream's client process exits", timeout_s=30)
    assert StreamLeases(state).current().released
    assert watch.stop() == [] and watch.samples > 0  # no argv or Spark process environment holds it
    assert files_holding(cdc_user.password, tmp_path) == []  # nor a file of the pipeline
    assert files_holding(cdc_user.password, connect_server.work_dir) == []  # nor the server's log

    runner.run("binlog_stream.py", StreamJob(state=state.location, sink=SinkSpec(lake)).to_json(), source=cdc_user,
               report_folder="")  # catch up to what the writers did after the stream's last batch
    for table in tables:
        assert_same_rows(table, source_rows(mysql_server.admin, schemas[table]), delta_rows(lake, schemas[table]))


def test_killing_a_chunk_task_interrupts_its_spark_job_on_the_connect_server(mysql_server, cdc_user, database,
                                                                             tmp_path, connect_server, monkeypatch):
    """Another session holds both of the server's task slots, so the chunk's Spark job waits in the
    server's queue while its driver side (in this process) waits for it. ``on_kill`` must cancel
    that job on the server: without it the chunk would run once the slots are free."""
    from pyspark.sql import SparkSession

    conn = mysql_server.connect()
    [table] = create_sample_tables(conn, database, rows_per_table=300, seed=32, tables=SAMPLE_TABLES[:1])
    schema = run_preflight(cdc_user, [table]).schemas[table]
    job = ChunkJob(table=str(table), splits=[SnapshotSplit(table, 0, schema.key_columns[0])], sink=SinkSpec(str(tmp_path / "lake")), partitions_per_split=1)
    runner = connect_runner(connect_server, cdc_user.password, monkeypatch)
    outcome: list[object] = []

    def chunk_task() -> None:
        try:
            outcome.append(runner.run("snapshot_chunk.py", job.to_json(), source=cdc_user, report_folder=""))
        except Exception as exc:  # noqa: BLE001 (checked below)
            outcome.append(exc)

    def hold_slots(batches):
        import time as clock

        clock.sleep(90)
        yield from batches

    blocker = SparkSession.builder.remote(f"sc://127.0.0.1:{connect_server.port}").create()

    def other_session() -> None:
        try:
            blocker.range(0, 2, 1, 2).mapInArrow(hold_slots, "id long").collect()
        except Exception:  # noqa: BLE001 (interrupted at the end of the test, on purpose)
            pass

    holder = threading.Thread(target=other_session, daemon=True)
    holder.start()
    try:
        wait_for(lambda: connect_server.running_jobs() == 1, "the other session holds the slots")
        worker = threading.Thread(target=chunk_task, daemon=True)
        worker.start()
        wait_for(lambda: connect_server.running_jobs() == 2, "the chunk's Spark job waits on the server")
        killed = time.monotonic()
        runner.on_kill()
        worker.join(30)
        assert not worker.is_alive(), "the chunk task still waits for its Spark job after on_kill"
        assert isinstance(outcome[0], Exception), outcome
        # the server cancels the job; its UI lists it as ended once its listener bus has caught up
        wait_for(lambda: connect_server.running_jobs() == 1, "the chunk's Spark job is cancelled on the server", 30)
        assert time.monotonic() - killed < 30  # only the other session's job is left
    finally:
        blocker.interruptAll()
        blocker.stop()
        for name in CONNECT_MODE_VARIABLES:  # this test's own session marked the process as a Connect client
            os.environ.pop(name, None)
    assert all(name not in os.environ for name in CONNECT_MODE_VARIABLES)


def connect_runner(server: SparkConnectServer, password: str, monkeypatch) -> SparkConnectJobRunner:
    """The runner an operator makes for the connection ``cdc_connect`` to ``server``."""
    monkeypatch.setenv("AIRFLOW_CONN_CDC_CONNECT", json.dumps(server.connection(password)))
    return SparkConnectJobRunner("cdc_connect", conf={}, server_credentials_file=str(server.credentials_file),
                                 log=SimpleNamespace(info=lambda *a: None))


def wait_for(predicate, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f}s"
        time.sleep(0.2)
