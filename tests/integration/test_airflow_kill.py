"""Killing a task under a real scheduler (``airflow standalone``) stops its Spark application:
marking a stream or chunk task failed, clearing a stream task, and its ``execution_timeout``. A
chunk task on the worker's shared local server (the default) is a session there: its lease goes
with it, and the server stays up.

The example DAG runs with a continuous stream; once the stream's driver is up, the stream task is
marked failed through the REST API (what the UI's button does). Airflow's supervisor then
terminates the task, the operator's ``on_kill`` stops spark-submit and the driver, and within
seconds no process of the run is left: in local mode (driver in the task's process tree) and in
cluster deploy mode on a standalone cluster (driver launched by the cluster's worker, killed
through the master's REST server), for a deferred stream (driver detached from the task, the
task waiting in the triggerer: the trigger's ``on_kill`` asks the stream to stop through its report
folder, and it releases the pipeline's lease), and for a stream on a Spark Connect server (its
detached client process is asked to stop the same way, ending its query and session there). Every file of the run (package zip, credentials, report
folders) lives under the test's folder (TMPDIR), so "a process of ours" is a spark-submit, a
cluster-launched driver or a Python driver whose command line names that folder, or any
executor of a standalone cluster (only this test's cluster runs one).
"""

from __future__ import annotations

import json
import os
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.launch.local_server import LOCAL_SPARK_DIR_VARIABLE, live_leases, read_record
from airflow_provider_mysqlcdc.pipeline import group_id_for
from airflow_provider_mysqlcdc.state.lease import StreamLeases
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.airflow_standalone import AirflowStandalone
from devtools.dag_runner import example_dag_env
from devtools.spark_connect_server import SparkConnectServer
from devtools.spark_standalone import StandaloneCluster
from devtools.workload import SAMPLE_TABLES, create_sample_tables

from .helpers import spark_processes_of, stream_drivers

pytestmark = pytest.mark.integration

DAG_ID = "mysqlcdc_example"
#: a continuous stream from the binlog's head: no snapshot chunk to wait for (what is killed is the stream)
STREAM_ONLY = {"stream_mode": "continuous", "startup_mode": "latest"}


