"""A bad parameter fails the plan task with a clear error before anything is written."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.devtools.dag_runner import example_dag_env, run_dag
from airflow_provider_mysqlcdc.devtools.workload import SAMPLE_TABLES, create_sample_tables

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
