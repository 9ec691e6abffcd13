"""The schema-change policies (Flink CDC's ``schema.change.behavior``) on a real stream, each with
changes written under the table's schema before a DDL and after it.
``fail`` (Flink's ``exception``): a captured table's DDL stops the stream before the statement,
naming it, with the changes before it applied and nothing of it (not even the column it adds in
the sink's schema); run again with ``evolve``, the stream follows it, the older rows get the added
column's DEFAULT and the sink equals the source. ``lenient``: column changes never re-snapshot, and
changes written before a DROP COLUMN keep their values in the column the sink keeps. ``ignore``: the
sink keeps its columns, with the same values."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.errors import SparkJobFailed
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.state.ddl_log import read_ddl_log
from airflow_provider_mysqlcdc.state.drift import read_drift
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.snapshot import snapshot_tables
from devtools.verify import differences, read_delta, sink_rows, source_rows

from .helpers import run_stream

pytestmark = pytest.mark.integration


def _delta_rows(lake: str, table: TableId) -> tuple[list[str], dict]:
    """The Delta table's source columns and rows by id, as delta-rs reads them (not our reader)."""
    data = read_delta(open_sink(SinkSpec(lake)).table_uri(table))
    return [n for n in data.column_names if not n.startswith("_cdc_")], {r["id"]: r for r in data.to_pylist()}


@pytest.mark.parametrize("sink_format", ["delta", "iceberg"])
def test_a_failing_stream_leaves_the_sink_as_before_the_ddl_and_evolve_then_fills_the_default(
        mysql_server, cdc_user, database, tmp_path, sink_format):
    table = TableId(database, f"policy_{sink_format}")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute(f"INSERT INTO {table.quoted} VALUES (1, 'a'), (2, 'b')")
    conn.commit()
    lake, state = str(tmp_path / "lake"), PipelineState(str(tmp_path / "state"))
    snapshot_tables(cdc_user, [table], lake, state, sink_format=sink_format)
    sink = open_sink(SinkSpec(lake, sink_format))
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table.quoted} VALUES (3, 'c')")
        cur.execute(f"UPDATE {table.quoted} SET v = 'B' WHERE id = 2")
        cur.execute(f"ALTER TABLE {table.quoted} ADD COLUMN n INT NULL DEFAULT 7")
        cur.execute(f"INSERT INTO {table.quoted} VALUES (4, 'd', 8)")
    conn.commit()

    with pytest.raises(SparkJobFailed, match=r"SchemaChangeRefused.*ADD COLUMN n.*schema_changes='evolve'"):
        run_stream(cdc_user, tmp_path / "first", StreamJob(state=state.location, sink=SinkSpec(lake, sink_format), schema_changes="fail"))
    # the changes before the statement, and nothing of it: not even its column in the table's schema
    assert [n for n in sink.column_names(table) if not n.startswith("_cdc_")] == ["id", "v"]
    assert {r["id"]: r["v"] for r in sink.read(table).to_pylist()} == {1: "a", 2: "B", 3: "c"}

    run_stream(cdc_user, tmp_path / "second", StreamJob(state=state.location, sink=SinkSpec(lake, sink_format)))
    schema = load_table_schema(conn, table)
    assert differences(source_rows(cdc_user, schema), sink_rows(lake, schema, sink_format=sink_format)) is None


def _altered_pipeline(mysql_server, cdc_user, database, tmp_path, name: str):
    """A snapshotted table, then: changes of the columns a DDL drops or renames next, written before
    it (their values are only in those row images), a dropped column, a renamed one, one added with
    an expression DEFAULT (which no binlog event carries into the older rows), and rows after them."""
    table = TableId(database, name)
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, v VARCHAR(10), gone INT, old INT)")
        cur.execute(f"INSERT INTO {table.quoted} VALUES (1, 'a', 10, 100), (2, 'b', 20, 200)")
    conn.commit()
    lake, state = str(tmp_path / "lake"), PipelineState(str(tmp_path / "state"))
    snapshot_tables(cdc_user, [table], lake, state)
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {table.quoted} SET gone = 21, old = 201 WHERE id = 2")
        cur.execute(f"INSERT INTO {table.quoted} VALUES (4, 'd', 40, 400)")
        cur.execute(f"ALTER TABLE {table.quoted} DROP COLUMN gone")
        cur.execute(f"ALTER TABLE {table.quoted} RENAME COLUMN old TO new")
        cur.execute(f"ALTER TABLE {table.quoted} ADD COLUMN at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP")
        cur.execute(f"INSERT INTO {table.quoted} (id, v, new) VALUES (3, 'c', 300)")
        cur.execute(f"UPDATE {table.quoted} SET v = 'B' WHERE id = 2")
    conn.commit()
    return table, lake, state


def test_lenient_follows_column_changes_without_a_resnapshot(mysql_server, cdc_user, database, tmp_path):
    table, lake, state = _altered_pipeline(mysql_server, cdc_user, database, tmp_path, "lenient")
    run_stream(cdc_user, tmp_path / "stream", StreamJob(state=state.location, sink=SinkSpec(lake), schema_changes="lenient"))
    assert read_drift(state) == {}
    _, rows = _delta_rows(lake, table)
    # dropped and renamed-away columns stay with the last values the binlog gave them (NULL in rows
    # written after), the new names are columns (NULL in older rows: no binlog event carries their
    # values there)
    assert {k: (r["v"], r["gone"], r["old"], r["new"]) for k, r in rows.items()} == {
        1: ("a", 10, 100, None), 2: ("B", 21, 201, 201), 3: ("c", None, None, 300), 4: ("d", 40, 400, None)}
    assert rows[1]["at"] is None and rows[3]["at"] is not None
    # each statement, and what the policy did with it, is in the table's status
    # (the stream met the first two behind the third: the server's schema was not theirs, and no row
    # was written between them, so the sink took their columns at the third)
    ahead = "its changes bring their columns (a later DDL of the table lies ahead, so the server's schema is not " \
            "this statement's)"
    assert [e.outcome for e in read_ddl_log(state).entries if e.table == table.quoted] == [
        ahead, ahead, "column(s) new, at added to the sink; column(s) gone, old gone from the source, kept in the "
                      "sink with their last values; rows before it hold NULL in at (no constant DEFAULT to give them)"]


def test_ignore_keeps_the_sinks_columns(mysql_server, cdc_user, database, tmp_path):
    table, lake, state = _altered_pipeline(mysql_server, cdc_user, database, tmp_path, "ignored")
    run_stream(cdc_user, tmp_path / "stream", StreamJob(state=state.location, sink=SinkSpec(lake), schema_changes="ignore"))
    assert read_drift(state) == {}
    columns, rows = _delta_rows(lake, table)
    assert columns == ["id", "v", "gone", "old"]
    assert {k: (r["v"], r["gone"], r["old"]) for k, r in rows.items()} == {
        1: ("a", 10, 100), 2: ("B", 21, 201), 3: ("c", None, None), 4: ("d", 40, 400)}
