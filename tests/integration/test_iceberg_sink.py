"""``sink_format="iceberg"``: the same pipeline into Apache Iceberg tables (sinks/iceberg/sink.py). In the
embedded SQLite catalog of a lake on a local path, through a real DAG run and real streams, each
table equals its source row for row, read by pyiceberg and by DuckDB's Iceberg extension; a widening
Iceberg allows evolves the column in place, a TRUNCATE and a new column are followed, every change
reaches the changelog table, and a stream whose checkpoint was lost applies nothing twice. On an S3
server (moto) with a SQL catalog on a real PostgreSQL, both reached only through Airflow
connections, the same holds (read by pyiceberg and by DuckDB over S3) and neither secret leaks; and
so it does in a real REST catalog (SeaweedFS's) that places its tables itself in the S3 table bucket
it serves."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.arrow_rows import arrow_to_rows
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.iceberg.catalog import TABLE_LOCATION_PROPERTY
from airflow_provider_mysqlcdc.sinks.iceberg.sink import IcebergSink
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials
from airflow_provider_mysqlcdc.state.drift import read_drift
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.dag_runner import catch_up_stream, example_dag_env, run_dag
from devtools.postgres_server import ThrowawayPostgres
from devtools.s3_server import S3Server
from devtools.seaweedfs_server import SeaweedIceberg
from devtools.verify import differences, duckdb_with, sink_commits, sink_rows, source_rows

from .helpers import SecretWatch, files_holding, run_stream

pytestmark = pytest.mark.integration


def duckdb_rows(sink: IcebergSink, schema: TableSchema, s3: dict[str, str] | None = None) -> dict:
    """The table's rows by key as DuckDB reads them: its Iceberg and Avro extensions (and for a table
    on S3 its httpfs extension, given ``s3``: the server's ``endpoint`` URL, ``key_id``, ``secret`` and
    ``region``), loaded from their PyPI wheels (no download), scan the table's current metadata file."""
    con = duckdb_with("avro", "iceberg", *(["httpfs"] if s3 else []))
    try:
        if s3:
            con.execute("CREATE SECRET lake (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, URL_STYLE 'path', "
                        "USE_SSL false)", [s3["key_id"], s3["secret"], s3["region"],
                                           s3["endpoint"].removeprefix("http://")])
        metadata = sink.open_table(schema.table_id).metadata_location
        table = con.execute(f"SELECT * FROM iceberg_scan('{metadata}')").to_arrow_table()
    finally:
        con.close()
    rows = arrow_to_rows(table, schema)
    by_key = {schema.key_of(r): r for r in rows}
    assert len(by_key) == len(rows), "a key twice"
    return by_key


def both_readers_differ(cdc_user, lake: Path, table_id: TableId) -> tuple[str | None, str | None]:
    """How pyiceberg's and DuckDB's reads of the table differ from the source (None: equal)."""
    conn = cdc_user.connect()
    try:
        schema = load_table_schema(conn, table_id)
    finally:
        conn.close()
    expected = source_rows(cdc_user, schema)
    sink = open_sink(SinkSpec(str(lake), "iceberg"))
    assert isinstance(sink, IcebergSink)
    return (differences(expected, sink_rows(lake, schema, sink_format="iceberg")),
            differences(expected, duckdb_rows(sink, schema)))


