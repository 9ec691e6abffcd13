"""A DDL the sink cannot follow stops that table only, never the stream, and never wedges it.

- Changes written before ``ALTER TABLE ... RENAME COLUMN id TO id2`` are keyed by ``id``; the
  server already says ``id2`` when the stream gets to them. They are applied with the key they were
  written under, the table is frozen at the statement (the sink's rows cannot be matched to later
  changes: drift of kind ``key-changed``, re-snapshotted by the next run).
- A type change the sink refuses (``DECIMAL(10,2)`` to ``DECIMAL(10,4)`` in either format, and ``INT``
  to ``BIGINT`` in Delta, which delta-rs cannot widen in place: a value beyond INT would not fit the
  table's column): changes before it are applied with the old type, the table is frozen there (kind
  ``type-changed``). Iceberg widens ``INT`` to ``BIGINT`` in place and streams on.
- Another collation for a string chunk key orders its values differently, so the sink's chunk
  ranges no longer hold: changes before it apply, the table is frozen there (``key-changed``).

Every other table streams on. One scripted history (the module fixture, one stream run that starts
after both statements) serves the tests, once into each table format.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from airflow_provider_mysqlcdc.cdc.model.records import TableEventKind
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.drift import read_drift
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.schemas import KnownSchemas
from devtools.snapshot import snapshot_tables
from devtools.verify import Rows, sink_rows, source_rows

from .helpers import assert_same_rows, run_stream

pytestmark = pytest.mark.integration


#: other forms of a key column's rename or a new primary key: each freezes its table only
KEY_DDL = {
    "changed": ("id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, v INT",
                "CHANGE id collection_id INT UNSIGNED NOT NULL AUTO_INCREMENT"),
    "changed_column": ("id INT NOT NULL PRIMARY KEY, v INT",
                       "/* app migration */ CHANGE COLUMN `id` `Id2` BIGINT NOT NULL, ALGORITHM=COPY"),
    "new_primary_key": ("id INT NOT NULL PRIMARY KEY, v INT NOT NULL",
                        "DROP PRIMARY KEY, ADD PRIMARY KEY (v, id)"),
}


@dataclass
class History:
    renamed: TableId
    money: TableId
    widened: TableId
    other: TableId
    collated: TableId
    lake: str
    state: PipelineState
    before_rename: Rows
    before_type_change: Rows
    before_widening: Rows
    before_collation_change: Rows
    before_key_ddl: dict[TableId, Rows]
    second_run: dict
    sink_format: str

    def rows(self, schema) -> Rows:
        """The sink table's rows, read as ``schema`` says."""
        return sink_rows(self.lake, schema, sink_format=self.sink_format)


