"""A lake and a state location on an object store: an S3-compatible server (moto in server mode)
that the test starts on loopback, with credentials only in an Airflow ``aws`` connection.

Nothing in this test's environment opens the server: no ``AWS_*`` variable, no endpoint. The DAG
gets it all from the connection ``aws_conn_id`` names, so a path that ignored it could not reach
the bucket. The secret key must then appear nowhere: not in a process's arguments or a Spark
process's environment while the run goes, not in the task logs or XComs, not in a file the run
left on disk, not in an object it wrote to the bucket.
"""

from __future__ import annotations

import json
import os
import threading

import fsspec
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_mysqlcdc.cdc.errors import StreamAlreadyRunning
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.preflight import run_preflight
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials
from airflow_provider_mysqlcdc.state.lease import StreamLeases
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.airflow_standalone import AirflowStandalone
from devtools.dag_runner import catch_up_stream, example_dag_env, run_dag
from devtools.s3_server import S3Server
from devtools.verify import read_delta, source_rows
from devtools.workload import SAMPLE_TABLES, RandomWriters, create_sample_tables

from .helpers import SecretWatch, assert_same_rows, delta_rows, files_holding

pytestmark = pytest.mark.integration

ACCESS_KEY = "AKIAMYSQLCDCTEST"
SECRET_KEY = "s3-secret-8d1f0c4e9b7a"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with S3Server(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server


@pytest.fixture
def bucket(s3, request):
    name = "lake-" + str(abs(hash(request.node.name)) % 10**8)
    s3.create_bucket(name)
    return name


@pytest.fixture
def credentials(s3):
    return ObjectStoreCredentials.from_aws_connection(conn_id="test", login=ACCESS_KEY, password=SECRET_KEY,
                                                      extra=s3.connection(ACCESS_KEY, SECRET_KEY)["extra"])


@pytest.fixture
def no_aws_environment(monkeypatch):
    """This process (and what it starts) has no way to the server but the connection."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)


@pytest.mark.usefixtures("no_aws_environment")
def test_a_dag_run_snapshots_and_streams_into_a_lake_on_s3_with_credentials_only_from_the_connection(
        mysql_server, cdc_user, database, tmp_path, s3, bucket, credentials):
    conn = mysql_server.connect()
    [table] = create_sample_tables(conn, database, rows_per_table=2000, seed=11, tables=SAMPLE_TABLES[2:3])
    schema = run_preflight(cdc_user, [table]).schemas[table]
    lake, state_dir = f"s3://{bucket}/lake", f"s3://{bucket}/state"
    env = example_dag_env(tmp_path / "airflow", cdc_user, [table], sink_root=lake, state_dir=state_dir,
                          split_rows=800, chunk_rows=1000)
    env = {name: value for name, value in env.items() if not name.startswith("AWS_")}
    (tmp_path / "tmp").mkdir()
    env.update(TMPDIR=str(tmp_path / "tmp"), MYSQLCDC_AWS_CONN_ID="cdc_lake",
               AIRFLOW_CONN_CDC_LAKE=json.dumps(s3.connection(ACCESS_KEY, SECRET_KEY)))

    watch = SecretWatch(SECRET_KEY).start()
    try:
        with RandomWriters(mysql_server.admin, database, writers=1, seed=111, pause_s=0.01,
                           tables=SAMPLE_TABLES[2:3]):
            result = run_dag("mysqlcdc_example", env)
    finally:
        leaked = watch.stop()
    assert result["state"] == "success", result["output"][-5000:]
    group = f"{table.database}__{table.table}"
    assert sum(1 for key in result["xcoms"] if key.startswith(f"{group}.snapshot[")) >= 4  # chunks: 2000 rows / 800 / 1000

    catch_up_stream(cdc_user, f"{state_dir}/mysqlcdc_example", lake, tmp_path / "catch-up", object_store=credentials)
    assert_same_rows(table, source_rows(mysql_server.admin, schema),
                     delta_rows(lake, schema, storage_options=credentials.variables))

    store = fsspec.filesystem("s3", **s3.storage_options(ACCESS_KEY, SECRET_KEY))
    state = f"{bucket}/state/mysqlcdc_example"
    assert store.ls(f"{state}/generations") and store.ls(f"{state}/lease")  # the registry and the lease are there
    assert not store.exists(f"{state}/checkpoint")  # Spark cannot write there: its checkpoint is the driver's
    assert not leaked, leaked
    assert SECRET_KEY not in result["output"] and SECRET_KEY not in json.dumps(result["xcoms"])
    assert not files_holding(SECRET_KEY, tmp_path)
    objects = store.find(bucket)
    assert objects and not [o for o in objects if SECRET_KEY.encode() in store.cat_file(o)]


@pytest.mark.usefixtures("no_aws_environment", "reap_spark")
def test_a_deferred_stream_on_s3_is_watched_and_stopped_by_a_trigger_with_the_connections_credentials(
        mysql_server, cdc_user, database, tmp_path, s3, bucket):
    """The triggerer shares its process with other pipelines' triggers, so the trigger reads the
    state location with its connection's credentials in its own options, never the environment."""
    [table] = create_sample_tables(mysql_server.connect(), database, rows_per_table=300, seed=12,
                                   tables=SAMPLE_TABLES[:1])
    state_dir = f"s3://{bucket}/state"
    env = example_dag_env(tmp_path / "airflow", cdc_user, [table], sink_root=f"s3://{bucket}/lake",
                          state_dir=state_dir, split_rows=1000, chunk_rows=1000)
    env = {name: value for name, value in env.items() if not name.startswith("AWS_")}
    (tmp_path / "tmp").mkdir()
    env.update(TMPDIR=str(tmp_path / "tmp"), MYSQLCDC_AWS_CONN_ID="cdc_lake", MYSQLCDC_STREAM_DEFERRABLE="true",
               AIRFLOW_CONN_CDC_LAKE=json.dumps(s3.connection(ACCESS_KEY, SECRET_KEY)))
    leases = StreamLeases(PipelineState(f"{state_dir}/mysqlcdc_example", s3.storage_options(ACCESS_KEY, SECRET_KEY)))
    with AirflowStandalone(env) as airflow:
        airflow.wait_for_dag("mysqlcdc_example")
        run_id = airflow.trigger("mysqlcdc_example", {"stream_mode": "continuous", "startup_mode": "latest"})
        airflow.wait_until(lambda: leases.current() and leases.current().live, 600, "the stream runs")
        airflow.wait_until(lambda: ((airflow.task_instance("mysqlcdc_example", run_id, "stream") or {})
                                    .get("trigger") or {}).get("triggerer_id"), 120, "a triggerer runs the trigger")
        # the trigger's first poll, which reads the lease on S3 with the connection's credentials
        airflow.wait_until(lambda: "stream running" in airflow.task_log("mysqlcdc_example", run_id, "stream", 1), 300,
                           "the trigger logs the running stream")
        airflow.mark("mysqlcdc_example", run_id, "stream", "failed")
        airflow.wait_until(lambda: leases.current().released, 120, "the stream stops and lets its lease go")
        log = airflow.task_log("mysqlcdc_example", run_id, "stream", 1)
    assert "stream running" in log and "NoCredentialsError" not in log  # the trigger read the lease on S3
    assert SECRET_KEY not in log


def at_once(work, count: int) -> None:
    """``work(0)`` ... ``work(count - 1)`` in threads of their own (each waits at a barrier), to the end."""
    threads = [threading.Thread(target=work, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_streams_racing_for_the_lease_on_an_object_store_leave_exactly_one_holder(s3, bucket, credentials):
    state = PipelineState(f"s3://{bucket}/state/race", s3.storage_options(ACCESS_KEY, SECRET_KEY))
    won, refused = [], []
    start = threading.Barrier(6)

    def race(number: int) -> None:
        start.wait()
        try:
            won.append(StreamLeases(state).acquire(f"stream {number}"))
        except StreamAlreadyRunning:
            refused.append(number)

    at_once(race, 6)
    assert len(won) == 1 and len(refused) == 5
    assert StreamLeases(state).current().lease.number == won[0].lease.number == 1


def test_collects_racing_on_a_registry_on_an_object_store_leave_one_winner_per_generation(s3, bucket, credentials):
    from ..unit.state.test_registry import race_collects

    options = s3.storage_options(ACCESS_KEY, SECRET_KEY)
    race_collects(lambda: PipelineState(f"s3://{bucket}/state/collect-race", options), collects=6)


def test_chunk_commits_racing_into_one_delta_table_on_an_object_store_all_land(s3, bucket, credentials):
    """Four chunks of one table commit their key ranges at the same moment: each commit is a
    put-if-absent of the next log entry (delta-rs on S3), the losers retry, none is lost."""
    sink = open_sink(SinkSpec(f"s3://{bucket}/lake"), credentials.variables)
    table_id = TableId("shop", "orders")
    empty = pa.table({"id": pa.array([], pa.int64()), "_cdc_chunk": pa.array([], pa.string())})
    write_deltalake(sink.table_uri(table_id), empty, storage_options=credentials.variables)
    start = threading.Barrier(4)
    failures: list[BaseException] = []

    def commit_chunk(number: int) -> None:
        rows = pa.table({"id": [number * 10, number * 10 + 1], "_cdc_chunk": [f"k{number}a", f"k{number}b"]})
        start.wait()
        try:
            sink.replace_range(table_id, f"k{number}", f"k{number + 1}", rows)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            failures.append(exc)

    at_once(commit_chunk, 4)
    assert not failures, failures
    table = DeltaTable(sink.table_uri(table_id), storage_options=credentials.variables)
    assert sorted(read_delta(sink.table_uri(table_id), storage_options=credentials.variables)["id"].to_pylist()) == [0, 1, 10, 11, 20, 21, 30, 31]
    assert table.version() == 4
