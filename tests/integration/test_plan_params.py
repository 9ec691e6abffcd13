"""A bad parameter fails the plan task with a clear error before anything is written."""

from __future__ import annotations

import pytest

from devtools.dag_runner import example_dag_env, run_dag
from devtools.workload import SAMPLE_TABLES, create_sample_tables

pytestmark = pytest.mark.integration


def test_a_start_offset_beyond_the_binlog_fails_the_plan_and_writes_nothing(mysql_server, cdc_user, database,
                                                                            tmp_path):
    tables = create_sample_tables(mysql_server.connect(), database, rows_per_table=10, seed=61,
                                  tables=SAMPLE_TABLES[:1])
    state_dir = tmp_path / "state"
    env = example_dag_env(tmp_path / "airflow", cdc_user, tables, sink_root=tmp_path / "lake", state_dir=state_dir,
                          split_rows=100, chunk_rows=100)
    result = run_dag("mysqlcdc_example", env, conf={"startup_mode": "offset", "start_offset": "binlog.999999:4",
                                                   "stream_mode": "skip"})
    assert result["state"] == "failed"
    assert "binlog.999999:4" in result["output"]  # the error names the offset
    written = [str(p.relative_to(state_dir)) for p in state_dir.rglob("*") if p.is_file()] if state_dir.exists() else []
    assert written == [], written
    assert not (tmp_path / "lake").exists()


def test_an_older_runs_collect_run_again_does_not_bring_back_a_table_a_later_run_removed(
        mysql_server, cdc_user, database, tmp_path):
    from airflow_provider_mysqlcdc.state.registry import PipelineState
    from devtools.dag_runner import clear_and_resume

    kept, removed = create_sample_tables(mysql_server.connect(), database, rows_per_table=10, seed=62,
                                         tables=SAMPLE_TABLES[:2])
    state_dir = tmp_path / "state"
    env = example_dag_env(tmp_path / "airflow", cdc_user, [kept], sink_root=tmp_path / "lake", state_dir=state_dir,
                          split_rows=100, chunk_rows=100)
    first = run_dag("mysqlcdc_example", env, conf={"tables": [removed.quoted], "stream_mode": "skip"})
    assert first["state"] == "success", first["output"][-3000:]
    second = run_dag("mysqlcdc_example", env, conf={"tables": [], "stream_mode": "skip"})  # stop capturing it
    assert second["state"] == "success", second["output"][-3000:]
    state = PipelineState(str(state_dir / "mysqlcdc_example"))
    assert set(state.latest().tables) == {kept}

    again = clear_and_resume("mysqlcdc_example", first["run_id"], "collect_splits", -1, env)
    collect = next(ti for ti in again["tis"] if ti["task_id"] == "collect_splits")
    assert collect["state"] == "failed", collect
    assert "landing this run's results would undo" in again["output"]
    assert set(state.latest().tables) == {kept}  # the removed table stays removed


def test_a_resnapshot_of_a_table_the_pipeline_does_not_capture_fails_the_plan(mysql_server, cdc_user, database,
                                                                             tmp_path):
    tables = create_sample_tables(mysql_server.connect(), database, rows_per_table=10, seed=63,
                                  tables=SAMPLE_TABLES[:1])
    env = example_dag_env(tmp_path / "airflow", cdc_user, tables, sink_root=tmp_path / "lake",
                          state_dir=tmp_path / "state", split_rows=100, chunk_rows=100)
    typo = f"{database}.ordres"
    result = run_dag("mysqlcdc_example", env, conf={"resnapshot": [typo], "stream_mode": "skip"})
    assert result["state"] == "failed"
    assert f"resnapshot names `{database}`.`ordres`, which this pipeline neither captures" in result["output"]
    assert not (tmp_path / "state" / "mysqlcdc_example" / "generations").exists()