def test_a_dag_run_and_streams_keep_an_iceberg_table_equal_to_its_source(mysql_server, cdc_user, database, tmp_path):
    orders = TableId(database, "iceberg_orders")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {orders.quoted} (id INT PRIMARY KEY, v VARCHAR(20) NOT NULL, amount DECIMAL(10,2), "
                    "at DATETIME(6), n INT, raw VARBINARY(8))")
        cur.executemany(f"INSERT INTO {orders.quoted} VALUES (%s, %s, %s, %s, %s, %s)",
                        [(i, f"v-{i}", i * 1.25, f"2024-01-{1 + i % 28:02d} 10:00:00.{i:06d}", i, bytes([i, 255]))
                         for i in range(60)])
    conn.commit()
    lake, state_dir = tmp_path / "lake", tmp_path / "state"
    env = example_dag_env(tmp_path / "airflow", cdc_user, [orders], sink_root=lake, state_dir=state_dir,
                          split_rows=20, chunk_rows=30)  # two chunk tasks writing one table
    env["MYSQLCDC_SINK_FORMAT"] = "iceberg"
    run = run_dag("mysqlcdc_example", env, conf={"stream_mode": "skip"})
    assert run["state"] == "success", run["output"][-3000:]
    assert both_readers_differ(cdc_user, lake, orders) == (None, None)
    assert not list(lake.rglob("_delta_log"))  # Iceberg only

    with conn.cursor() as cur:
        cur.execute(f"UPDATE {orders.quoted} SET v = CONCAT(v, '-changed'), amount = amount + 1 WHERE id < 15")
        cur.execute(f"DELETE FROM {orders.quoted} WHERE id BETWEEN 40 AND 44")
        cur.execute(f"ALTER TABLE {orders.quoted} MODIFY n BIGINT")  # Iceberg widens int to long in place
        cur.execute(f"INSERT INTO {orders.quoted} VALUES (100, 'new', 1, NULL, {2 ** 40}, NULL)")
        cur.execute(f"ALTER TABLE {orders.quoted} ADD COLUMN extra VARCHAR(10)")
        cur.execute(f"UPDATE {orders.quoted} SET extra = 'x' WHERE id % 7 = 0")
    conn.commit()
    state = PipelineState(str(state_dir / "mysqlcdc_example"))
    job = StreamJob(state=state.location, sink=SinkSpec(str(lake), "iceberg"), changelog=True,
                    stream_engine="structured-streaming")  # its Spark checkpoint is lost below
    run_stream(cdc_user, tmp_path / "stream", job)
    assert both_readers_differ(cdc_user, lake, orders) == (None, None)
    assert read_drift(state).get(orders, []) == []  # the widening was followed, not re-snapshotted
    sink = open_sink(SinkSpec(str(lake), "iceberg"))
    assert isinstance(sink, IcebergSink)
    assert sink.read(orders).schema.field("n").type == pa.int64()
    log = sink.read(TableId(database, "iceberg_orders__changelog")).to_pylist()
    extras = len([i for i in range(60) if i % 7 == 0 and not 40 <= i <= 44])  # the rows given an extra
    assert {r["op"] for r in log} == {"u", "d", "c"} and len(log) == 15 + 5 + 1 + extras

    with conn.cursor() as cur:  # a TRUNCATE, and rows after it
        cur.execute(f"TRUNCATE TABLE {orders.quoted}")
        cur.executemany(f"INSERT INTO {orders.quoted} (id, v) VALUES (%s, %s)", [(i, f"again-{i}") for i in (1, 2, 3)])
    conn.commit()
    run_stream(cdc_user, tmp_path / "stream", job)
    assert both_readers_differ(cdc_user, lake, orders) == (None, None)

    # the checkpoint is lost: a new one reads the binlog again, and the table's recorded positions
    # keep every change it holds from being applied twice
    merges = sink_commits(sink, orders, "merge")
    shutil.rmtree(Path(job.state) / "checkpoint")
    run_stream(cdc_user, tmp_path / "stream-again", job)
    assert both_readers_differ(cdc_user, lake, orders) == (None, None)
    assert sink_commits(sink, orders, "merge") == merges


ACCESS_KEY, SECRET_KEY = "AKIAICEBERGTEST", "s3-secret-iceberg-5e2a9c"


def table_rows(sink: IcebergSink, schema: TableSchema) -> dict:
    rows = arrow_to_rows(sink.read(schema.table_id), schema)
    by_key = {schema.key_of(r): r for r in rows}
    assert len(by_key) == len(rows), "a key twice"
    return by_key


def _orders(mysql_server, orders: TableId):
    """A small table of orders, created and filled; a connection to the server."""
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {orders.quoted} (id INT PRIMARY KEY, v VARCHAR(20), amount DECIMAL(8,2))")
        cur.executemany(f"INSERT INTO {orders.quoted} VALUES (%s, %s, %s)", [(i, f"v{i}", i / 4) for i in range(90)])
    conn.commit()
    return conn


