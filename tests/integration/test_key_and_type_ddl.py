"""A DDL the sink cannot follow stops that table only, never the stream, and never wedges it.

- Changes written before ``ALTER TABLE ... RENAME COLUMN id TO id2`` are keyed by ``id``; the
  server already says ``id2`` when the stream gets to them. They are applied with the key they were
  written under, the table is frozen at the statement (the sink's rows cannot be matched to later
  changes: drift of kind ``key-changed``, re-snapshotted by the next run).
- A type change Delta refuses (``DECIMAL(10,2)`` to ``DECIMAL(10,4)``): changes before it are
  applied with the old type, the table is frozen there (kind ``type-changed``).

Every other table streams on.
"""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.model.records import TableEventKind
from airflow_provider_mysqlcdc.cdc.source.schema import TableId, load_table_schema
from airflow_provider_mysqlcdc.devtools.snapshot import snapshot_tables
from airflow_provider_mysqlcdc.devtools.verify import source_rows
from airflow_provider_mysqlcdc.spark.stream_job import StreamJob
from airflow_provider_mysqlcdc.spark.submit import SparkSubmit
from airflow_provider_mysqlcdc.state.drift import read_drift
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.schemas import KnownSchemas

from .helpers import assert_same_rows, delta_rows

pytestmark = pytest.mark.integration


def _stream(state: PipelineState, lake: str, cdc_user, tmp_path) -> None:
    """One available-now stream run (its first: the server already shows the change)."""
    (tmp_path / "stream.json").write_text(StreamJob(state=state.location, sink_root=lake).to_json())
    source_file = cdc_user.to_private_file(tmp_path / "secrets" / "source.json")
    SparkSubmit(master="local[2]", work_dir=tmp_path / "spark").run(
        "binlog_stream.py", ["--job", str(tmp_path / "stream.json")], source_file)


def test_changes_from_before_a_key_rename_apply_with_their_key_and_the_table_freezes(mysql_server, cdc_user,
                                                                                     database, tmp_path):
    conn = mysql_server.connect(database)
    renamed, other = TableId(database, "renamed"), TableId(database, "other")
    with conn.cursor() as cur:
        for table in (renamed, other):
            cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, v INT)")
            cur.execute(f"INSERT INTO {table.quoted} SELECT seq, 0 FROM seq_1_to_60")
    state = PipelineState(str(tmp_path / "state"))
    lake = str(tmp_path / "lake")
    snapshot_tables(cdc_user, [renamed, other], lake, state)
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {renamed.quoted} SET v = 1 WHERE id % 3 = 0")  # id changes too: key-changing updates
        cur.execute(f"UPDATE {renamed.quoted} SET id = id + 100 WHERE id % 5 = 0")
        cur.execute(f"DELETE FROM {renamed.quoted} WHERE id % 7 = 0")
    before_rename = source_rows(mysql_server.admin, load_table_schema(conn, renamed))
    with conn.cursor() as cur:
        cur.execute(f"ALTER TABLE {renamed.quoted} RENAME COLUMN id TO id2")
        cur.execute(f"UPDATE {renamed.quoted} SET v = 2 WHERE id2 % 2 = 0")
        cur.execute(f"INSERT INTO {renamed.quoted} VALUES (1000, 3)")
        cur.execute(f"UPDATE {other.quoted} SET v = 4 WHERE id % 2 = 0")
        cur.execute(f"DELETE FROM {other.quoted} WHERE id % 9 = 0")

    _stream(state, lake, cdc_user, tmp_path)  # the server describes the table by id2 only by now

    old_schema = KnownSchemas(state).remembered(renamed)
    assert old_schema is not None and old_schema.key_columns == ("id",)
    assert_same_rows(renamed, before_rename, delta_rows(lake, old_schema))
    assert [e.kind for e in read_drift(state)[renamed]] == [TableEventKind.KEY_CHANGED]
    other_schema = load_table_schema(conn, other)
    assert_same_rows(other, source_rows(mysql_server.admin, other_schema), delta_rows(lake, other_schema))
    assert other not in read_drift(state)


def test_a_type_the_sink_cannot_take_freezes_that_table_and_the_stream_goes_on(mysql_server, cdc_user, database,
                                                                               tmp_path):
    conn = mysql_server.connect(database)
    money, other = TableId(database, "money"), TableId(database, "other")
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {money.quoted} (id INT PRIMARY KEY, d DECIMAL(10,2))")
        cur.execute(f"INSERT INTO {money.quoted} SELECT seq, seq / 4 FROM seq_1_to_60")
        cur.execute(f"CREATE TABLE {other.quoted} (id INT PRIMARY KEY, v INT)")
        cur.execute(f"INSERT INTO {other.quoted} SELECT seq, 0 FROM seq_1_to_60")
    state = PipelineState(str(tmp_path / "state"))
    lake = str(tmp_path / "lake")
    snapshot_tables(cdc_user, [money, other], lake, state)
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {money.quoted} SET d = d + 1.25 WHERE id % 3 = 0")
        cur.execute(f"DELETE FROM {money.quoted} WHERE id % 7 = 0")
    old_schema = load_table_schema(conn, money)
    before_change = source_rows(mysql_server.admin, old_schema)
    with conn.cursor() as cur:
        cur.execute(f"ALTER TABLE {money.quoted} MODIFY d DECIMAL(10,4)")
        cur.execute(f"UPDATE {money.quoted} SET d = 0.1234 WHERE id % 2 = 0")
        cur.execute(f"UPDATE {other.quoted} SET v = 4 WHERE id % 2 = 0")

    _stream(state, lake, cdc_user, tmp_path)  # the server describes d as DECIMAL(10,4) by now

    assert_same_rows(money, before_change, delta_rows(lake, old_schema))
    events = read_drift(state)[money]
    assert [e.kind for e in events] == [TableEventKind.TYPE_CHANGED] and "decimal" in events[0].reason.lower()
    other_schema = load_table_schema(conn, other)
    assert_same_rows(other, source_rows(mysql_server.admin, other_schema), delta_rows(lake, other_schema))
