"""Sharded tables routed into one sink table (Flink CDC's ``route``; sinks/routing.py): two source
tables with the same key values land in one Delta table, each row naming its shard; through a real
DAG run and a real stream, every shard of the sink equals its source table, and what one shard's
TRUNCATE, new column or deletes do stays in that shard's rows, and a column takes the widest of the
shards' types. Shards whose keys differ, or a new shard that does not fit the table, are refused by
the plan before anything is written; a captured shard a DDL made unfit is kept frozen."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.rules import TableRules
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.planning.planner import Planner, PlanSettings
from airflow_provider_mysqlcdc.protocol.actions import PlanAction
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.dag_runner import example_dag_env, run_dag
from devtools.snapshot import snapshot_tables
from devtools.verify import differences, read_delta, sink_rows, source_rows

from .helpers import run_stream

pytestmark = pytest.mark.integration


def shard_differences(cdc_user, lake, shards: list[TableId], route: dict) -> dict:
    """Per shard, how the sink's rows of it differ from its source table (None: equal)."""
    rules = TableRules.parse(route=route)
    conn = cdc_user.connect()
    try:
        schemas = [rules.captured(load_table_schema(conn, t), "id") for t in shards]
    finally:
        conn.close()
    return {str(s.table_id): differences(source_rows(cdc_user, s), sink_rows(lake, s)) for s in schemas}


def test_two_shards_with_the_same_keys_stream_into_one_sink_table_each_exact(mysql_server, cdc_user, database,
                                                                             tmp_path):
    first, second = TableId(database, "orders_1"), TableId(database, "orders_2")
    route = {f"{database}.orders_\\d+": f"{database}.orders"}
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {first.quoted} (id INT PRIMARY KEY, v VARCHAR(20) NOT NULL, amount DECIMAL(10,2))")
        # wider types in the second shard: the sink table takes the widest of each column
        cur.execute(f"CREATE TABLE {second.quoted} (id BIGINT PRIMARY KEY, v VARCHAR(20) NOT NULL, "
                    "amount DECIMAL(12,3), note TEXT)")
        cur.executemany(f"INSERT INTO {first.quoted} VALUES (%s, %s, %s)", [(i, f"one-{i}", i * 1.5) for i in range(40)])
        cur.executemany(f"INSERT INTO {second.quoted} VALUES (%s, %s, %s, %s)",
                        [(i, f"two-{i}", i * 2.5, f"n{i}") for i in range(40)])
    conn.commit()
    lake, state_dir = tmp_path / "lake", tmp_path / "state"
    env = example_dag_env(tmp_path / "airflow", cdc_user, [], sink_root=lake, state_dir=state_dir,
                          split_rows=15, chunk_rows=60)  # one chunk task per shard
    env.update(MYSQLCDC_EXAMPLE_TABLES=f"{database}.orders_\\d+", MYSQLCDC_ROUTE=json.dumps(route))
    run = run_dag("mysqlcdc_example", env, conf={"stream_mode": "skip"})
    assert run["state"] == "success", run["output"][-3000:]
    assert shard_differences(cdc_user, lake, [first, second], route) == {str(first): None, str(second): None}
    assert sorted(p.name for p in (lake / database).iterdir()) == ["orders"]  # no table of a shard's own

    # the binlog path: the same keys changed in both shards, a TRUNCATE and a new column in one only
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {second.quoted} SET v = CONCAT(v, '-changed') WHERE id < 10")
        cur.execute(f"DELETE FROM {second.quoted} WHERE id BETWEEN 30 AND 34")
        cur.execute(f"INSERT INTO {second.quoted} VALUES (100, 'two-new', 1, NULL)")
        cur.execute(f"UPDATE {first.quoted} SET amount = amount + 1 WHERE id < 10")
        cur.execute(f"TRUNCATE TABLE {first.quoted}")
        cur.executemany(f"INSERT INTO {first.quoted} VALUES (%s, %s, %s)", [(i, f"one-again-{i}", i) for i in (1, 2, 3)])
        cur.execute(f"ALTER TABLE {first.quoted} ADD COLUMN extra INT")
        cur.execute(f"UPDATE {first.quoted} SET extra = id * 7 WHERE id <> 2")
        cur.execute(f"DELETE FROM {second.quoted} WHERE id = 1")
    conn.commit()
    state = PipelineState(str(state_dir / "mysqlcdc_example"))
    run_stream(cdc_user, tmp_path / "stream", StreamJob(state=state.location, sink=SinkSpec(str(lake)), changelog=True))
    assert shard_differences(cdc_user, lake, [first, second], route) == {str(first): None, str(second): None}
    sink = read_delta(str(lake / database / "orders"))
    assert sink.num_rows == 3 + 40 - 5 + 1 - 1
    assert (sink.schema.field("id").type, sink.schema.field("amount").type) == (pa.int64(), pa.decimal128(12, 3))
    assert set(sink.column_names) >= {"note", "extra", "_cdc_source_database", "_cdc_source_table"}
    log = read_delta(str(lake / database / "orders__changelog")).to_pylist()
    assert {(r["op"], r["source_table"]) for r in log} >= {("t", "orders_1"), ("d", "orders_2"), ("u", "orders_2")}


