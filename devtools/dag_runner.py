"""Runs a DAG from the DAGs folder with ``dag.test()`` in a fresh process and prints the outcome.

    python -P devtools/dag_runner.py DAG_ID [CONF_JSON]
    python -P devtools/dag_runner.py --clear DAG_ID RUN_ID TASK_ID MAP_INDEX

(AIRFLOW_HOME and the DAGs folder from the environment; ``-P``: the script's folder is not put on
``sys.path``, so the Airflow installation that runs it, a wheel's, sees no checkout.) It is test
tooling, never installed: it uses Airflow's internals (``dag.test()``'s task loop, the ORM) that a
minor release of Airflow may change. ``--clear`` clears one task instance and
everything downstream through Airflow's REST API (``POST /api/v2/dags/{dag_id}/clearTaskInstances``,
served in process by Airflow's own FastAPI app), then runs the cleared task instances the way
``dag.test()`` runs tasks, until the run finishes.

``dag.test()`` does not raise when a task fails, so the DagRun state and every task instance are
reported, with the XCom return values, as one ``DAGRUN_RESULT {json}`` line (``run_dag`` parses it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

MARKER = "DAGRUN_RESULT "
#: the interpreter of the Airflow installation that runs the DAG (default: this one)
DAG_PYTHON = "MYSQLCDC_DAG_PYTHON"
#: the example DAG's folder in the installed package (dags/ of a checkout links to it)
EXAMPLE_DAGS = Path(str(files("airflow_provider_mysqlcdc.example_dags")))


def example_dag_env(airflow_home: Path, source: Any, tables: list[Any], *, sink_root: Path, state_dir: Path,
                    split_rows: int, chunk_rows: int, python: str = sys.executable,
                    dags_folder: Path = EXAMPLE_DAGS) -> dict[str, str]:
    """Environment for running the example DAG (``example_dags/mysqlcdc_example.py``) against ``source``
    (a SourceConfig); ``python`` and ``dags_folder``: another installation of the provider (a wheel)."""
    return dict(airflow_env(airflow_home, source, python=python, dags_folder=dags_folder),
                **example_dag_settings(tables, sink_root=sink_root, state_dir=state_dir, split_rows=split_rows,
                                       chunk_rows=chunk_rows))


def airflow_env(airflow_home: Path, source: Any, *, dags_folder: Path, python: str = sys.executable) -> dict[str, str]:
    """Environment for an Airflow whose DAGs (in ``dags_folder``) read ``source`` (a SourceConfig) as
    their ``mysqlcdc_default`` connection."""
    connection = {"conn_type": "mysqlcdc", "host": source.host, "port": source.port, "login": source.user,
                  "password": source.password}
    if source.ssl:  # the connection's TLS extras, as a user sets them
        connection["extra"] = {"ssl_ca": source.ssl["ca"], "ssl_verify_identity": source.ssl.get("check_hostname", True),
                               **{f"ssl_{k}": source.ssl[k] for k in ("cert", "key") if source.ssl.get(k)}}
    return dict(os.environ, AIRFLOW_HOME=str(airflow_home), AIRFLOW__CORE__DAGS_FOLDER=str(dags_folder),
                **{DAG_PYTHON: python},
                AIRFLOW__CORE__LOAD_EXAMPLES="False", AIRFLOW_CONN_MYSQLCDC_DEFAULT=json.dumps(connection))


def example_dag_settings(tables: list[Any], *, sink_root: Path, state_dir: Path, split_rows: int,
                         chunk_rows: int) -> dict[str, str]:
    """The example DAG's settings (the environment variables it reads: its docstring lists them all)."""
    return dict(MYSQLCDC_EXAMPLE_TABLES=",".join(t.quoted for t in tables),
                MYSQLCDC_SINK_ROOT=str(sink_root), MYSQLCDC_STATE_DIR=str(state_dir),
                MYSQLCDC_SPLIT_ROWS=str(split_rows), MYSQLCDC_CHUNK_ROWS=str(chunk_rows))


