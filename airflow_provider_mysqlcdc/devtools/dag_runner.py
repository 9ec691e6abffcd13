"""Runs a DAG from the DAGs folder with ``dag.test()`` in a fresh process and prints the outcome.

    python -m airflow_provider_mysqlcdc.devtools.dag_runner DAG_ID   (AIRFLOW_HOME and the DAGs folder from env)

``dag.test()`` does not raise when a task fails, so the DagRun state and every task instance are
reported, with the XCom return values, as one ``DAGRUN_RESULT {json}`` line (``run_dag`` parses it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

MARKER = "DAGRUN_RESULT "
EXAMPLE_DAGS = Path(__file__).resolve().parents[2] / "dags"


def example_dag_env(airflow_home: Path, source: Any, tables: list[Any], *, sink_root: Path, state_dir: Path,
                    split_rows: int, chunk_rows: int) -> dict[str, str]:
    """Environment for running ``dags/mysqlcdc_example.py`` against ``source`` (a SourceConfig)."""
    connection = {"conn_type": "mysqlcdc", "host": source.host, "port": source.port, "login": source.user,
                  "password": source.password}
    return dict(os.environ, AIRFLOW_HOME=str(airflow_home), AIRFLOW__CORE__DAGS_FOLDER=str(EXAMPLE_DAGS),
                AIRFLOW__CORE__LOAD_EXAMPLES="False", AIRFLOW_CONN_MYSQLCDC_DEFAULT=json.dumps(connection),
                MYSQLCDC_EXAMPLE_TABLES=",".join(f"`{t.database}`.`{t.table}`" for t in tables),
                MYSQLCDC_SINK_ROOT=str(sink_root), MYSQLCDC_STATE_DIR=str(state_dir),
                MYSQLCDC_SPLIT_ROWS=str(split_rows), MYSQLCDC_CHUNK_ROWS=str(chunk_rows))


def run_dag(dag_id: str, env: dict[str, str], timeout_s: float = 3600, conf: dict[str, Any] | None = None) -> dict[str, Any]:
    """Migrate the metadata DB of ``env``'s AIRFLOW_HOME, run the DAG once (with ``conf`` as the run's
    params); states, XComs and output."""
    airflow = str(Path(sys.executable).parent / "airflow")
    migrate = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=600)
    if migrate.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{migrate.stderr[-3000:]}")
    proc = subprocess.run([sys.executable, "-m", "airflow_provider_mysqlcdc.devtools.dag_runner", dag_id,
                           json.dumps(conf or {})], env=env, capture_output=True, text=True, timeout=timeout_s)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"dag.test() of {dag_id} did not finish:\n{(proc.stdout + proc.stderr)[-5000:]}")
    return {**json.loads(lines[-1][len(MARKER):]), "output": proc.stdout + proc.stderr}


def catch_up_stream(source: Any, state: str, sink_root: Path, work_dir: Path) -> dict[str, Any]:
    """One more available-now stream run over the DAG's state and checkpoint, as its next run would do."""
    from airflow_provider_mysqlcdc.spark.stream_job import StreamJob
    from airflow_provider_mysqlcdc.spark.submit import SparkSubmit

    work_dir.mkdir(parents=True, exist_ok=True)
    job = StreamJob(state=state, sink_root=str(sink_root))
    (work_dir / "stream.json").write_text(job.to_json())
    secrets = source.to_private_file(work_dir / "secrets" / "source.json")
    return SparkSubmit(work_dir=work_dir).run("binlog_stream.py", ["--job", str(work_dir / "stream.json")], secrets)


def main(dag_id: str, conf: dict[str, Any]) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    if bag.import_errors:
        raise SystemExit(f"DAG import errors: {bag.import_errors}")
    dag = bag.get_dag(dag_id)
    run = dag.test(run_conf=conf or None)
    with create_session() as session:
        xcoms = {f"{x.task_id}[{x.map_index}]": x.value for x in session.query(XComModel).filter(
            XComModel.dag_id == dag.dag_id, XComModel.run_id == run.run_id, XComModel.key == "return_value")}
    tis = [{"task_id": ti.task_id, "map_index": ti.map_index, "state": str(ti.state), "label": ti.rendered_map_index}
           for ti in run.get_task_instances()]
    print(MARKER + json.dumps({"state": str(run.state), "run_id": run.run_id, "tis": tis, "xcoms": xcoms}, default=str))


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
