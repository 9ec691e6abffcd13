"""``ALTER TABLE ... ADD COLUMN`` while streaming: rows that existed before get what the source gives
them. One scripted history (the module fixture) with one stream run; each test checks one table:

- constant DEFAULTs of several types are filled into the sink's older rows in place, in one commit,
  so the table equals the source without a re-snapshot, also when the ALTER is the table's first
  event the stream meets (no write has added the columns to the sink table yet);
- an expression DEFAULT (CURRENT_TIMESTAMP) cannot be known: drift, the next run re-snapshots;
- a default changed by a later DDL is never filled with the later value: drift instead;
- a column named like the sink's change columns (``_cdc_...``) freezes the table with a reason
  that names it, and its earlier changes are applied.

The history runs once into each table format.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from airflow_provider_mysqlcdc.cdc.model.records import TableEventKind
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.drift import Drift, read_drift
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.snapshot import snapshot_tables
from devtools.spark_submit import SparkSubmit
from devtools.verify import Rows, sink_rows, source_rows

from .helpers import assert_same_rows

pytestmark = pytest.mark.integration

CONSTANT = ("ADD COLUMN n INT NOT NULL DEFAULT -7, ADD COLUMN s VARCHAR(20) DEFAULT 'it''s', "
            "ADD COLUMN d DECIMAL(8,3) DEFAULT 12.5, ADD COLUMN day DATE DEFAULT '2024-02-29', "
            "ADD COLUMN at DATETIME(6) DEFAULT '2024-01-02 03:04:05.123456', ADD COLUMN b VARBINARY(4) DEFAULT 0x00ff, "
            "ADD COLUMN big BIGINT UNSIGNED DEFAULT 18446744073709551615, ADD COLUMN e ENUM('x','y') DEFAULT 'y', "
            "ADD COLUMN none_ INT NULL")
#: a constant DEFAULT of every type family MariaDB takes one for, with values at their edges
EVERY_TYPE = ("ADD COLUMN b10 BIT(10) DEFAULT b'101000010', ADD COLUMN b1 BIT(1) DEFAULT b'1', "
              "ADD COLUMN b64 BIT(64) DEFAULT b'1111111111111111111111111111111111111111111111111111111111111111', "
              "ADD COLUMN ti TINYINT DEFAULT -128, ADD COLUMN siu SMALLINT UNSIGNED DEFAULT 65535, "
              "ADD COLUMN mi MEDIUMINT DEFAULT -8388608, ADD COLUMN bi BIGINT DEFAULT -9223372036854775808, "
              "ADD COLUMN f FLOAT DEFAULT 1.5e10, ADD COLUMN dbl DOUBLE DEFAULT -2.5e-300, "
              "ADD COLUMN wide DECIMAL(65,18) DEFAULT -0.000000000000000001, ADD COLUMN bo BOOLEAN DEFAULT TRUE, "
              "ADD COLUMN ts TIMESTAMP(3) NULL DEFAULT '2024-03-04 05:06:07.891', ADD COLUMN tm TIME(6) "
              "DEFAULT '-838:59:58.999999', ADD COLUMN y YEAR DEFAULT 2155, ADD COLUMN ch CHAR(5) DEFAULT 'ab ', "
              "ADD COLUMN bn BINARY(4) DEFAULT 'ab', ADD COLUMN tx TEXT DEFAULT 'héllo 😀', ADD COLUMN bl BLOB DEFAULT 'x', "
              "ADD COLUMN st SET('p','q','r') DEFAULT 'r,p', ADD COLUMN js JSON DEFAULT '{\"k\": [1]}', "
              "ADD COLUMN u UUID DEFAULT '123e4567-e89b-12d3-a456-426614174000', ADD COLUMN i6 INET6 DEFAULT '::1', "
              "ADD COLUMN l1 VARCHAR(10) CHARACTER SET latin1 DEFAULT 'çà'")
TABLES = ("constant", "expression", "changed_later", "reserved", "every_type", "first_event")


@dataclass
class History:
    database: str
    lake: str
    sink_format: str
    drift: Drift
    reserved_before: TableSchema  # the "reserved" table's schema before its ALTER

    def table(self, name: str) -> TableId:
        return TableId(self.database, name)

    def rows(self, schema: TableSchema) -> Rows:
        """The sink table's rows, read as ``schema`` says."""
        return sink_rows(self.lake, schema, sink_format=self.sink_format)


