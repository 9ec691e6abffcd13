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
detached client process is asked to stop the same way, ending its query and session there).

The tests share one ``airflow standalone`` (starting one takes half a minute), one at a time: each
puts a DAG of its own into its DAGs folder (the example DAG's code with the test's settings and a
dag_id of its own: devtools/dag_runner.py ``example_dag_file``), creates the connections to the
services it starts through the REST API, and leaves nothing running when it ends
(``Site.one_test``). Every file of a run lives under the test's folder (state, report folders, its
cluster) or the standalone's TMPDIR (package zip, credentials), so "a process of ours" is a
spark-submit, a cluster-launched driver or a Python driver whose command line names one of them, or
any executor of a standalone cluster (only this test's cluster runs one). Only ``[mysqlcdc]
local_spark = submit`` gets an Airflow of its own: it is the worker's setting (Airflow's config, read
in the task: hooks/spark.py), which no DAG or operator argument overrides.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_mysqlcdc.launch.local_server import LOCAL_SPARK_DIR_VARIABLE, live_leases, read_record
from airflow_provider_mysqlcdc.pipeline import group_id_for
from airflow_provider_mysqlcdc.state.lease import StreamLeases
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.airflow_standalone import AirflowStandalone
from devtools.dag_runner import airflow_env, example_dag_file, example_dag_settings
from devtools.spark_connect_server import SparkConnectServer
from devtools.spark_standalone import StandaloneCluster
from devtools.workload import SAMPLE_TABLES, create_sample_tables

from .helpers import spark_processes_of, stream_drivers

pytestmark = pytest.mark.integration

#: a continuous stream from the binlog's head: no snapshot chunk to wait for (what is killed is the stream)
STREAM_ONLY = {"stream_mode": "continuous", "startup_mode": "latest"}


@dataclass
class Site:
    """An ``airflow standalone`` whose DAGs folder is ``dags`` and TMPDIR ``tmp`` (where its tasks put
    every file of their Spark programs: package zip, credentials, job files)."""

    airflow: AirflowStandalone
    dags: Path
    tmp: Path

    @contextmanager
    def one_test(self, test_dir: Path) -> Iterator["SiteTest"]:
        """Around one test (whose folder is ``test_dir``): nothing of an earlier test runs when it starts;
        when it ends, nothing of its own is left (``SiteTest.tidy``)."""
        test = SiteTest(self, test_dir)
        left = test.processes()
        assert not left, "processes of an earlier test still run:\n" + "\n".join(left)
        try:
            yield test
        finally:
            test.tidy()


