"""The chunk and stream jobs on a Spark standalone cluster whose Python does not have the project.

Master and worker run from the pip pyspark on loopback. Driver and executors use a Python that
sees the venv's third-party packages but not this project, so the code can only come from
``--py-files``: the test first proves the project is not importable there.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig

import pytest

from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
from airflow_provider_mysqlcdc.cdc.planning.splitter import ChunkSplitter, SplitOptions
from airflow_provider_mysqlcdc.cdc.source.preflight import run_preflight
from airflow_provider_mysqlcdc.devtools.spark_standalone import StandaloneCluster
from airflow_provider_mysqlcdc.devtools.verify import source_rows
from airflow_provider_mysqlcdc.devtools.workload import SAMPLE_TABLES, create_sample_tables
from airflow_provider_mysqlcdc.state.registry import PipelineState, captured_tables
from airflow_provider_mysqlcdc.protocol.jobs import ChunkJob
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.spark.submit import SparkSubmit

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


def test_jobs_run_on_a_standalone_cluster_from_py_files(mysql_server, cdc_user, database, tmp_path,
                                                        python_without_project):
    conn = mysql_server.connect()
    tables = create_sample_tables(conn, database, rows_per_table=2000, seed=8, tables=SAMPLE_TABLES[2:3])
    report = run_preflight(cdc_user, tables)
    [table_id] = tables
    schema = report.schemas[table_id]
    splits = ChunkSplitter(cdc_user.connect(), schema, SplitOptions(chunk_size=800)).split()
    lake = str(tmp_path / "lake")
    source_file = cdc_user.to_private_file(tmp_path / "secrets" / "source.json")
    job = ChunkJob(table=str(table_id), splits=splits, sink_root=lake, partitions_per_split=2)
    (tmp_path / "job.json").write_text(job.to_json())
    rows_before = len(source_rows(mysql_server.admin, schema))
    with StandaloneCluster(tmp_path / "cluster", python=python_without_project) as cluster:
        submit = SparkSubmit(master=cluster.master_url, python=python_without_project, work_dir=tmp_path / "spark")
        result = submit.run("snapshot_chunk.py", ["--job", str(tmp_path / "job.json")], source_file)
        with conn.cursor() as cur:
            cur.execute(f"UPDATE {table_id.quoted} SET score = -1 ORDER BY `näme-key` LIMIT 50")
            cur.execute(f"DELETE FROM {table_id.quoted} ORDER BY `näme-key` DESC LIMIT 20")
        PipelineState(str(tmp_path / "state")).commit(
            captured_tables([FinishedSplit.from_dict(d) for d in result["finished_splits"]]))
        stream = StreamJob(state=str(tmp_path / "state"), sink_root=lake)
        (tmp_path / "stream.json").write_text(stream.to_json())
        submit.run("binlog_stream.py", ["--job", str(tmp_path / "stream.json")], source_file)
    assert result["rows"] == rows_before and len(result["finished_splits"]) == len(splits) > 1
    assert_same_rows(table_id, source_rows(mysql_server.admin, schema), delta_rows(lake, schema))