@pytest.fixture(scope="module", params=["delta", "iceberg"])
def history(mysql_server, cdc_user, tmp_path_factory, request):
    tmp = tmp_path_factory.mktemp("added_columns")
    database = "added_columns"
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {database}")
        cur.execute(f"CREATE DATABASE {database}")
        for name in TABLES:
            cur.execute(f"CREATE TABLE {database}.{name} (id INT PRIMARY KEY, v INT)")
            cur.execute(f"INSERT INTO {database}.{name} SELECT seq, 0 FROM {database}.seq_1_to_50")
    state, lake = PipelineState(str(tmp / "state")), str(tmp / "lake")
    snapshot_tables(cdc_user, [TableId(database, n) for n in TABLES], lake, state, sink_format=request.param)
    reserved_before = load_table_schema(conn, TableId(database, "reserved"))
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {database}.constant SET v = 1 WHERE id % 4 = 0")
        cur.execute(f"ALTER TABLE {database}.constant {CONSTANT}")
        cur.execute(f"UPDATE {database}.constant SET v = 2, n = id, s = NULL WHERE id % 3 = 0")
        cur.execute(f"INSERT INTO {database}.constant (id, v) VALUES (100, 9)")
        cur.execute(f"DELETE FROM {database}.constant WHERE id % 10 = 0")
        cur.execute(f"UPDATE {database}.every_type SET v = 1 WHERE id % 4 = 0")
        cur.execute(f"ALTER TABLE {database}.every_type {EVERY_TYPE}")
        cur.execute(f"UPDATE {database}.every_type SET v = 2, b10 = 5, tx = NULL WHERE id % 3 = 0")
        cur.execute(f"ALTER TABLE {database}.first_event ADD COLUMN c INT DEFAULT 3, ADD COLUMN s VARCHAR(9) DEFAULT 'x'")
        cur.execute(f"ALTER TABLE {database}.expression ADD COLUMN at TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6)")
        cur.execute(f"ALTER TABLE {database}.changed_later ADD COLUMN c INT DEFAULT 1")
        cur.execute(f"UPDATE {database}.changed_later SET v = 3 WHERE id = 1")
        cur.execute(f"ALTER TABLE {database}.changed_later ALTER COLUMN c SET DEFAULT 2")
        cur.execute(f"UPDATE {database}.reserved SET v = 4 WHERE id = 2")
        cur.execute(f"ALTER TABLE {database}.reserved ADD COLUMN _cdc_row INT DEFAULT 5")
        cur.execute(f"UPDATE {database}.reserved SET v = 5 WHERE id = 3")
    job = StreamJob(state=state.location, sink=SinkSpec(lake, request.param))
    (tmp / "stream.json").write_text(job.to_json())
    SparkSubmit(master="local[2]", work_dir=tmp / "spark").run(
        "binlog_stream.py", ["--job", str(tmp / "stream.json")], cdc_user.to_private_file(tmp / "secrets" / "source.json"))
    yield History(database, lake, request.param, read_drift(state), reserved_before)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE {database}")


def test_constant_defaults_fill_the_older_rows_in_place(history, mysql_server):
    table = history.table("constant")
    schema = load_table_schema(mysql_server.connect(), table)
    assert_same_rows(table, source_rows(mysql_server.admin, schema), history.rows(schema))
    assert table not in history.drift


def test_a_constant_default_of_every_type_fills_the_older_rows_in_place(history, mysql_server):
    table = history.table("every_type")
    schema = load_table_schema(mysql_server.connect(), table)
    assert all(c.default_constant for c in schema.columns if c.name not in ("id", "v"))
    assert_same_rows(table, source_rows(mysql_server.admin, schema), history.rows(schema))
    assert table not in history.drift


def test_a_constant_default_fills_the_older_rows_when_the_alter_is_the_tables_first_event(history, mysql_server):
    table = history.table("first_event")
    schema = load_table_schema(mysql_server.connect(), table)
    assert_same_rows(table, source_rows(mysql_server.admin, schema), history.rows(schema))
    assert table not in history.drift


def test_an_expression_default_is_drift_for_a_re_snapshot(history):
    events = history.drift[history.table("expression")]
    assert [e.kind for e in events] == [TableEventKind.ALTERED] and "column(s) at added by" in events[0].reason


def test_a_default_changed_later_is_never_filled_with_the_later_value(history, mysql_server):
    table = history.table("changed_later")
    assert [e.kind for e in history.drift[table]] == [TableEventKind.ALTERED]
    schema = load_table_schema(mysql_server.connect(), table)
    assert 2 not in {row["c"] for row in history.rows(schema).values()}


def test_a_column_named_like_a_change_column_freezes_the_table(history):
    events = history.drift[history.table("reserved")]
    assert [e.kind for e in events] == [TableEventKind.TYPE_CHANGED]
    assert "_cdc_row" in events[0].reason and "begin with '_cdc_'" in events[0].reason
    rows = history.rows(history.reserved_before)
    assert rows[(2,)]["v"] == 4 and rows[(3,)]["v"] == 0  # applied up to the ALTER, not after it
