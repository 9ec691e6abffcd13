"""Tables by pattern (cdc/source/selection.py) in a DAG run: a pattern captures the tables it matches
on the server at each run (less the excluded, and less those a group of their own names), a table
created since is recorded by the stream and captured by the next run, and a pattern that matches
nothing fails the plan before anything is written."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.progress import RunPlanProgress
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.new_tables import pending_new_tables
from airflow_provider_mysqlcdc.state.registry import PipelineState, run_folder
from devtools.dag_runner import example_dag_env, run_dag
from devtools.verify import differences, sink_rows, source_rows

from .helpers import run_stream

pytestmark = pytest.mark.integration


def create_shards(conn, database: str, names: list[str], rows: int = 30) -> list[TableId]:
    tables = [TableId(database, name) for name in names]
    with conn.cursor() as cur:
        for number, table in enumerate(tables):
            cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, shard VARCHAR(20), v DOUBLE)")
            cur.executemany(f"INSERT INTO {table.quoted} VALUES (%s, %s, %s)",
                            [(i, table.table, i * 1.5 + number) for i in range(rows)])
    conn.commit()
    return tables


def assert_sink_equals_source(cdc_user, lake, tables: list[TableId]) -> None:
    conn = cdc_user.connect()
    try:
        for table in tables:
            schema = load_table_schema(conn, table)
            diff = differences(source_rows(cdc_user, schema), sink_rows(lake, schema))
            assert diff is None, f"{table}: {diff}"
    finally:
        conn.close()


def test_a_pattern_captures_its_matches_less_the_excluded_and_named_and_a_later_run_the_tables_created_since(
        mysql_server, cdc_user, database, tmp_path):
    conn = mysql_server.connect()
    base, order_1, order_2, excluded, other = create_shards(conn, database,
                                                             ["base", "order_1", "order_2", "order_9", "orders_old"])
    lake, state_dir = tmp_path / "lake", tmp_path / "state"
    env = example_dag_env(tmp_path / "airflow", cdc_user, [base, order_1], sink_root=lake, state_dir=state_dir,
                          split_rows=100, chunk_rows=100)
    conf = {"tables": [f"{database}.order_\\d+"], "exclude_tables": [f"{database}.order_\\d*9"], "stream_mode": "skip"}
    first = run_dag("mysqlcdc_example", env, conf=conf)
    assert first["state"] == "success", first["output"][-3000:]
    state = PipelineState(str(state_dir / "mysqlcdc_example"))
    assert set(state.latest().tables) == {base, order_1, order_2}
    assert_sink_equals_source(cdc_user, lake, [order_1, order_2])
    # order_1 has a group of its own (a DAG table): the pattern's group leaves it to that one
    planned = state.read_progress(RunPlanProgress, f"{run_folder(first['run_id'])}/plan-param_tables.plan.json")
    assert planned is not None and planned.chunk_tables == [order_2.quoted], planned

    # created while the pipeline streams: the stream records what the pattern now matches
    order_3, excluded_too = create_shards(conn, database, ["order_3", "order_19"])
    run_stream(cdc_user, tmp_path / "stream", StreamJob(state=state.location, sink=SinkSpec(str(lake)), table_patterns=conf["tables"], exclude_tables=conf["exclude_tables"]))
    assert [TableId.parse(t.table) for t in pending_new_tables(state, set(state.latest().tables))] == [order_3]

    second = run_dag("mysqlcdc_example", env, conf=conf)
    assert second["state"] == "success", second["output"][-3000:]
    assert set(state.latest().tables) == {base, order_1, order_2, order_3}
    assert_sink_equals_source(cdc_user, lake, [order_3])
    assert not {excluded, excluded_too, other} & set(state.latest().tables)
    assert pending_new_tables(state, set(state.latest().tables)) == []


def test_a_pattern_that_matches_no_table_fails_the_plan_naming_it_and_writes_nothing(
        mysql_server, cdc_user, database, tmp_path):
    [base] = create_shards(mysql_server.connect(), database, ["base"])
    state_dir = tmp_path / "state"
    env = example_dag_env(tmp_path / "airflow", cdc_user, [base], sink_root=tmp_path / "lake", state_dir=state_dir,
                          split_rows=100, chunk_rows=100)
    result = run_dag("mysqlcdc_example", env, conf={"tables": [f"{database}.ordr_\\d+"], "stream_mode": "skip"})
    plans = {ti["task_id"]: ti["state"] for ti in result["tis"] if ti["task_id"].endswith(".plan")}
    assert plans["param_tables.plan"] == "failed", plans
    assert f"Table pattern '{database}.ordr_\\d+' matches no table on the source" in result["output"]
    assert not (state_dir / "mysqlcdc_example" / "generations").exists()