def _change(conn, orders: TableId) -> None:
    """Updates, deletes and an insert after the DAG run, for the catch-up stream."""
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {orders.quoted} SET v = 'changed' WHERE id < 20")
        cur.execute(f"DELETE FROM {orders.quoted} WHERE id >= 80")
        cur.execute(f"INSERT INTO {orders.quoted} VALUES (500, 'new', 1.5)")
    conn.commit()


def test_an_iceberg_lake_on_s3_with_a_postgresql_catalog_is_reached_only_through_connections(
        mysql_server, cdc_user, database, tmp_path, monkeypatch):
    for name in [n for n in os.environ if n.startswith("AWS_")]:  # nothing opens the server but the connection
        monkeypatch.delenv(name)
    orders = TableId(database, "s3_orders")
    conn = _orders(mysql_server, orders)
    with S3Server(tmp_path / "moto.log") as s3, ThrowawayPostgres() as catalog_db:
        # a bucket of its own: a stream's checkpoint for a state on an object store is a local folder
        # named after the state's URL, which another run of this test must not find
        bucket = f"iceberg-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(bucket)
        catalog = {"type": "sql", "uri": catalog_db.create_database("lake_catalog")}
        lake, state_dir = f"s3://{bucket}/lake", f"s3://{bucket}/state"
        env = {n: v for n, v in example_dag_env(tmp_path / "airflow", cdc_user, [orders], sink_root=lake,
                                                  state_dir=state_dir, split_rows=30, chunk_rows=50).items()
               if not n.startswith("AWS_")}
        (tmp_path / "tmp").mkdir()
        env.update(TMPDIR=str(tmp_path / "tmp"), MYSQLCDC_SINK_FORMAT="iceberg", MYSQLCDC_AWS_CONN_ID="cdc_lake",
                   AIRFLOW_CONN_CDC_LAKE=json.dumps(s3.connection(ACCESS_KEY, SECRET_KEY)),
                   MYSQLCDC_ICEBERG_CATALOG_CONN_ID="lake_catalog",
                   AIRFLOW_CONN_LAKE_CATALOG=json.dumps({"conn_type": "iceberg_catalog", "extra": catalog}))
        watches = [SecretWatch(SECRET_KEY).start(), SecretWatch(catalog_db.password).start()]
        try:
            run = run_dag("mysqlcdc_example", env)  # the chunks, then an available-now stream
            _change(conn, orders)
            credentials = ObjectStoreCredentials.from_aws_connection(
                conn_id="cdc_lake", login=ACCESS_KEY, password=SECRET_KEY,
                extra=s3.connection(ACCESS_KEY, SECRET_KEY)["extra"]).with_catalog(catalog)
            catch_up_stream(cdc_user, f"{state_dir}/mysqlcdc_example", lake, tmp_path / "catch-up",
                            object_store=credentials, sink_format="iceberg")
        finally:
            leaked = [found for watch in watches for found in watch.stop()]
        assert run["state"] == "success", run["output"][-5000:]
        schema = load_table_schema(mysql_server.connect(), orders)
        s3_access = {"s3.endpoint": s3.endpoint_url, "s3.access-key-id": ACCESS_KEY,
                     "s3.secret-access-key": SECRET_KEY, "s3.region": s3.region}
        sink = IcebergSink(lake, catalog_properties={**catalog, **s3_access})
        expected = source_rows(mysql_server.admin, schema)
        assert differences(expected, table_rows(sink, schema)) is None
        duckdb_s3 = {"endpoint": s3.endpoint_url, "key_id": ACCESS_KEY, "secret": SECRET_KEY, "region": s3.region}
        assert differences(expected, duckdb_rows(sink, schema, duckdb_s3)) is None
        table = sink.catalog.load_table((database, "s3_orders"))  # named in the PostgreSQL catalog
        assert table.location() == f"{lake}/{database}/s3_orders"
        assert all(path.startswith(f"{lake}/{database}/s3_orders/data/")
                   for path in table.inspect.data_files().column("file_path").to_pylist())
    for secret in (SECRET_KEY, catalog_db.password):
        assert secret not in run["output"] and secret not in json.dumps(run["xcoms"])
        assert not files_holding(secret, tmp_path)
    assert not leaked, leaked


