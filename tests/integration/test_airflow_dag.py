"""The example DAG end to end with dag.test(): real MariaDB under concurrent writes, real spark-submit
per chunk, real Delta tables, real Airflow (metadata DB in a temp AIRFLOW_HOME)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.cdc.source.preflight import run_preflight
from airflow_provider_mysqlcdc.cdc.source.schema import TableId
from airflow_provider_mysqlcdc.devtools.dag_runner import catch_up_stream, example_dag_env, run_dag
from airflow_provider_mysqlcdc.devtools.verify import source_rows
from airflow_provider_mysqlcdc.devtools.workload import SAMPLE_TABLES, RandomWriters, create_sample_tables
from airflow_provider_mysqlcdc.sinks.arrow_rows import arrow_to_rows
from airflow_provider_mysqlcdc.sinks.delta import DeltaSink

from .helpers import assert_same_rows

pytestmark = pytest.mark.integration

TABLES = SAMPLE_TABLES[:2]


def test_example_dag_snapshots_and_streams_exactly(mysql_server, cdc_user, database, tmp_path):
    conn = mysql_server.connect()
    tables = create_sample_tables(conn, database, rows_per_table=2500, seed=21, tables=TABLES)
    lake, state = tmp_path / "lake", tmp_path / "state"
    # the first table is named when the DAG is parsed, the second only when it is triggered (DAG params)
    env = example_dag_env(tmp_path / "airflow", cdc_user, tables[:1], sink_root=lake, state_dir=state,
                          split_rows=400, chunk_rows=1200)
    conf = {"tables": [f"`{tables[1].database}`.`{tables[1].table}`"]}
    with RandomWriters(mysql_server.admin, database, writers=2, seed=210, pause_s=0.01, tables=TABLES) as writers:
        result = run_dag("mysqlcdc_example", env, conf=conf)
        writers.stop()

    assert result["state"] == "success", result["output"][-3000:]
    assert all(ti["state"] == "success" for ti in result["tis"]), result["tis"]
    xcoms = result["xcoms"]
    groups = {tables[0]: f"{tables[0].database}__{tables[0].table}".replace(" ", "_"), tables[1]: "param_tables"}
    for table, group in groups.items():
        chunks = xcoms[f"{group}.plan[-1]"]
        mapped = [ti for ti in result["tis"] if ti["task_id"] == f"{group}.snapshot"]
        assert len(chunks) >= 2 and len(mapped) == len(chunks), (chunks, mapped)
        assert sorted(ti["label"] for ti in mapped) == sorted(c["label"] for c in chunks)
        assert all(ti["label"].startswith(f"{table} chunk ") for ti in mapped)
        for ti in mapped:
            finished = xcoms[f"{group}.snapshot[{ti['map_index']}]"]["finished_splits"]
            assert finished and all(f["high_watermark"]["position"] > 0 for f in finished)
    collected = xcoms["collect_splits[-1]"]
    assert collected["splits"] == sum(len(c["splits"]) for g in groups.values() for c in xcoms[f"{g}.plan[-1]"])
    assert sorted(collected["tables"]) == sorted(str(t) for t in tables)
    assert collected["generation"] == 1 and collected["changed_splits"] == collected["splits"]

    # Writers kept going after the DAG's stream caught up; one more available-now run from the
    # same seed and checkpoint (what the next DAG run does) must leave the sink equal to the source.
    catch_up_stream(cdc_user, collected["state"], lake, tmp_path / "spark")
    report = run_preflight(cdc_user, tables)
    for table_id, schema in report.schemas.items():
        delta_rows = {schema.key_of(r): r for r in arrow_to_rows(DeltaSink(str(lake)).read(table_id), schema)}
        assert_same_rows(table_id, source_rows(mysql_server.admin, schema), delta_rows)


def test_bad_table_fails_the_plan_task_before_any_spark_job(mysql_server, cdc_user, database, tmp_path):
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{database}`.nokey (a INT, b INT)")
    env = example_dag_env(tmp_path / "airflow", cdc_user, [TableId(database, "nokey")], sink_root=tmp_path / "lake",
                          state_dir=tmp_path / "state", split_rows=400, chunk_rows=1200)
    result = run_dag("mysqlcdc_example", env)
    assert result["state"] == "failed"
    states = {ti["task_id"]: ti["state"] for ti in result["tis"]}
    assert states[f"{database}__nokey.plan"] == "failed"
    assert states["stream"] != "success" and states["collect_splits"] != "success"
    assert not (tmp_path / "lake").exists(), "a Spark job ran although the plan failed"
    # dag.test() prints the task logs
    assert f"Table {database}.nokey has no primary key" in result["output"] and "ADD PRIMARY KEY" in result["output"]