@pytest.fixture(scope="module", params=["delta", "iceberg"])
def history(mysql_server, cdc_user, tmp_path_factory, request):
    tmp = tmp_path_factory.mktemp("key-and-type")
    database = f"cdc_keytype_{uuid.uuid4().hex[:8]}"
    conn = mysql_server.connect()
    renamed, money, widened, other, collated = (TableId(database, n) for n in
                                                ("renamed", "money", "widened", "other", "collated"))
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
        cur.execute(f"CREATE TABLE {renamed.quoted} (id INT PRIMARY KEY, v INT)")
        cur.execute(f"INSERT INTO {renamed.quoted} SELECT seq, 0 FROM `{database}`.seq_1_to_60")
        cur.execute(f"CREATE TABLE {money.quoted} (id INT PRIMARY KEY, d DECIMAL(10,2))")
        cur.execute(f"INSERT INTO {money.quoted} SELECT seq, seq / 4 FROM `{database}`.seq_1_to_60")
        cur.execute(f"CREATE TABLE {widened.quoted} (id INT PRIMARY KEY, w INT)")
        cur.execute(f"INSERT INTO {widened.quoted} SELECT seq, seq FROM `{database}`.seq_1_to_60")
        cur.execute(f"CREATE TABLE {other.quoted} (id INT PRIMARY KEY, v INT)")
        cur.execute(f"INSERT INTO {other.quoted} SELECT seq, 0 FROM `{database}`.seq_1_to_60")
        cur.execute(f"CREATE TABLE {collated.quoted} (id VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)")
        cur.execute(f"INSERT INTO {collated.quoted} SELECT CONCAT(IF(seq % 2, 'a', 'B'), seq), 0 "
                    f"FROM `{database}`.seq_1_to_60")
        key_ddl = {TableId(database, name): ddl for name, (_, ddl) in KEY_DDL.items()}
        for name, (columns, _) in KEY_DDL.items():
            cur.execute(f"CREATE TABLE `{database}`.`{name}` ({columns})")
            cur.execute(f"INSERT INTO `{database}`.`{name}` (id, v) SELECT seq, seq FROM `{database}`.seq_1_to_40")
    state, lake = PipelineState(str(tmp / "state")), str(tmp / "lake")
    snapshot_tables(cdc_user, [renamed, money, widened, other, collated, *key_ddl], lake, state,
                    sink_format=request.param)
    before_key_ddl = {}
    with conn.cursor() as cur:
        for table, ddl in key_ddl.items():
            cur.execute(f"UPDATE {table.quoted} SET v = v + 100 WHERE id % 3 = 0")
            cur.execute(f"DELETE FROM {table.quoted} WHERE id % 7 = 0")
            before_key_ddl[table] = source_rows(mysql_server.admin, load_table_schema(conn, table))
            cur.execute(f"ALTER TABLE {table.quoted} {ddl}")
            cur.execute(f"INSERT INTO {table.quoted} (v) VALUES (1000)" if "AUTO_INCREMENT" in ddl
                        else f"UPDATE {table.quoted} SET v = v + 1000 WHERE v % 2 = 0")
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {renamed.quoted} SET v = 1 WHERE id % 3 = 0")
        cur.execute(f"UPDATE {renamed.quoted} SET id = id + 100 WHERE id % 5 = 0")  # key-changing updates
        cur.execute(f"DELETE FROM {renamed.quoted} WHERE id % 7 = 0")
        cur.execute(f"UPDATE {money.quoted} SET d = d + 1.25 WHERE id % 3 = 0")
        cur.execute(f"DELETE FROM {money.quoted} WHERE id % 7 = 0")
        cur.execute(f"UPDATE {collated.quoted} SET v = 1 WHERE id LIKE 'B%'")
        cur.execute(f"UPDATE {widened.quoted} SET w = -w WHERE id % 3 = 0")
    before_collation_change = source_rows(mysql_server.admin, load_table_schema(conn, collated))
    before_rename = source_rows(mysql_server.admin, load_table_schema(conn, renamed))
    before_type_change = source_rows(mysql_server.admin, load_table_schema(conn, money))
    before_widening = source_rows(mysql_server.admin, load_table_schema(conn, widened))
    with conn.cursor() as cur:
        cur.execute(f"ALTER TABLE {renamed.quoted} RENAME COLUMN id TO id2")
        cur.execute(f"UPDATE {renamed.quoted} SET v = 2 WHERE id2 % 2 = 0")
        cur.execute(f"INSERT INTO {renamed.quoted} VALUES (1000, 3)")
        cur.execute(f"ALTER TABLE {money.quoted} MODIFY d DECIMAL(10,4)")
        cur.execute(f"UPDATE {money.quoted} SET d = 0.1234 WHERE id % 2 = 0")
        cur.execute(f"ALTER TABLE {widened.quoted} MODIFY w BIGINT")
        cur.execute(f"UPDATE {widened.quoted} SET w = 1099511627776 + id WHERE id % 2 = 0")
        cur.execute(f"UPDATE {other.quoted} SET v = 4 WHERE id % 2 = 0")
        cur.execute(f"DELETE FROM {other.quoted} WHERE id % 9 = 0")
        cur.execute(f"ALTER TABLE {collated.quoted} MODIFY id VARCHAR(20) COLLATE utf8mb4_bin")
        cur.execute(f"UPDATE {collated.quoted} SET v = 2 WHERE id LIKE 'a%'")
        cur.execute(f"INSERT INTO {collated.quoted} VALUES ('b1', 3)")

    # the stream's first run starts now: the server already says id2 and DECIMAL(10,4)
    job = StreamJob(state=state.location, sink=SinkSpec(lake, request.param))
    run_stream(cdc_user, tmp, job)
    with conn.cursor() as cur:  # the next run streams on past the frozen tables
        cur.execute(f"UPDATE {other.quoted} SET v = 5 WHERE id % 5 = 0")
    second_run = run_stream(cdc_user, tmp, job)
    yield History(renamed, money, widened, other, collated, lake, state, before_rename, before_type_change,
                  before_widening, before_collation_change, before_key_ddl, second_run, request.param)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE `{database}`")


def _remembered(h: History, table: TableId):
    schema = KnownSchemas(h.state).remembered(table)
    assert schema is not None
    return schema


def test_changes_from_before_a_key_rename_apply_with_the_key_they_were_written_under(history):
    schema = _remembered(history, history.renamed)
    assert schema.key_columns == ("id",)
    assert_same_rows(history.renamed, history.before_rename, history.rows(schema))


@pytest.mark.parametrize("name", sorted(KEY_DDL))
def test_every_form_of_a_key_change_freezes_its_table_after_applying_the_changes_before_it(history, name):
    table = TableId(history.renamed.database, name)
    assert [e.kind for e in read_drift(history.state)[table]] == [TableEventKind.KEY_CHANGED]
    assert_same_rows(table, history.before_key_ddl[table], history.rows(_remembered(history, table)))


