"""The schema-change policies (Flink CDC's ``schema.change.behavior``) on a real stream.
``fail`` (Flink's ``exception``): a captured table's DDL stops the stream before the statement,
naming it, with the changes before it applied and nothing of it; run again with ``evolve``, the
stream follows it and the sink equals the source. ``lenient``: column changes never re-snapshot.
``ignore``: the sink keeps its columns."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.errors import SparkJobFailed
from airflow_provider_mysqlcdc.cdc.source.schema import TableId, load_table_schema
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.state.drift import read_drift
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.snapshot import snapshot_tables
from devtools.verify import differences, sink_rows, source_rows

from .helpers import run_stream

pytestmark = pytest.mark.integration


def test_a_captured_tables_ddl_stops_a_failing_stream_before_it_and_evolve_goes_on(mysql_server, cdc_user, database,
                                                                                    tmp_path):
    table = TableId(database, "policy")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute(f"INSERT INTO {table.quoted} VALUES (1, 'a'), (2, 'b')")
    conn.commit()
    lake, state = str(tmp_path / "lake"), PipelineState(str(tmp_path / "state"))
    snapshot_tables(cdc_user, [table], lake, state)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table.quoted} VALUES (3, 'c')")
        cur.execute(f"ALTER TABLE {table.quoted} ADD COLUMN n INT NOT NULL DEFAULT 7")
        cur.execute(f"INSERT INTO {table.quoted} VALUES (4, 'd', 8)")
    conn.commit()

    with pytest.raises(SparkJobFailed, match=r"SchemaChangeRefused.*ADD COLUMN n.*schema_changes='evolve'"):
        run_stream(cdc_user, tmp_path / "first", StreamJob(state=state.location, sink_root=lake, schema_changes="fail"))
    before = load_table_schema(conn, table)
    rows = sink_rows(lake, before)
    assert sorted(rows) == [(1,), (2,), (3,)] and all(r.get("n") is None for r in rows.values())

    run_stream(cdc_user, tmp_path / "second", StreamJob(state=state.location, sink_root=lake))
    schema = load_table_schema(conn, table)
    assert differences(source_rows(cdc_user, schema), sink_rows(lake, schema)) is None


def _altered_pipeline(mysql_server, cdc_user, database, tmp_path, name: str):
    """A snapshotted table, then: a row, a dropped column, a renamed one, one added with an expression
    DEFAULT (which no binlog event carries into the older rows), and rows after them."""
    table = TableId(database, name)
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, v VARCHAR(10), gone INT, old INT)")
        cur.execute(f"INSERT INTO {table.quoted} VALUES (1, 'a', 10, 100), (2, 'b', 20, 200)")
    conn.commit()
    lake, state = str(tmp_path / "lake"), PipelineState(str(tmp_path / "state"))
    snapshot_tables(cdc_user, [table], lake, state)
    with conn.cursor() as cur:
        cur.execute(f"ALTER TABLE {table.quoted} DROP COLUMN gone")
        cur.execute(f"ALTER TABLE {table.quoted} RENAME COLUMN old TO new")
        cur.execute(f"ALTER TABLE {table.quoted} ADD COLUMN at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP")
        cur.execute(f"INSERT INTO {table.quoted} (id, v, new) VALUES (3, 'c', 300)")
        cur.execute(f"UPDATE {table.quoted} SET v = 'B' WHERE id = 2")
    conn.commit()
    return table, lake, state


def test_lenient_follows_column_changes_without_a_resnapshot(mysql_server, cdc_user, database, tmp_path):
    table, lake, state = _altered_pipeline(mysql_server, cdc_user, database, tmp_path, "lenient")
    run_stream(cdc_user, tmp_path / "stream", StreamJob(state=state.location, sink_root=lake, schema_changes="lenient"))
    assert read_drift(state) == {}
    rows = {r["id"]: r for r in open_sink(lake).read(table).to_pylist()}
    # dropped and renamed-away columns stay (their last values; NULL in rows written after), the new
    # names are columns (NULL in older rows: no binlog event carries their values there)
    assert {k: (r["v"], r["gone"], r["old"], r["new"]) for k, r in rows.items()} == {
        1: ("a", 10, 100, None), 2: ("B", 20, 200, 200), 3: ("c", None, None, 300)}
    assert rows[1]["at"] is None and rows[3]["at"] is not None


def test_ignore_keeps_the_sinks_columns(mysql_server, cdc_user, database, tmp_path):
    table, lake, state = _altered_pipeline(mysql_server, cdc_user, database, tmp_path, "ignored")
    run_stream(cdc_user, tmp_path / "stream", StreamJob(state=state.location, sink_root=lake, schema_changes="ignore"))
    assert read_drift(state) == {}
    data = open_sink(lake).read(table)
    assert [n for n in data.column_names if not n.startswith("_cdc_")] == ["id", "v", "gone", "old"]
    rows = {r["id"]: (r["v"], r["gone"], r["old"]) for r in data.to_pylist()}
    assert rows == {1: ("a", 10, 100), 2: ("B", 20, 200), 3: ("c", None, None)}