def example_dag_file(dag_id: str, settings: dict[str, str]) -> str:
    """The source of a DAG file that is the example DAG (``example_dags/mysqlcdc_example.py``) as
    ``dag_id``, reading its settings (``example_dag_settings``, ``MYSQLCDC_SPARK_CONN_ID``, ...) from
    ``settings`` instead of the environment: DAGs of different settings side by side in one Airflow."""
    source = (EXAMPLE_DAGS / "mysqlcdc_example.py").read_text()
    named = 'dag_id="mysqlcdc_example"'
    if source.count(named) != 1 or "os.environ.get(" not in source or "from __future__ import annotations\n" not in source:
        raise AssertionError("the example DAG no longer names its dag_id and reads its settings as example_dag_file "
                             "expects: update example_dag_file")
    source = source.replace(named, f"dag_id={dag_id!r}").replace("os.environ.get(", "_SETTINGS.get(")
    if "os.environ" in source or "getenv" in source:
        raise AssertionError("the example DAG reads the environment in a way example_dag_file does not replace")
    future = "from __future__ import annotations\n"  # the first statement after the docstring
    return source.replace(future, f"{future}\n_SETTINGS = {settings!r}\n", 1)


def _home(env: dict[str, str]) -> str:
    """AIRFLOW_HOME, created; Airflow runs there: ``python -m`` puts its working directory first on
    ``sys.path``, which must not be a checkout of the provider when the wheel is what is tested."""
    Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    return env["AIRFLOW_HOME"]


def run_dag(dag_id: str, env: dict[str, str], timeout_s: float = 3600, conf: dict[str, Any] | None = None) -> dict[str, Any]:
    """Migrate the metadata DB of ``env``'s AIRFLOW_HOME, run the DAG once (with ``conf`` as the run's
    params); states, XComs and output."""
    migrated = Path(env["AIRFLOW_HOME"]) / ".mysqlcdc-migrated"
    if not migrated.exists():  # once per AIRFLOW_HOME
        migrate = subprocess.run([_python(env), "-m", "airflow", "db", "migrate"], env=env, cwd=_home(env),
                                 capture_output=True, text=True, timeout=600)
        if migrate.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{migrate.stderr[-3000:]}")
        migrated.touch()
    proc = subprocess.run([_python(env), "-P", str(Path(__file__).resolve()), dag_id,
                           json.dumps(conf or {})], env=env, cwd=_home(env), capture_output=True, text=True,
                          timeout=timeout_s)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"dag.test() of {dag_id} did not finish:\n{(proc.stdout + proc.stderr)[-5000:]}")
    return {**json.loads(lines[-1][len(MARKER):]), "output": proc.stdout + proc.stderr}


def clear_and_resume(dag_id: str, run_id: str, task_id: str, map_index: int, env: dict[str, str],
                     timeout_s: float = 3600) -> dict[str, Any]:
    """Clear one (mapped) task instance and its downstream through the REST API, then finish the run."""
    args = ["--clear", dag_id, run_id, task_id, str(map_index)]
    proc = subprocess.run([_python(env), "-P", str(Path(__file__).resolve()), *args],
                          env=dict(env, AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True"), cwd=_home(env),
                          capture_output=True, text=True, timeout=timeout_s)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"clearing {task_id}[{map_index}] did not finish:\n{(proc.stdout + proc.stderr)[-5000:]}")
    return {**json.loads(lines[-1][len(MARKER):]), "output": proc.stdout + proc.stderr}


def _python(env: dict[str, str]) -> str:
    return env.get(DAG_PYTHON, sys.executable)


def catch_up_stream(source: Any, state: str, sink_root: Path | str, work_dir: Path,
                    object_store: Any = None, sink_format: str = "delta") -> dict[str, Any]:
    """One more available-now stream run over the DAG's state and checkpoint, as its next run would do
    (``object_store``: the ObjectStoreCredentials of a lake and state on an object store, with an
    Iceberg catalog's properties for ``sink_format="iceberg"``)."""
    from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
    from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
    from devtools.spark_submit import SparkSubmit

    work_dir.mkdir(parents=True, exist_ok=True)
    job = StreamJob(state=state, sink=SinkSpec(str(sink_root), sink_format))
    (work_dir / "stream.json").write_text(job.to_json())
    secrets = source.to_private_file(work_dir / "secrets" / "source.json")
    if object_store is not None:
        object_store.add_to_private_file(secrets)
    return SparkSubmit(work_dir=work_dir).run("binlog_stream.py", ["--job", str(work_dir / "stream.json")], secrets)


