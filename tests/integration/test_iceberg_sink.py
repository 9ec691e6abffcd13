"""``sink_format="iceberg"``: the same pipeline into Apache Iceberg tables (sinks/iceberg.py), in the
embedded SQLite catalog of a lake on a local path. Through a real DAG run and real streams, each
table equals its source row for row, read by pyiceberg and by DuckDB's Iceberg extension; a widening
Iceberg allows evolves the column in place, a TRUNCATE and a new column are followed, every change
reaches the changelog table, and a stream whose checkpoint was lost applies nothing twice."""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_mysqlcdc.cdc.source.schema import TableId, TableSchema, load_table_schema
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.sinks.arrow_rows import arrow_to_rows
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.iceberg import OPERATION_SUMMARY, IcebergSink
from airflow_provider_mysqlcdc.state.drift import read_drift
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.dag_runner import example_dag_env, run_dag
from devtools.verify import differences, sink_rows, source_rows

from .helpers import run_stream

pytestmark = pytest.mark.integration


def duckdb_rows(sink: IcebergSink, schema: TableSchema) -> dict:
    """The table's rows by key as DuckDB reads them: its Iceberg and Avro extensions, loaded from
    their PyPI wheels (no download), scan the table's current metadata file."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    con = duckdb.connect()
    try:
        for extension in (duckdb_extension_avro, duckdb_extension_iceberg):
            con.execute(f"LOAD '{_extension_file(extension)}'")
        metadata = sink.open_table(schema.table_id).metadata_location
        table = con.execute(f"SELECT * FROM iceberg_scan('{metadata}')").to_arrow_table()
    finally:
        con.close()
    rows = arrow_to_rows(table, schema)
    by_key = {schema.key_of(r): r for r in rows}
    assert len(by_key) == len(rows), "a key twice"
    return by_key


def _extension_file(module) -> str:
    return glob.glob(os.path.join(os.path.dirname(module.__file__), "extensions", "*", "*.duckdb_extension"))[0]


def both_readers_differ(cdc_user, lake: Path, table_id: TableId) -> tuple[str | None, str | None]:
    """How pyiceberg's and DuckDB's reads of the table differ from the source (None: equal)."""
    conn = cdc_user.connect()
    try:
        schema = load_table_schema(conn, table_id)
    finally:
        conn.close()
    expected = source_rows(cdc_user, schema)
    sink = open_sink(str(lake), sink_format="iceberg")
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
    job = StreamJob(state=state.location, sink_root=str(lake), sink_format="iceberg", changelog=True)
    run_stream(cdc_user, tmp_path / "stream", job)
    assert both_readers_differ(cdc_user, lake, orders) == (None, None)
    assert read_drift(state).get(orders, []) == []  # the widening was followed, not re-snapshotted
    sink = open_sink(str(lake), sink_format="iceberg")
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
    merges = _merges(sink, orders)
    shutil.rmtree(Path(job.state) / "checkpoint")
    run_stream(cdc_user, tmp_path / "stream-again", job)
    assert both_readers_differ(cdc_user, lake, orders) == (None, None)
    assert _merges(sink, orders) == merges


def _merges(sink: IcebergSink, table_id: TableId) -> int:
    table = sink.open_table(table_id)
    return sum(1 for s in table.snapshots() if s.summary.additional_properties.get(OPERATION_SUMMARY) == "merge")
