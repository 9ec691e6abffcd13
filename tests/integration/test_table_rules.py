"""Column rules (Debezium's column.include/exclude lists, column.mask.hash, column.truncate.to;
cdc/source/rules.py) through a real DAG run and a real stream: the sink holds the kept columns,
masked alike on the snapshot and the binlog path (columns a DDL adds included), no file the
pipeline writes (sink, changelog, state, spill files, task logs, Spark event logs) holds a masked
value or the salt in clear, and a changed rule re-snapshots the table under the new one."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import replace

import pytest

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.rules import TableRules
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.dag_runner import example_dag_env, run_dag
from devtools.spark_submit import SparkSubmit
from devtools.verify import differences, sink_rows, source_rows

from .helpers import files_holding

pytestmark = pytest.mark.integration

SALT = "salt-5b1d-e77a-only-in-the-connection"
#: in every value a mask hides, and nowhere else
MARK = "Q7Z9"


def mac(value: object) -> str | None:
    """The hash mask as the docs define it: HMAC-SHA-256 keyed by the salt, of the value's text."""
    return None if value is None else hmac.new(SALT.encode(), str(value).encode(), hashlib.sha256).hexdigest()


def expected_rows(cdc_user, table: TableId, *, truncate_address: bool) -> dict:
    """The source table as the rule captures it, computed here from the source's own rows."""
    conn = cdc_user.connect()
    try:
        schema = load_table_schema(conn, table)
    finally:
        conn.close()
    expected = {}
    for key, row in source_rows(cdc_user, schema).items():
        kept = {"id": row["id"], "email": mac(row["email"]), "born": mac(row["born"]), "ssn": None,
                "address": row["address"][:4] if truncate_address and row["address"] is not None else row["address"],
                "score": row["score"]}
        if "phone" in row:
            kept["phone"] = mac(row["phone"])
        expected[key] = kept
    return expected


def sink_of(cdc_user, lake, table: TableId, rules: TableRules) -> dict:
    conn = cdc_user.connect()
    try:
        schema = rules.captured(load_table_schema(conn, table), "id")
    finally:
        conn.close()
    return sink_rows(lake, schema)


def test_left_out_and_masked_columns_never_reach_a_file_on_either_path_and_a_changed_rule_resnapshots(
        mysql_server, cdc_user, database, tmp_path):
    table = TableId(database, "people")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, email VARCHAR(100), notes TEXT, "
                    "address VARCHAR(60), ssn CHAR(12) NOT NULL, born DATETIME(3), score INT)")
        cur.executemany(f"INSERT INTO {table.quoted} VALUES (%s, %s, %s, %s, %s, %s, %s)",
                        [(i, f"m{i}-{MARK}@example.org", f"note {i} {MARK}", f"Road{MARK} {i}", f"SSN{i:04d}{MARK}",
                          f"2001-02-03 04:05:{i % 60:02d}.{i:03d}", i * 3) for i in range(40)])
    conn.commit()
    # a pattern's rule may name columns a DDL adds later: phone will be hashed, later_secret left out
    rule = {"hash": ["email", "born", "phone"], "exclude": ["notes", "later_secret"], "truncate": {"address": 4},
            "null": ["ssn"]}
    columns = {f"{database}.peop.*": rule}
    lake, state_dir, events = tmp_path / "lake", tmp_path / "state", tmp_path / "spark-events"
    events.mkdir()
    salted = replace(cdc_user, mask_salt=SALT)
    env = example_dag_env(tmp_path / "airflow", cdc_user, [table], sink_root=lake, state_dir=state_dir,
                          split_rows=15, chunk_rows=30)
    connection = json.loads(env["AIRFLOW_CONN_MYSQLCDC_DEFAULT"])
    env.update(AIRFLOW_CONN_MYSQLCDC_DEFAULT=json.dumps({**connection, "extra": {"mask_salt": SALT}}),
               MYSQLCDC_COLUMNS=json.dumps(columns),
               MYSQLCDC_SPARK_CONF=json.dumps({"spark.eventLog.enabled": True, "spark.eventLog.dir": str(events)}))

    first = run_dag("mysqlcdc_example", env, conf={"stream_mode": "skip"})
    assert first["state"] == "success", first["output"][-3000:]
    rules = TableRules.parse(columns)
    assert differences(expected_rows(cdc_user, table, truncate_address=True),
                       sink_of(cdc_user, lake, table, rules)) is None

    # the binlog path: new and changed rows, a row deleted, columns added (one hashed, one left out)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table.quoted} (id, email, notes, address, ssn, born, score) VALUES "
                    f"(100, 'new-{MARK}@example.org', 'n {MARK}', 'Lane{MARK}', 'SSN{MARK}', '2020-01-01 00:00:00.5', 1)")
        cur.execute(f"UPDATE {table.quoted} SET email = CONCAT('changed-', email), score = score + 1 WHERE id < 10")
        cur.execute(f"DELETE FROM {table.quoted} WHERE id = 5")
        cur.execute(f"ALTER TABLE {table.quoted} ADD COLUMN phone VARCHAR(30), ADD COLUMN later_secret VARCHAR(30)")
        cur.execute(f"UPDATE {table.quoted} SET phone = CONCAT('+1-{MARK}-', id), later_secret = 'x{MARK}' "
                    "WHERE id % 2 = 0")
    conn.commit()
    state = PipelineState(str(state_dir / "mysqlcdc_example"))
    work = tmp_path / "stream"
    work.mkdir()
    (work / "stream.json").write_text(StreamJob(state=state.location, sink=SinkSpec(str(lake)), changelog=True).to_json())
    SparkSubmit(master="local[2]", work_dir=work / "spark",
                conf={"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(events)}).run(
        "binlog_stream.py", ["--job", str(work / "stream.json")], salted.to_private_file(work / "secrets" / "source.json"))
    assert differences(expected_rows(cdc_user, table, truncate_address=True),
                       sink_of(cdc_user, lake, table, rules)) is None

    assert any(events.iterdir()) and (lake / database / "people__changelog").exists()
    assert files_holding(MARK, tmp_path) == []
    assert files_holding(SALT, tmp_path) == []

    # the rule changes (address in clear now): the next run re-snapshots the table under it
    columns = {f"{database}.peop.*": {**rule, "truncate": {}}}
    env.update(MYSQLCDC_COLUMNS=json.dumps(columns))
    second = run_dag("mysqlcdc_example", env, conf={"stream_mode": "available-now"})
    assert second["state"] == "success", second["output"][-3000:]
    assert "re-snapshotting the whole table: its rule changed" in second["output"]
    assert state.latest().tables[table].table_rule == TableRules.parse(columns).for_table(table)[0]
    assert differences(expected_rows(cdc_user, table, truncate_address=False),
                       sink_of(cdc_user, lake, table, TableRules.parse(columns))) is None
