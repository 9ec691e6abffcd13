"""One bad table never stalls the others.

A change that one table's data or schema makes impossible to apply (here a row the sink's table
refuses; a value the executors cannot type or decode: tests/unit/cdc/test_table_faults.py) freezes
that table at that change, with the
error as its drift reason (``bin/status``, the UI page and the drift metric read it), and every
other table streams on; the batch does not fail. An error that is not one table's (here the sink's
sink's storage failing under one table) still fails the stream, and removing that table from the
pipeline lets the replayed batch through at once.

One module history for the freezing cases, one stream run (in units of two changes, so that a
table's earlier changes commit before the one that fails); another for the removal (two runs).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.errors import SparkJobFailed
from airflow_provider_mysqlcdc.cdc.model.records import TableEventKind
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.drift import read_drift
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.status import pipeline_status
from devtools.snapshot import snapshot_tables
from devtools.verify import source_rows

from .helpers import assert_same_rows, delta_rows, run_statements, run_stream

pytestmark = pytest.mark.integration


@dataclass
class History:
    lake: str
    state: PipelineState
    good: TableId
    refused: TableId  # its sink table has a CHECK constraint the source's rows break
    expected: object  # its source rows just before its failing change


def _table_uri(lake: str, table: TableId) -> str:
    return f"{lake}/{table.database}/{table.table}"


@pytest.fixture(scope="module")
def history(mysql_server, cdc_user, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("table-failures")
    database = f"cdc_fail_{uuid.uuid4().hex[:8]}"
    good, refused = TableId(database, "good"), TableId(database, "refused")
    conn = mysql_server.connect()

    def run(*statements: str) -> None:
        run_statements(conn, "SET sql_mode = ''", *statements)

    run(f"CREATE DATABASE `{database}`",
        f"CREATE TABLE {good.quoted} (id INT PRIMARY KEY, v INT)",
        f"CREATE TABLE {refused.quoted} (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO {good.quoted} VALUES (1, 1), (2, 2)",
        f"INSERT INTO {refused.quoted} VALUES (1, 1), (2, 2)")
    state, lake = PipelineState(str(tmp / "state")), str(tmp / "lake")
    snapshot_tables(cdc_user, [good, refused], lake, state, split_rows=4)
    DeltaTable(_table_uri(lake, refused)).alter.add_constraint({"v_not_negative": "v >= 0"})

    def rows_now(table: TableId):
        return source_rows(mysql_server.admin, load_table_schema(conn, table))

    # binlog order, each its own transaction; the stream merges in units of two changes
    run(f"INSERT INTO {good.quoted} VALUES (1001, 1)", f"INSERT INTO {refused.quoted} VALUES (101, 1)",
        f"UPDATE {refused.quoted} SET v = 5 WHERE id = 101", f"INSERT INTO {refused.quoted} VALUES (102, 2)")
    expected = rows_now(refused)
    run(f"INSERT INTO {refused.quoted} VALUES (103, -1)",  # the sink refuses it: refused stops here
        f"INSERT INTO {good.quoted} VALUES (1002, 2)", f"INSERT INTO {refused.quoted} VALUES (104, 4)",
        f"UPDATE {good.quoted} SET v = v + 10", f"DELETE FROM {good.quoted} WHERE id = 2")
    run_stream(cdc_user, tmp, StreamJob(state=state.location, sink=SinkSpec(lake), max_apply_changes=2))
    yield History(lake, state, good, refused, expected)
    run(f"DROP DATABASE IF EXISTS `{database}`")


def test_the_other_tables_stream_on_past_a_table_that_fails(history, mysql_server):
    schema = load_table_schema(mysql_server.connect(), history.good)
    assert_same_rows(history.good, source_rows(mysql_server.admin, schema), delta_rows(history.lake, schema))


def test_a_row_the_sink_refuses_freezes_its_table_after_the_changes_before_it(history, mysql_server):
    schema = load_table_schema(mysql_server.connect(), history.refused)
    assert_same_rows(history.refused, history.expected, delta_rows(history.lake, schema))
    (event,) = read_drift(history.state)[history.refused]
    assert event.kind is TableEventKind.FAILED
    assert "cannot be written to the sink" in event.reason and "failed validation" in event.reason


def test_status_shows_a_failed_table_frozen_with_its_error(history):
    tables = pipeline_status(history.state.location)["tables"]
    assert tables[str(history.refused)]["frozen_since"] is not None
    assert [e["kind"] for e in tables[str(history.refused)]["drift"]] == ["failed"]
    assert tables[str(history.good)]["frozen_since"] is None and not tables[str(history.good)]["drift"]


def test_a_table_removed_from_the_pipeline_stops_blocking_a_failed_batch(mysql_server, cdc_user, database,
                                                                         tmp_path):
    good, broken = TableId(database, "good"), TableId(database, "broken")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        for table in (good, broken):
            cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, v INT)")
            cur.execute(f"INSERT INTO {table.quoted} VALUES (1, 1)")
    state, lake = PipelineState(str(tmp_path / "state")), str(tmp_path / "lake")
    snapshot_tables(cdc_user, [good, broken], lake, state)
    # the sink's storage fails under one table (a data file of it cannot be read: a directory took
    # its place): not that table's data, so the stream fails, batch after batch
    (data_file,) = DeltaTable(_table_uri(lake, broken)).file_uris()
    Path(data_file).unlink()
    Path(data_file).mkdir()
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {good.quoted} VALUES (2, 2)")
        cur.execute(f"UPDATE {broken.quoted} SET v = 2 WHERE id = 1")  # its merge reads the file
    job = StreamJob(state=state.location, sink=SinkSpec(lake))
    with pytest.raises(SparkJobFailed, match="Is a directory"):
        run_stream(cdc_user, tmp_path, job)

    latest = state.latest()
    state.commit({t: c for t, c in latest.tables.items() if t != broken})  # the user removes it from the DAG
    run_stream(cdc_user, tmp_path, job)  # the same batch again, under its old generation

    schema = load_table_schema(conn, good)
    assert_same_rows(good, source_rows(mysql_server.admin, schema), delta_rows(lake, schema))