@dataclass
class SiteTest:
    """One test's DAGs and connections on a ``Site``."""

    site: Site
    test_dir: Path
    dag_ids: list[str] = field(default_factory=list)
    conn_ids: list[str] = field(default_factory=list)

    @property
    def airflow(self) -> AirflowStandalone:
        return self.site.airflow

    def processes(self) -> list[str]:
        """The Spark processes of this test's runs: those naming the test's folder or the standalone's
        TMPDIR, and any executor of a standalone cluster (tests/integration/helpers.py)."""
        return spark_processes_of(self.test_dir, self.site.tmp)

    def stream_drivers(self) -> list[int]:
        return stream_drivers(self.test_dir, self.site.tmp)

    def add_dag(self, dag_id: str, source: str) -> None:
        """Put the DAG file of ``dag_id`` into the DAGs folder; returns once Airflow has parsed it."""
        self.dag_ids.append(dag_id)
        (self.site.dags / f"{dag_id}.py").write_text(source)
        self.airflow.wait_for_dag(dag_id)

    def add_example_dag(self, dag_id: str, tables: list[Any], **settings: str) -> None:
        """The example DAG as ``dag_id`` on ``tables``, its lake and state in the test's folder, with
        ``settings`` (``MYSQLCDC_SPARK_CONN_ID``, ...: example_dags/mysqlcdc_example.py)."""
        self.add_dag(dag_id, example_dag_file(dag_id, dict(example_dag_settings(
            tables, sink_root=self.test_dir / "lake", state_dir=self.test_dir / "state", split_rows=1000,
            chunk_rows=1000), **settings)))

    def add_connection(self, conn_id: str, connection: dict[str, Any]) -> None:
        self.conn_ids.append(conn_id)
        self.airflow.add_connection(conn_id, connection)

    def tidy(self) -> None:
        """Leave nothing of this test for the next: its unfinished DAG runs marked failed (their
        tasks are stopped), its task processes and Spark processes waited for (killed if still there
        after two minutes), its DAG files and connections removed."""
        try:
            for dag_id in self.dag_ids:
                self.airflow.fail_unfinished_runs(dag_id)
            task_ids = [ti["id"] for dag_id in self.dag_ids for run in self.airflow.dag_runs(dag_id)
                        for ti in self.airflow.task_instances(dag_id, run["dag_run_id"])]
            try:
                self.airflow.wait_until(lambda: not (self.processes() or task_processes(task_ids)), 120,
                                        "the test's tasks and Spark processes end")
            except TimeoutError:
                pass
        finally:
            for line in self.processes():
                try:
                    os.kill(int(line.split(":")[0]), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for dag_id in self.dag_ids:
                (self.site.dags / f"{dag_id}.py").unlink(missing_ok=True)
            for conn_id in self.conn_ids:
                self.airflow.delete_connection(conn_id)


def task_processes(task_instance_ids: list[str]) -> list[str]:
    """The pids of the processes that run the task instances: the executor's worker that supervises
    one (titled ``airflow worker -- LocalExecutor: <its id>`` meanwhile) and the task's own process."""
    ids = [ti.encode() for ti in task_instance_ids]
    found = []
    for proc in Path("/proc").iterdir():
        try:
            title = (proc / "cmdline").read_bytes() if proc.name.isdigit() else b""
        except OSError:
            continue
        if title.startswith(b"airflow worker -- ") and any(ti in title for ti in ids):
            found.append(proc.name)
    return found


@contextmanager
def standalone_site(root: Path, source: Any, **env: str) -> Iterator[Site]:
    """An ``airflow standalone`` in ``root`` with ``env``, reading ``source`` as ``mysqlcdc_default``."""
    dags, tmp = root / "dags", root / "tmp"
    dags.mkdir()
    tmp.mkdir()
    with AirflowStandalone(dict(airflow_env(root / "airflow", source, dags_folder=dags), TMPDIR=str(tmp),
                                **env)) as airflow:
        yield Site(airflow, dags, tmp)


@pytest.fixture(scope="module")
def shared_site(cdc_user, tmp_path_factory) -> Iterator[Site]:
    """The ``airflow standalone`` the file's tests share."""
    # SPARK_LOCAL_IP: a cluster-mode driver binds loopback (spark-submit hands SPARK_* variables on to
    # it); a local master's programs do anyway (launch/submit.py)
    with standalone_site(tmp_path_factory.mktemp("airflow-kill"), cdc_user, SPARK_LOCAL_IP="127.0.0.1",
                         AIRFLOW__MYSQLCDC__LOCAL_SPARK="shared") as site:
        yield site


@pytest.fixture()
def local_spark() -> str:
    """``[mysqlcdc] local_spark`` of the test's Airflow: ``shared`` (the default) unless a test says otherwise."""
    return "shared"


@pytest.fixture()
def site(request, local_spark, cdc_user, tmp_path) -> Iterator[SiteTest]:
    """The test's place on the shared ``airflow standalone``; with another ``local_spark``, on an
    ``airflow standalone`` of its own (a setting of the worker, not of a DAG)."""
    if local_spark == "shared":
        with request.getfixturevalue("shared_site").one_test(tmp_path) as test:
            yield test
    else:
        with standalone_site(tmp_path, cdc_user, AIRFLOW__MYSQLCDC__LOCAL_SPARK=local_spark) as own, \
                own.one_test(tmp_path) as test:
            yield test


@pytest.mark.parametrize("deploy", ["local", "standalone-cluster", "deferred", "spark-connect"])
def test_marking_a_running_stream_task_failed_stops_its_spark_application(mysql_server, database, cdc_user, tmp_path,
                                                                          tmp_path_factory, site, deploy):
    [table] = create_sample_tables(mysql_server.connect(), database, rows_per_table=300, seed=3,
                                   tables=SAMPLE_TABLES[:1])
    dag_id = f"kill_stream_{deploy.replace('-', '_')}"
    settings = {}
    airflow = site.airflow
    with ExitStack() as stack:
        if deploy == "standalone-cluster":
            cluster = stack.enter_context(StandaloneCluster(tmp_path / "cluster"))
            site.add_connection("cdc_cluster", {"conn_type": "spark", "host": cluster.master_url,
                                                "extra": {"deploy-mode": "cluster", "rest-port": cluster.rest_port}})
            settings["MYSQLCDC_SPARK_CONN_ID"] = "cdc_cluster"
        if deploy == "deferred":
            settings["MYSQLCDC_STREAM_DEFERRABLE"] = "true"
        if deploy == "spark-connect":  # the stream's client is a Python process of ours; its query runs on the server
            server = stack.enter_context(SparkConnectServer(tmp_path_factory.mktemp("connect-server")))
            site.add_connection("cdc_connect", server.connection(cdc_user.password))
            settings["MYSQLCDC_SPARK_CONN_ID"] = "cdc_connect"
        site.add_example_dag(dag_id, [table], **settings)
        run_id = airflow.trigger(dag_id, STREAM_ONLY)
        airflow.wait_until(lambda: airflow.xcom(dag_id, run_id, "stream", "spark_ui_url"), 600,
                           "the continuous stream's driver is up")
        assert site.processes(), "the running stream's processes are not where the test looks"
        if deploy == "spark-connect":  # its client only: no spark-submit, no JVM of the task's
            assert not [p for p in site.processes() if "SparkSubmit" in p], site.processes()
        running = "deferred" if deploy == "deferred" else "running"
        airflow.wait_until(lambda: airflow.task_state(dag_id, run_id, "stream") == running, 120,
                           f"the stream task is {running}")
        if deploy == "deferred":  # a triggerer runs the trigger (marked failed before, nothing could stop it)
            airflow.wait_until(lambda: ((airflow.task_instance(dag_id, run_id, "stream") or {}).get("trigger") or {})
                               .get("triggerer_id"), 120, "a triggerer runs the stream's trigger")
        leases = StreamLeases(PipelineState(str(tmp_path / "state" / dag_id)))  # taken after the driver is up
        airflow.wait_until(lambda: leases.current() and leases.current().live, 120, "the stream holds the lease")

        airflow.mark(dag_id, run_id, "stream", "failed")
        marked = time.monotonic()
        deadline = marked + 60
        while site.processes() and time.monotonic() < deadline:
            time.sleep(0.5)
        left = site.processes()
        stopped_after_s = time.monotonic() - marked
    assert not left, f"still running {stopped_after_s:.0f}s after the task was marked failed:\n" + "\n".join(left)
    if deploy in ("deferred", "spark-connect"):  # it stopped cleanly, on request: the next stream may start at once
        assert StreamLeases(PipelineState(str(tmp_path / "state" / dag_id))).current().released
    print(f"{deploy}: the stream's Spark application stopped {stopped_after_s:.1f}s after the task was marked failed")


#: a DAG of the test's own: the pipeline with a continuous stream that times out
TIMEOUT_DAG = """
import datetime as dt

from airflow.sdk import DAG

from airflow_provider_mysqlcdc.pipeline import mysqlcdc_params, mysqlcdc_pipeline

with DAG(dag_id="cdc_timeout", schedule=None, catchup=False, max_active_runs=1,
         params=mysqlcdc_params(sink_root={sink_root!r}, stream_mode="continuous")):
    tasks = mysqlcdc_pipeline(tables={tables!r}, sink_root={sink_root!r}, state_dir={state_dir!r},
                              stream_mode="continuous")
    tasks["stream"].execution_timeout = dt.timedelta(seconds={timeout_s!r})
"""


def test_a_stream_task_past_its_execution_timeout_stops_its_spark_application(mysql_server, database, tmp_path, site):
    [table] = create_sample_tables(mysql_server.connect(), database, rows_per_table=300, seed=5,
                                   tables=SAMPLE_TABLES[:1])
    # the stream must be up (spark-submit, its session, the lease) well within the timeout on a busy machine
    site.add_dag("cdc_timeout", TIMEOUT_DAG.format(tables=[table.quoted], sink_root=str(tmp_path / "lake"),
                                                   state_dir=str(tmp_path / "state"), timeout_s=60.0))
    leases = StreamLeases(PipelineState(str(tmp_path / "state" / "cdc_timeout")))
    airflow = site.airflow
    run_id = airflow.trigger("cdc_timeout", {"startup_mode": "latest"})
    airflow.wait_until(lambda: leases.current() and leases.current().live, 600, "the stream runs")
    assert site.processes() and airflow.task_state("cdc_timeout", run_id, "stream") == "running"
    airflow.wait_until(lambda: airflow.task_state("cdc_timeout", run_id, "stream") == "failed", 120,
                       "the stream task failed at its execution timeout")
    failed = time.monotonic()
    deadline = failed + 60
    while site.processes() and time.monotonic() < deadline:
        time.sleep(0.5)
    left = site.processes()
    assert "AirflowTaskTimeout" in airflow.task_log("cdc_timeout", run_id, "stream", 1)
    assert not left, f"still running {time.monotonic() - failed:.0f}s after the timeout:\n" + "\n".join(left)
    assert not leases.current().live


@pytest.mark.parametrize("local_spark", ["shared", "submit"])
def test_marking_a_running_chunk_task_failed_stops_its_spark_work(mysql_server, database, tmp_path, site,
                                                                  local_spark):
    """``shared`` (the default): the chunk task's session on the worker's shared local server ends with
    the task (its lease goes) and the server stays up for the worker's other tasks; ``submit``: the
    task's spark-submit and driver end."""
    conn = mysql_server.connect()
    [table] = create_sample_tables(conn, database, rows_per_table=300, seed=6, tables=SAMPLE_TABLES[:1])
    dag_id = f"kill_chunk_{local_spark}"
    site.add_example_dag(dag_id, [table])
    group = group_id_for(table.quoted)
    server = None
    airflow = site.airflow
    run_id = airflow.trigger(dag_id, {"stream_mode": "skip"})
    airflow.wait_until(lambda: airflow.task_state(dag_id, run_id, f"{group}.plan") == "success", 300,
                       "the table is planned")
    # the chunk job's reads wait behind this lock: it is surely still running when marked failed
    with conn.cursor() as cur:
        cur.execute(f"LOCK TABLES {table.quoted} WRITE")
    try:
        ui_url = airflow.wait_until(lambda: airflow.xcom(dag_id, run_id, f"{group}.snapshot", "spark_ui_url",
                                                         map_index=0), 300, "the chunk job's driver is up")
        if local_spark == "shared":
            server = shared_server_of(ui_url)
            assert live_leases(server / "leases") == 1, "the chunk task holds no lease on the shared server"
        else:
            assert site.processes(), "the chunk job's processes are not where the test looks"
        airflow.mark(dag_id, run_id, f"{group}.snapshot", "failed", map_index=0)
        marked = time.monotonic()

        def running() -> list[str]:
            leases = live_leases(server / "leases") if server else 0
            return site.processes() + [f"{leases} lease(s) on the shared server"] * bool(leases)

        while running() and time.monotonic() < marked + 60:
            time.sleep(0.5)
        left = running()
    finally:
        with conn.cursor() as cur:
            cur.execute("UNLOCK TABLES")
    assert airflow.xcom(dag_id, run_id, f"{group}.snapshot", "return_value", map_index=0) is None
    assert not left, f"still running {time.monotonic() - marked:.0f}s after the task was marked failed:\n" + \
        "\n".join(left)
    assert PipelineState(str(tmp_path / "state" / dag_id)).latest_number() == 0
    if server:
        assert read_record(server) is not None, "the shared server stopped with one task of the worker"


def shared_server_of(ui_url: str) -> Path:
    """The folder of the shared local server (this session's, tests/conftest.py) whose Spark UI is at ``ui_url``."""
    for folder in Path(os.environ[LOCAL_SPARK_DIR_VARIABLE]).iterdir():
        record = read_record(folder)
        if record is not None and ui_url.rstrip("/").endswith(f":{record.ui_port}"):
            return folder
    raise AssertionError(f"no shared local server has its Spark UI at {ui_url}")


def test_clearing_a_running_stream_task_stops_its_stream_and_the_new_try_streams_alone(mysql_server, database,
                                                                                       tmp_path, site):
    [table] = create_sample_tables(mysql_server.connect(), database, rows_per_table=300, seed=7,
                                   tables=SAMPLE_TABLES[:1])
    dag_id = "kill_clear"
    site.add_example_dag(dag_id, [table])
    leases = StreamLeases(PipelineState(str(tmp_path / "state" / dag_id)))
    airflow = site.airflow
    run_id = airflow.trigger(dag_id, STREAM_ONLY)
    airflow.wait_until(lambda: leases.current() and leases.current().live, 600, "the stream runs")
    first = leases.current()
    [first_driver] = site.stream_drivers()

    airflow.clear(dag_id, run_id, "stream")
    airflow.wait_until(lambda: leases.current().lease.number == 2 and leases.current().live, 180,
                       "the cleared task's new try streams")
    assert not leases.load(first.lease.number).live, "the first stream still holds its lease"
    assert (airflow.task_instance(dag_id, run_id, "stream") or {}).get("try_number") == 2
    assert first_driver not in site.stream_drivers() and len(site.stream_drivers()) == 1
    airflow.mark(dag_id, run_id, "stream", "failed")