def test_the_next_stream_run_after_key_changes_succeeds_and_streams_the_other_tables(history, mysql_server):
    assert history.second_run["mode"] == "available-now"
    schema = load_table_schema(mysql_server.connect(), history.other)
    assert_same_rows(history.other, source_rows(mysql_server.admin, schema), history.rows(schema))


def test_a_key_rename_freezes_the_table_for_a_re_snapshot(history):
    assert [e.kind for e in read_drift(history.state)[history.renamed]] == [TableEventKind.KEY_CHANGED]


def test_changes_from_before_a_decimal_scale_change_apply_with_the_old_type(history):
    schema = _remembered(history, history.money)
    assert schema.column("d").column_type.lower() == "decimal(10,2)"
    assert_same_rows(history.money, history.before_type_change, history.rows(schema))


def test_a_decimal_scale_change_freezes_the_table_with_the_reason(history):
    events = read_drift(history.state)[history.money]
    assert [e.kind for e in events] == [TableEventKind.TYPE_CHANGED] and "decimal" in events[0].reason.lower()


def test_int_to_bigint_freezes_a_delta_table_and_widens_an_iceberg_table_in_place(history, mysql_server):
    events = read_drift(history.state).get(history.widened, [])
    if history.sink_format == "delta":  # delta-rs cannot widen a column in place
        assert [e.kind for e in events] == [TableEventKind.TYPE_CHANGED] and "int64" in events[0].reason.lower()
        schema = _remembered(history, history.widened)
        assert schema.column("w").column_type.lower() == "int(11)"
        assert_same_rows(history.widened, history.before_widening, history.rows(schema))
    else:  # Iceberg promotes int to long: the values beyond INT written after the ALTER arrive
        assert events == []
        schema = load_table_schema(mysql_server.connect(), history.widened)
        assert schema.column("w").column_type.lower() == "bigint(20)"
        assert_same_rows(history.widened, source_rows(mysql_server.admin, schema), history.rows(schema))


def test_every_other_table_streams_on(history, mysql_server):
    schema = load_table_schema(mysql_server.connect(), history.other)
    assert_same_rows(history.other, source_rows(mysql_server.admin, schema), history.rows(schema))
    assert history.other not in read_drift(history.state)


def test_another_collation_of_the_chunk_key_freezes_the_table_after_the_changes_before_it(history):
    events = read_drift(history.state)[history.collated]
    assert [e.kind for e in events] == [TableEventKind.KEY_CHANGED] and "utf8mb4_bin" in events[0].reason
    schema = _remembered(history, history.collated)
    assert schema.column("id").collation == "utf8mb4_general_ci"
    assert_same_rows(history.collated, history.before_collation_change, history.rows(schema))


def test_a_plan_between_a_key_change_and_the_stream_leaves_the_stream_able_to_apply_the_changes_before_it(
        mysql_server, cdc_user, database, tmp_path):
    """A DAG run plans (and remembers the server's schema) before its stream reaches the key change:
    the stream still applies the changes written under the old key, then freezes only that table."""
    from devtools.dag_runner import example_dag_env, run_dag

    table = TableId(database, "k")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, v INT)")
        cur.execute(f"INSERT INTO {table.quoted} SELECT seq, seq FROM `{database}`.seq_1_to_30")
    env = example_dag_env(tmp_path / "airflow", cdc_user, [table], sink_root=tmp_path / "lake",
                          state_dir=tmp_path / "state", split_rows=100, chunk_rows=100)
    first = run_dag("mysqlcdc_example", env, conf={"stream_mode": "skip"})
    assert first["state"] == "success", first["output"][-3000:]
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {table.quoted} SET v = -v WHERE id % 2 = 0")
        cur.execute(f"DELETE FROM {table.quoted} WHERE id = 3")
        before = source_rows(mysql_server.admin, load_table_schema(conn, table))
        cur.execute(f"ALTER TABLE {table.quoted} CHANGE id collection_id INT UNSIGNED NOT NULL AUTO_INCREMENT")
        cur.execute(f"INSERT INTO {table.quoted} (v) VALUES (1000)")
    second = run_dag("mysqlcdc_example", env, conf={"stream_mode": "available-now"})
    assert second["state"] == "success", second["output"][-3000:]
    state = PipelineState(str(tmp_path / "state" / "mysqlcdc_example"))
    assert [e.kind for e in read_drift(state)[table]] == [TableEventKind.KEY_CHANGED]
    remembered = KnownSchemas(state).remembered(table)
    assert remembered.key_columns == ("id",)
    assert_same_rows(table, before, sink_rows(str(tmp_path / "lake"), remembered))
