"""Row filters (Flink CDC's transform filter; cdc/records/row_filter.py) through a real DAG run
with writes during its snapshot, then a real stream: rows enter and leave the filter by updates
(key changes among them), inserts and deletes, and the sink equals what the server itself returns
for ``SELECT ... WHERE <the same predicate>``."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random
import threading

import pytest

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.records.values import ValueNormalizer, select_list
from airflow_provider_mysqlcdc.cdc.source.rules import TableRules
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.dag_runner import example_dag_env, run_dag
from devtools.verify import differences, sink_rows

from .helpers import run_stream

pytestmark = pytest.mark.integration

PREDICATE = ("status IN ('paid', 'shipped') AND amount >= 20 AND created >= '2024-02-01' "
             "AND NOT (note LIKE 'x%' OR note IS NULL)")
STATUSES = ["open", "paid", "shipped", "void"]


def random_row(rng: random.Random, key: int) -> tuple:
    return (key, rng.choice(STATUSES), decimal.Decimal(rng.randint(0, 10000)).scaleb(-2),
            dt.datetime(2024, 1, 1) + dt.timedelta(hours=rng.randint(0, 24 * 150)),
            rng.choice([None, "x-ray", "plain", "note", "ok"]))


def mutate(conn, table: TableId, rng: random.Random, rounds: int, next_key: list[int]) -> None:
    """Random changes, most of which move rows across the filter."""
    with conn.cursor() as cur:
        for _ in range(rounds):
            key = rng.randint(0, next_key[0])
            choice = rng.random()
            if choice < 0.35:
                cur.execute(f"UPDATE {table.quoted} SET status = %s WHERE id = %s", (rng.choice(STATUSES), key))
            elif choice < 0.55:
                cur.execute(f"UPDATE {table.quoted} SET amount = %s, note = %s WHERE id = %s",
                            (decimal.Decimal(rng.randint(0, 10000)).scaleb(-2), rng.choice([None, "xx", "ok"]), key))
            elif choice < 0.65:  # a key change: the row moves, in or out of the filter too
                next_key[0] += 1
                cur.execute(f"UPDATE IGNORE {table.quoted} SET id = %s, status = %s WHERE id = %s",
                            (next_key[0], rng.choice(STATUSES), key))
            elif choice < 0.8:
                cur.execute(f"DELETE FROM {table.quoted} WHERE id = %s", (key,))
            else:
                next_key[0] += 1
                cur.execute(f"INSERT INTO {table.quoted} VALUES (%s, %s, %s, %s, %s)", random_row(rng, next_key[0]))
            conn.commit()


def server_filtered(admin, table: TableId) -> dict:
    """What the server returns for the predicate: the reference the sink must equal."""
    schema = load_table_schema(admin, table)
    normalizer = ValueNormalizer(schema)
    with admin.cursor() as cur:
        cur.execute(f"SELECT {select_list(schema.columns)} FROM {table.quoted} WHERE {PREDICATE}")
        rows = [normalizer.row_from_tuple(schema.column_names, r) for r in cur.fetchall()]
    return {schema.key_of(r): r for r in rows}


def test_the_sink_holds_exactly_the_rows_the_filter_keeps_as_rows_enter_and_leave_it(
        mysql_server, cdc_user, database, tmp_path):
    table = TableId(database, "orders")
    conn = mysql_server.connect()
    rng = random.Random(29)
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, status VARCHAR(10), amount DECIMAL(10,2), "
                    "created DATETIME, note VARCHAR(20))")
        cur.executemany(f"INSERT INTO {table.quoted} VALUES (%s, %s, %s, %s, %s)",
                        [random_row(rng, key) for key in range(400)])
    conn.commit()
    lake, state_dir = tmp_path / "lake", tmp_path / "state"
    env = example_dag_env(tmp_path / "airflow", cdc_user, [table], sink_root=lake, state_dir=state_dir,
                          split_rows=50, chunk_rows=200)
    env.update(MYSQLCDC_ROW_FILTERS=json.dumps({f"{database}.orders": PREDICATE}))

    # writes while the chunks read (from when the plan is recorded, a bounded number, paced): their
    # windows carry rows into and out of the filter
    next_key, done = [400], threading.Event()
    state = PipelineState(str(state_dir / "mysqlcdc_example"))

    def write() -> None:
        while not done.is_set() and not state.storage.list_names("progress", "runs"):  # the plan recorded
            done.wait(0.2)
        writer = mysql_server.connect()
        try:
            for _ in range(150):
                if done.is_set():
                    break
                mutate(writer, table, rng, 4, next_key)
                done.wait(0.1)  # a steady trickle, not a flood of binlog for the stream to read
        finally:
            writer.close()

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        first = run_dag("mysqlcdc_example", env, conf={"stream_mode": "skip"})
    finally:
        done.set()
        thread.join(timeout=60)
    assert first["state"] == "success", first["output"][-3000:]
    assert state.latest().tables[table].table_rule.where == PREDICATE

    mutate(conn, table, rng, 400, next_key)
    run_stream(cdc_user, tmp_path / "stream", StreamJob(state=state.location, sink=SinkSpec(str(lake))))
    schema = TableRules.parse(None, {f"{database}.orders": PREDICATE}).captured(load_table_schema(conn, table), "id")
    expected = server_filtered(conn, table)
    assert 30 < len(expected) < 250, len(expected)  # the filter keeps some rows and leaves out others
    assert differences(expected, sink_rows(lake, schema)) is None