@pytest.mark.usefixtures("reap_spark")
@pytest.mark.parametrize("deploy", ["local", "standalone-cluster", "deferred", "spark-connect"])
def test_marking_a_running_stream_task_failed_stops_its_spark_application(mysql_server, cdc_user, database,
                                                                          tmp_path, tmp_path_factory, deploy):
    [table] = create_sample_tables(mysql_server.connect(), database, rows_per_table=300, seed=3,
                                   tables=SAMPLE_TABLES[:1])
    env = example_dag_env(tmp_path / "airflow", cdc_user, [table], sink_root=tmp_path / "lake",
                          state_dir=tmp_path / "state", split_rows=1000, chunk_rows=1000)
    (tmp_path / "tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "tmp")
    with ExitStack() as stack:
        if deploy == "standalone-cluster":
            cluster = stack.enter_context(StandaloneCluster(tmp_path / "cluster"))
            env.update(SPARK_LOCAL_IP="127.0.0.1", MYSQLCDC_SPARK_CONN_ID="cdc_cluster",
                       AIRFLOW_CONN_CDC_CLUSTER=json.dumps({
                           "conn_type": "spark", "host": cluster.master_url,
                           "extra": {"deploy-mode": "cluster", "rest-port": cluster.rest_port}}))
        if deploy == "deferred":
            env["MYSQLCDC_STREAM_DEFERRABLE"] = "true"
        if deploy == "spark-connect":  # the stream's client is a Python process of ours; its query runs on the server
            server = stack.enter_context(SparkConnectServer(tmp_path_factory.mktemp("connect-server")))
            env.update(MYSQLCDC_SPARK_CONN_ID="cdc_connect", AIRFLOW_CONN_CDC_CONNECT=json.dumps(server.connection(cdc_user.password)))
        airflow = stack.enter_context(AirflowStandalone(env))
        airflow.wait_for_dag(DAG_ID)
        run_id = airflow.trigger(DAG_ID, STREAM_ONLY)
        airflow.wait_until(lambda: airflow.xcom(DAG_ID, run_id, "stream", "spark_ui_url"), 600,
                           "the continuous stream's driver is up")
        assert spark_processes_of(tmp_path), "the running stream's processes are not where the test looks"
        if deploy == "spark-connect":  # its client only: no spark-submit, no JVM of the task's
            assert not [p for p in spark_processes_of(tmp_path) if "SparkSubmit" in p], spark_processes_of(tmp_path)
        running = "deferred" if deploy == "deferred" else "running"
        airflow.wait_until(lambda: airflow.task_state(DAG_ID, run_id, "stream") == running, 120,
                           f"the stream task is {running}")
        if deploy == "deferred":  # a triggerer runs the trigger (marked failed before, nothing could stop it)
            airflow.wait_until(lambda: ((airflow.task_instance(DAG_ID, run_id, "stream") or {}).get("trigger") or {})
                               .get("triggerer_id"), 120, "a triggerer runs the stream's trigger")
        leases = StreamLeases(PipelineState(str(tmp_path / "state" / DAG_ID)))  # taken after the driver is up
        airflow.wait_until(lambda: leases.current() and leases.current().live, 120, "the stream holds the lease")

        airflow.mark(DAG_ID, run_id, "stream", "failed")
        marked = time.monotonic()
        deadline = marked + 60
        while spark_processes_of(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = spark_processes_of(tmp_path)
        stopped_after_s = time.monotonic() - marked
    assert not left, f"still running {stopped_after_s:.0f}s after the task was marked failed:\n" + "\n".join(left)
    if deploy in ("deferred", "spark-connect"):  # it stopped cleanly, on request: the next stream may start at once
        assert StreamLeases(PipelineState(str(tmp_path / "state" / DAG_ID))).current().released
    print(f"{deploy}: the stream's Spark application stopped {stopped_after_s:.1f}s after the task was marked failed")


#: a DAG of the test's own: the pipeline with a continuous stream that times out
TIMEOUT_DAG = """
import datetime as dt
import os

from airflow.sdk import DAG

from airflow_provider_mysqlcdc.pipeline import mysqlcdc_params, mysqlcdc_pipeline

with DAG(dag_id="cdc_timeout", schedule=None, catchup=False, max_active_runs=1,
         params=mysqlcdc_params(sink_root=os.environ["MYSQLCDC_SINK_ROOT"], stream_mode="continuous")):
    tasks = mysqlcdc_pipeline(tables=os.environ["MYSQLCDC_EXAMPLE_TABLES"].split(","),
                              sink_root=os.environ["MYSQLCDC_SINK_ROOT"], state_dir=os.environ["MYSQLCDC_STATE_DIR"],
                              stream_mode="continuous")
    tasks["stream"].execution_timeout = dt.timedelta(seconds=float(os.environ["STREAM_TIMEOUT_S"]))
"""


@pytest.mark.usefixtures("reap_spark")
def test_a_stream_task_past_its_execution_timeout_stops_its_spark_application(mysql_server, cdc_user, database,
                                                                              tmp_path):
    [table] = create_sample_tables(mysql_server.connect(), database, rows_per_table=300, seed=5,
                                   tables=SAMPLE_TABLES[:1])
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "cdc_timeout.py").write_text(TIMEOUT_DAG)
    env = example_dag_env(tmp_path / "airflow", cdc_user, [table], sink_root=tmp_path / "lake",
                          state_dir=tmp_path / "state", split_rows=1000, chunk_rows=1000, dags_folder=dags)
    (tmp_path / "tmp").mkdir()
    # the stream must be up (spark-submit, its session, the lease) well within the timeout on a busy machine
    env.update(TMPDIR=str(tmp_path / "tmp"), STREAM_TIMEOUT_S="60")
    leases = StreamLeases(PipelineState(str(tmp_path / "state" / "cdc_timeout")))
    with AirflowStandalone(env) as airflow:
        airflow.wait_for_dag("cdc_timeout")
        run_id = airflow.trigger("cdc_timeout", {"startup_mode": "latest"})
        airflow.wait_until(lambda: leases.current() and leases.current().live, 600, "the stream runs")
        assert spark_processes_of(tmp_path) and airflow.task_state("cdc_timeout", run_id, "stream") == "running"
        airflow.wait_until(lambda: airflow.task_state("cdc_timeout", run_id, "stream") == "failed", 120,
                           "the stream task failed at its execution timeout")
        failed = time.monotonic()
        deadline = failed + 60
        while spark_processes_of(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = spark_processes_of(tmp_path)
        assert "AirflowTaskTimeout" in airflow.task_log("cdc_timeout", run_id, "stream", 1)
    assert not left, f"still running {time.monotonic() - failed:.0f}s after the timeout:\n" + "\n".join(left)
    assert not leases.current().live


@pytest.mark.usefixtures("reap_spark")
@pytest.mark.parametrize("local_spark", ["shared", "submit"])
def test_marking_a_running_chunk_task_failed_stops_its_spark_work(mysql_server, cdc_user, database, tmp_path,
                                                                  local_spark):
    """``shared`` (the default): the chunk task's session on the worker's shared local server ends with
    the task (its lease goes) and the server stays up for the worker's other tasks; ``submit``: the
    task's spark-submit and driver end."""
    conn = mysql_server.connect()
    [table] = create_sample_tables(conn, database, rows_per_table=300, seed=6, tables=SAMPLE_TABLES[:1])
    env = example_dag_env(tmp_path / "airflow", cdc_user, [table], sink_root=tmp_path / "lake",
                          state_dir=tmp_path / "state", split_rows=1000, chunk_rows=1000)
    (tmp_path / "tmp").mkdir()
    env.update(TMPDIR=str(tmp_path / "tmp"), AIRFLOW__MYSQLCDC__LOCAL_SPARK=local_spark)
    group = group_id_for(table.quoted)
    server = None
    with AirflowStandalone(env) as airflow:
        airflow.wait_for_dag(DAG_ID)
        run_id = airflow.trigger(DAG_ID, {"stream_mode": "skip"})
        airflow.wait_until(lambda: airflow.task_state(DAG_ID, run_id, f"{group}.plan") == "success", 300,
                           "the table is planned")
        # the chunk job's reads wait behind this lock: it is surely still running when marked failed
        with conn.cursor() as cur:
            cur.execute(f"LOCK TABLES {table.quoted} WRITE")
        try:
            ui_url = airflow.wait_until(lambda: airflow.xcom(DAG_ID, run_id, f"{group}.snapshot", "spark_ui_url",
                                                             map_index=0), 300, "the chunk job's driver is up")
            if local_spark == "shared":
                server = shared_server_of(ui_url)
                assert live_leases(server / "leases") == 1, "the chunk task holds no lease on the shared server"
            else:
                assert spark_processes_of(tmp_path), "the chunk job's processes are not where the test looks"
            airflow.mark(DAG_ID, run_id, f"{group}.snapshot", "failed", map_index=0)
            marked = time.monotonic()

            def running() -> list[str]:
                leases = live_leases(server / "leases") if server else 0
                return spark_processes_of(tmp_path) + [f"{leases} lease(s) on the shared server"] * bool(leases)

            while running() and time.monotonic() < marked + 60:
                time.sleep(0.5)
            left = running()
        finally:
            with conn.cursor() as cur:
                cur.execute("UNLOCK TABLES")
        assert airflow.xcom(DAG_ID, run_id, f"{group}.snapshot", "return_value", map_index=0) is None
    assert not left, f"still running {time.monotonic() - marked:.0f}s after the task was marked failed:\n" + \
        "\n".join(left)
    assert PipelineState(str(tmp_path / "state" / DAG_ID)).latest_number() == 0
    if server:
        assert read_record(server) is not None, "the shared server stopped with one task of the worker"


def shared_server_of(ui_url: str) -> Path:
    """The folder of the shared local server (this session's, tests/conftest.py) whose Spark UI is at ``ui_url``."""
    for folder in Path(os.environ[LOCAL_SPARK_DIR_VARIABLE]).iterdir():
        record = read_record(folder)
        if record is not None and ui_url.rstrip("/").endswith(f":{record.ui_port}"):
            return folder
    raise AssertionError(f"no shared local server has its Spark UI at {ui_url}")


@pytest.mark.usefixtures("reap_spark")
def test_clearing_a_running_stream_task_stops_its_stream_and_the_new_try_streams_alone(mysql_server, cdc_user,
                                                                                       database, tmp_path):
    [table] = create_sample_tables(mysql_server.connect(), database, rows_per_table=300, seed=7,
                                   tables=SAMPLE_TABLES[:1])
    env = example_dag_env(tmp_path / "airflow", cdc_user, [table], sink_root=tmp_path / "lake",
                          state_dir=tmp_path / "state", split_rows=1000, chunk_rows=1000)
    (tmp_path / "tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "tmp")
    leases = StreamLeases(PipelineState(str(tmp_path / "state" / DAG_ID)))
    with AirflowStandalone(env) as airflow:
        airflow.wait_for_dag(DAG_ID)
        run_id = airflow.trigger(DAG_ID, STREAM_ONLY)
        airflow.wait_until(lambda: leases.current() and leases.current().live, 600, "the stream runs")
        first = leases.current()
        [first_driver] = stream_drivers(tmp_path)

        airflow.clear(DAG_ID, run_id, "stream")
        airflow.wait_until(lambda: leases.current().lease.number == 2 and leases.current().live, 180,
                           "the cleared task's new try streams")
        assert not leases.load(first.lease.number).live, "the first stream still holds its lease"
        assert (airflow.task_instance(DAG_ID, run_id, "stream") or {}).get("try_number") == 2
        assert first_driver not in stream_drivers(tmp_path) and len(stream_drivers(tmp_path)) == 1
        airflow.mark(DAG_ID, run_id, "stream", "failed")