def _load_dag(dag_id: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    if bag.import_errors:
        raise SystemExit(f"DAG import errors: {bag.import_errors}")
    return bag.get_dag(dag_id)


def _report(dag: Any, run: Any, **extra: Any) -> None:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        xcoms = {f"{x.task_id}[{x.map_index}]" + ("" if x.key == "return_value" else f":{x.key}"): x.value
                 for x in session.query(XComModel).filter(XComModel.dag_id == dag.dag_id,
                                                          XComModel.run_id == run.run_id)}
        tis = [{"task_id": ti.task_id, "map_index": ti.map_index, "state": str(ti.state), "label": ti.rendered_map_index,
                "try_number": ti.try_number} for ti in run.get_task_instances(session=session)]
    print(MARKER + json.dumps({"state": str(run.state), "run_id": run.run_id, "tis": tis, "xcoms": xcoms, **extra},
                              default=str))


def main(dag_id: str, conf: dict[str, Any]) -> None:
    dag = _load_dag(dag_id)
    run = dag.test(run_conf=conf or None)
    _report(dag, run)


def clear_main(dag_id: str, run_id: str, task_id: str, map_index: int) -> None:
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    client = TestClient(create_app())
    response = client.post(f"/api/v2/dags/{dag_id}/clearTaskInstances", json={
        "dry_run": False, "dag_run_id": run_id, "task_ids": [[task_id, map_index]], "only_failed": False,
        "include_downstream": True, "reset_dag_runs": True})
    if response.status_code != 200:
        raise SystemExit(f"clearTaskInstances answered {response.status_code}: {response.text}")
    cleared = [(ti["task_id"], ti["map_index"]) for ti in response.json()["task_instances"]]
    dag = _load_dag(dag_id)
    run = _resume(dag, run_id)
    _report(dag, run, cleared=cleared)


def mark_running(dag_id: str, run_id: str, env: dict[str, str]) -> None:
    """Put a finished DAG run back in the running state (as a backfill's run next to this one would be)."""
    code = ("import sys\n"
            "from airflow.models.dagrun import DagRun\n"
            "from airflow.utils.session import create_session\n"
            "with create_session() as session:\n"
            "    run = session.query(DagRun).filter(DagRun.dag_id == sys.argv[1], DagRun.run_id == sys.argv[2]).one()\n"
            "    run.state = 'running'\n")
    proc = subprocess.run([_python(env), "-c", code, dag_id, run_id], env=env, capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"could not mark {run_id} running:\n{proc.stderr[-3000:]}")


def _resume(dag: Any, run_id: str) -> Any:
    """Run a DAG run's runnable task instances until it finishes (the loop of ``dag.test()``)."""
    import time

    from airflow.models.dagrun import DagRun
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState

    with create_session() as session:
        run = session.query(DagRun).filter(DagRun.dag_id == dag.dag_id, DagRun.run_id == run_id).one()
        run.dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
        run.state = DagRunState.RUNNING
        session.commit()
        while run.state == DagRunState.RUNNING:
            session.expire_all()
            schedulable, _ = run.update_state(session=session)
            for ti in schedulable:
                ti.try_number += 1
                ti.state = TaskInstanceState.SCHEDULED
            session.commit()
            scheduled = [ti for ti in run.get_task_instances(session=session) if ti.state == TaskInstanceState.SCHEDULED]
            if not scheduled:
                time.sleep(1)
            for ti in scheduled:
                try:
                    _run_task(ti=ti, task=dag.task_dict[ti.task_id])
                except Exception:  # the task's state says it; the run's state is reported
                    pass
        return run


if __name__ == "__main__":
    if sys.argv[1] == "--clear":
        clear_main(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        main(sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