def test_an_iceberg_lake_in_a_rest_catalog_that_places_its_tables_is_exact_and_keeps_its_secret(
        mysql_server, cdc_user, database, tmp_path, monkeypatch):
    """A real Iceberg REST catalog (SeaweedFS's, from PyPI) that decides where its tables live, in an S3
    table bucket it serves itself: the DAG's chunks and a stream land there, equal to the source, and
    the one secret (the catalog's OAuth2 client credential is the S3 secret key) leaks nowhere."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    orders = TableId(database, "rest_orders")
    conn = _orders(mysql_server, orders)
    secret = f"rest-secret-{uuid.uuid4().hex[:12]}"
    with SeaweedIceberg(tmp_path / "seaweedfs", access_key="mysqlcdc-lake", secret_key=secret) as server:
        catalog = {**server.catalog_properties(), TABLE_LOCATION_PROPERTY: "catalog"}
        # the lake's root only names the lake: the tables are where the catalog places them, outside it
        lake, state_dir = f"s3://{server.table_bucket}/lake", tmp_path / "state"
        lineage_file = tmp_path / "openlineage.jsonl"
        env = {n: v for n, v in example_dag_env(tmp_path / "airflow", cdc_user, [orders], sink_root=lake,
                                                  state_dir=state_dir, split_rows=30, chunk_rows=50).items()
               if not n.startswith("AWS_")}
        env.update(MYSQLCDC_SINK_FORMAT="iceberg", MYSQLCDC_AWS_CONN_ID="cdc_lake",
                   AIRFLOW_CONN_CDC_LAKE=json.dumps(server.aws_connection()),
                   MYSQLCDC_ICEBERG_CATALOG_CONN_ID="lake_catalog",
                   AIRFLOW_CONN_LAKE_CATALOG=json.dumps({"conn_type": "iceberg_catalog", "extra": catalog}),
                   AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps({"type": "file", "log_file_path": str(lineage_file),
                                                               "append": True}))
        watch = SecretWatch(secret).start()
        try:
            run = run_dag("mysqlcdc_example", env)  # the chunks, then an available-now stream
            _change(conn, orders)
            aws = server.aws_connection()
            credentials = ObjectStoreCredentials.from_aws_connection(
                conn_id="cdc_lake", login=aws["login"], password=aws["password"],
                extra=aws["extra"]).with_catalog(catalog)
            catch_up_stream(cdc_user, str(state_dir / "mysqlcdc_example"), lake, tmp_path / "catch-up",
                            object_store=credentials, sink_format="iceberg")
        finally:
            leaked = watch.stop()
        assert run["state"] == "success", run["output"][-5000:]
        schema = load_table_schema(mysql_server.connect(), orders)
        s3_access = {"s3.endpoint": server.s3_endpoint, "s3.access-key-id": server.access_key,
                     "s3.secret-access-key": secret, "s3.region": server.region}
        sink = IcebergSink(lake, catalog_properties={**catalog, **s3_access})
        expected = source_rows(mysql_server.admin, schema)
        assert differences(expected, table_rows(sink, schema)) is None
        duckdb_s3 = {"endpoint": server.s3_endpoint, "key_id": server.access_key, "secret": secret,
                     "region": server.region}
        assert differences(expected, duckdb_rows(sink, schema, duckdb_s3)) is None
        table = sink.catalog.load_table((database, "rest_orders"))  # named in the REST catalog
        assert table.location() == f"s3://{server.table_bucket}/{database}/rest_orders"  # where it placed it
        assert all(path.startswith(f"{table.location()}/data/")
                   for path in table.inspect.data_files().column("file_path").to_pylist())
    # OpenLineage names the table by where the catalog placed it, once a task made it
    events = [json.loads(line) for line in lineage_file.read_text().splitlines() if line.strip()]
    completed = [o for e in events if e["eventType"] == "COMPLETE" for o in e["outputs"]]
    assert completed and {(o["namespace"], o["name"]) for o in completed} == {
        (f"s3://{server.table_bucket}", f"{database}/rest_orders")}
    assert secret not in run["output"] and secret not in json.dumps(run["xcoms"])
    assert [f for f in files_holding(secret, tmp_path) if "seaweedfs" not in Path(f).relative_to(tmp_path).parts] == []
    assert not leaked, leaked
