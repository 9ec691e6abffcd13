"""The pipeline on a Spark standalone cluster, through an Airflow ``spark`` connection in cluster
deploy mode: every driver runs on the cluster's worker, whose Python does not have the project.

Master and worker run from the pip pyspark on loopback. Driver and executors use a Python that sees
the venv's third-party packages but not this project, so the code can only come from the package
zip the task ships: the test first proves the project is not importable there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig

import pytest

from airflow_provider_mysqlcdc.cdc.source.preflight import run_preflight
from devtools.dag_runner import catch_up_stream, example_dag_env, run_dag
from devtools.spark_standalone import StandaloneCluster
from devtools.verify import source_rows
from devtools.workload import SAMPLE_TABLES, RandomWriters, create_sample_tables

from .helpers import assert_same_rows, delta_rows

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def python_without_project(tmp_path_factory):
    """A venv whose only link to ours is a plain path line: our editable-install hook never runs."""
    venv = tmp_path_factory.mktemp("exec-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    with open(f"{site}/venv-deps.pth", "w") as handle:
        handle.write(sysconfig.get_paths()["purelib"] + "\n")
    python = str(venv / "bin" / "python")
    probe = subprocess.run([python, "-c", "import pyspark, pymysql, deltalake; import airflow_provider_mysqlcdc"],
                           capture_output=True, text=True, cwd=venv)
    assert "No module named 'airflow_provider_mysqlcdc'" in probe.stderr, probe.stderr
    return python


def test_the_dag_runs_its_drivers_on_a_standalone_cluster_in_cluster_deploy_mode(
        mysql_server, cdc_user, database, tmp_path, python_without_project):
    conn = mysql_server.connect()
    [table] = create_sample_tables(conn, database, rows_per_table=2000, seed=8, tables=SAMPLE_TABLES[2:3])
    schema = run_preflight(cdc_user, [table]).schemas[table]
    lake, state_dir = tmp_path / "lake", tmp_path / "state"
    env = example_dag_env(tmp_path / "airflow", cdc_user, [table], sink_root=lake, state_dir=state_dir,
                          split_rows=800, chunk_rows=3000)
    with StandaloneCluster(tmp_path / "cluster", python=python_without_project) as cluster:
        env.update(SPARK_LOCAL_IP="127.0.0.1", MYSQLCDC_SPARK_CONN_ID="cdc_cluster",
                   AIRFLOW_CONN_CDC_CLUSTER=json.dumps({"conn_type": "spark", "host": cluster.master_url,
                                                        "extra": {"deploy-mode": "cluster"}}),
                   MYSQLCDC_SPARK_CONF=json.dumps({"spark.pyspark.python": python_without_project}))
        with RandomWriters(mysql_server.admin, database, writers=1, seed=81, pause_s=0.01, tables=SAMPLE_TABLES[2:3]):
            result = run_dag("mysqlcdc_example", env)
        drivers = sorted(p.name for p in (tmp_path / "cluster" / "work").glob("driver-*"))
    assert result["state"] == "success", result["output"][-5000:]
    # both programs ran as drivers the worker launched: the chunk job and the stream
    assert len(drivers) == 2, drivers
    group = f"{table.database}__{table.table}"
    assert result["xcoms"][f"{group}.snapshot[0]:spark_ui_url"].startswith("http://")
    assert result["xcoms"]["stream[-1]:spark_ui_url"].startswith("http://")
    assert "chunk job " in result["output"] and "binlog changes merged" in result["output"]  # its log, in the task log
    catch_up_stream(cdc_user, str(state_dir / "mysqlcdc_example"), lake, tmp_path / "catch-up")
    assert_same_rows(table, source_rows(mysql_server.admin, schema), delta_rows(str(lake), schema))