def test_shards_whose_keys_differ_are_refused_by_the_plan_before_anything_is_written(mysql_server, cdc_user,
                                                                                    database, tmp_path):
    first, second = TableId(database, "parts_1"), TableId(database, "parts_2")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {first.quoted} (id INT PRIMARY KEY, v INT)")
        cur.execute(f"CREATE TABLE {second.quoted} (id INT, v INT, PRIMARY KEY (id, v))")
    conn.commit()
    state = PipelineState(str(tmp_path / "state"))
    settings = PlanSettings.parse(split_rows=10, chunk_rows=10, route={f"{database}.parts_\\d+": f"{database}.parts"})
    with pytest.raises(ConfigurationError, match=rf"cannot share it: {database}.parts_2 has key \(id, v\) and "
                                                 rf"{database}.parts_1 \(id\)"):
        Planner(cdc_user, state).plan([first, second], settings, state.latest())
    assert [p for p in (tmp_path / "state").rglob("*") if p.is_file()] == []


def captured_shards(mysql_server, cdc_user, database, tmp_path, route: dict) -> PipelineState:
    """Shards lines_1 and lines_2 (the same ids) snapshotted into one sink table and registered."""
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        for n in (1, 2):
            cur.execute(f"CREATE TABLE `{database}`.lines_{n} (id INT PRIMARY KEY, qty INT)")
            cur.executemany(f"INSERT INTO `{database}`.lines_{n} VALUES (%s, %s)", [(i, i * n) for i in range(10)])
    conn.commit()
    state = PipelineState(str(tmp_path / "state"))
    snapshot_tables(cdc_user, [TableId(database, "lines_1"), TableId(database, "lines_2")], str(tmp_path / "lake"),
                    state, rules=TableRules.parse(route=route))
    return state


def test_a_shard_whose_column_type_changed_is_kept_frozen_while_the_others_are_planned(
        mysql_server, cdc_user, database, tmp_path, caplog):
    route = {f"{database}.lines_\\d+": f"{database}.lines"}
    state = captured_shards(mysql_server, cdc_user, database, tmp_path, route)
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"ALTER TABLE `{database}`.lines_2 MODIFY qty BIGINT")
        cur.execute(f"CREATE TABLE `{database}`.lines_3 (id INT PRIMARY KEY, qty INT, added VARCHAR(5))")
    conn.commit()
    tables = [TableId(database, f"lines_{n}") for n in (1, 2, 3)]
    run = Planner(cdc_user, state).plan(tables, PlanSettings.parse(split_rows=10, chunk_rows=10, route=route),
                                        state.latest())
    assert {str(p.table_id): p.action for p in run.plans} == {
        f"{database}.lines_1": PlanAction.KEEP, f"{database}.lines_2": PlanAction.KEEP,
        f"{database}.lines_3": PlanAction.SNAPSHOT}
    assert (f"{database}.lines_2: kept as it is, frozen: it no longer fits {database}.lines, which its shards wrote "
            f"(column qty is bigint(20) (int64 in the sink) in {database}.lines_2, which the sink table's int32 cannot "
            "hold)") in "\n".join(caplog.messages)


def test_a_new_shard_that_does_not_fit_the_routed_table_is_refused_by_the_plan(mysql_server, cdc_user, database,
                                                                              tmp_path):
    route = {f"{database}.lines_\\d+": f"{database}.lines"}
    state = captured_shards(mysql_server, cdc_user, database, tmp_path, route)
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{database}`.lines_3 (id INT PRIMARY KEY, qty VARCHAR(10))")
    conn.commit()
    tables = [TableId(database, f"lines_{n}") for n in (1, 2, 3)]
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "state").rglob("*") if p.is_file()}
    with pytest.raises(ConfigurationError, match=rf"routed into {database}.lines cannot share it: column qty is "
                                                 rf"varchar\(10\) \(string in the sink\) in {database}.lines_3, which "
                                                 "the sink table's int32 cannot hold"):
        Planner(cdc_user, state).plan(tables, PlanSettings.parse(split_rows=10, chunk_rows=10, route=route),
                                      state.latest())
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "state").rglob("*") if p.is_file()} == before
