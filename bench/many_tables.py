"""The first run of a DAG capturing many small tables, under a real scheduler (``bin/bench --only
many-tables``): 100 tables of 10,000 rows, one chunk each, on ``airflow standalone`` (LocalExecutor,
4 task slots), from the trigger to the end of the run (plans, chunks, collect, an available-now
stream into Delta).

Side by side in one run: every Spark task as a session on the worker's shared local server, which
the first of them starts (``local_spark = shared``; also on 9 tables of 12,000 rows), and, as the
baseline, chunk tasks and the stream as spark-submits (on fewer tables, since each costs a JVM: the
figure per table is what compares).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import time
from pathlib import Path

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.launch.local_server import stop_all
from bench.memory import CpuSampler, spark_role
from devtools.airflow_standalone import AirflowStandalone
from devtools.dag_runner import example_dag_env
from devtools.throwaway_server import ThrowawayMariaDB

ROWS = 10_000
DAG_ID = "mysqlcdc_example"


def _tables(server: ThrowawayMariaDB, database: str, count: int, rows: int = ROWS) -> list[TableId]:
    conn = server.connect_root()
    tables = [TableId(database, f"t{n:03d}") for n in range(count)]
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{database}`")
        for table in tables:
            cur.execute(f"DROP TABLE IF EXISTS {table.quoted}")
            cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, name VARCHAR(40), amount DECIMAL(12,2), "
                        "updated DATETIME(6))")
            cur.execute(f"INSERT INTO {table.quoted} SELECT seq, CONCAT('name ', seq), seq * 1.5, NOW(6) "
                        f"FROM `{database}`.seq_1_to_{rows}")
    conn.commit()
    return tables


def _first_run(server: ThrowawayMariaDB, work: Path, tables: list[TableId], spark_conn: dict | None,
               rows: int = ROWS) -> dict:
    """The DAG's first run: its seconds from the trigger to the end, where they went (``_tasks``) and
    who used the cores meanwhile (``CpuSampler``, by ``_role``). Chunk tasks through ``spark_conn``
    and the stream through spark-submit, or with None, every task on the worker's shared local
    server, which the first of them starts (``local_spark = shared``, no Spark connection)."""
    env = example_dag_env(work / "airflow", server.root_config(), tables, sink_root=work / "lake",
                          state_dir=work / "state", split_rows=rows, chunk_rows=rows)
    if spark_conn is None:
        env.update(AIRFLOW__MYSQLCDC__LOCAL_SPARK="shared", MYSQLCDC_LOCAL_SPARK_DIR=str(work / "local-spark"))
    else:
        env.update(MYSQLCDC_SPARK_CONN_ID="bench_chunks", AIRFLOW_CONN_BENCH_CHUNKS=json.dumps(spark_conn),
                   MYSQLCDC_STREAM_SPARK_CONN_ID="bench_stream",
                   AIRFLOW_CONN_BENCH_STREAM=json.dumps({"conn_type": "spark", "host": "local[2]"}))
    try:
        with AirflowStandalone(env) as airflow:
            airflow.wait_for_dag(DAG_ID, timeout_s=300)
            with CpuSampler(_role) as cpu:
                started = time.monotonic()
                run_id = airflow.trigger(DAG_ID)
                state = airflow.wait_until(lambda: airflow.dag_run_state(DAG_ID, run_id) in ("success", "failed")
                                           and airflow.dag_run_state(DAG_ID, run_id), 3600, "the first run ends")
                seconds = time.monotonic() - started
            tasks = _tasks(airflow.task_instances(DAG_ID, run_id), airflow.dag_runs(DAG_ID)[-1], seconds)
    finally:
        stop_all(work / "local-spark")
    if state != "success":
        raise RuntimeError(f"the first run of {len(tables)} tables ended {state}; see {work / 'airflow'}")
    return {"seconds": seconds, "tasks": tasks,
            "cpu": {role: round(used, 1) for role, used in cpu.seconds().items() if used >= 0.5}}


def _airflow_role(cmdline: str) -> str:
    """The part of ``airflow standalone`` a process of its tree plays, by the title Airflow gives it."""
    if "LocalExecutor" in cmdline or cmdline.startswith("airflow supervisor"):
        return "executor workers (task supervisors)"
    if cmdline.startswith("airflow worker --"):
        return "task runners"  # one per task try: parses the DAG file, imports the provider, runs the operator
    for key, role in (("dag-processor", "DAG processor"), ("dag_processor", "DAG processor"),
                      ("triggerer", "triggerer"), ("api_server", "API server"), ("api-server", "API server"),
                      ("scheduler", "scheduler"), ("serve-logs", "scheduler")):
        if key in cmdline:
            return role
    return "standalone and other"


def _role(pid: int, cmdline: str) -> str:
    """Who a process on the machine is, for the CPU table: a part of ``airflow standalone``, of Spark
    (the shared server's JVM and Python workers, or a spark-submit's), MariaDB, this benchmark."""
    if pid == os.getpid():
        return "the benchmark (polling Airflow's API, sampling /proc)"
    argv = cmdline.split(" ")
    if argv[0].startswith("airflow") or any(Path(arg).name == "airflow" for arg in argv[1:3]):  # a title, a script
        return f"airflow: {_airflow_role(cmdline)}"
    spark = spark_role(cmdline)
    if spark:
        return f"Spark: {spark}"
    return "MariaDB" if "mariadbd" in cmdline else "other processes"


def _tasks(instances: list[dict], run: dict, seconds: float, slots: int = 4) -> dict:
    """Where a run's seconds went, from its task instances: per kind of task (the last part of its id),
    how many, their seconds in all and the median; the seconds tasks waited in the queue for a slot
    (queued to started); how full the ``slots`` were over the run; the gaps at its start and end."""
    def when(stamp: str) -> float:
        return dt.datetime.fromisoformat(stamp).timestamp()

    kinds: dict[str, list[float]] = {}
    starts, ends, waits = [], [], 0.0
    for ti in instances:
        if not ti.get("start_date") or not ti.get("end_date"):
            continue  # skipped
        starts.append(when(ti["start_date"]))
        ends.append(when(ti["end_date"]))
        kinds.setdefault(ti["task_id"].rsplit(".", 1)[-1], []).append(ends[-1] - starts[-1])
        waits += starts[-1] - when(ti["queued_when"]) if ti.get("queued_when") else 0.0
    busy = sum(sum(durations) for durations in kinds.values())
    return {"kinds": {kind: {"count": len(d), "seconds": round(sum(d), 1), "median_s": round(statistics.median(d), 2)}
                      for kind, d in sorted(kinds.items(), key=lambda item: -sum(item[1]))},
            "queued_s": round(waits, 1), "busy_slots": round(busy / (slots * seconds), 2),
            "first_start_s": round(min(starts) - when(run["start_date"]), 1) if starts else None,
            "after_last_end_s": round(when(run["end_date"]) - max(ends), 1) if ends else None}


def bench_many_tables(server: ThrowawayMariaDB, work: Path, tables: int = 100, baseline_tables: int = 20) -> dict:
    nine = _first_run(server, work / "nine-run", _tables(server, "nine", 9, rows=12_000), None, rows=12_000)
    print(f"9 tables of 12,000 rows on the shared local server: {nine['seconds']:.0f}s", flush=True)
    shared = _first_run(server, work / "shared-run", _tables(server, "many", tables), None)
    print(f"{tables} tables on the shared local server: {shared['seconds']:.0f}s", flush=True)
    submit = _first_run(server, work / "submit-run", _tables(server, "few", baseline_tables),
                        {"conn_type": "spark", "host": "local[2]"})
    print(f"{baseline_tables} tables, chunks through spark-submit: {submit['seconds']:.0f}s", flush=True)
    return {"rows": ROWS, "shared_tables": tables, "shared_s": shared["seconds"], "nine_s": nine["seconds"],
            "submit_tables": baseline_tables, "submit_s": submit["seconds"],
            "runs": {"9 tables, shared server": nine, f"{tables} tables, shared server": shared,
                     f"{baseline_tables} tables, spark-submits": submit},
            "run_at": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC"}


def many_tables_report(result: dict) -> list[str]:
    n, m = result["shared_tables"], result["submit_tables"]
    per_shared, per_submit = result["shared_s"] / n, result["submit_s"] / m
    return [
        f"## The first DAG run capturing many tables of {result['rows']:,} rows, under `airflow standalone`", "",
        f"Run {result['run_at']} with `bin/bench --only many-tables` (not part of the full run: it takes about 15 "
        "minutes; the full run repeats its last figures from docs/benchmarks.json). The example DAG with one table "
        "group per table (a plan task and one chunk each), then collect and an available-now stream, on `airflow "
        "standalone` with LocalExecutor and 4 task slots, from the trigger to the end of the run. On the shared local "
        "server (`local_spark = shared`, no Spark connection) every Spark task is a session on the server the first "
        "of them starts (its start is in the figure); the baseline runs each chunk and the stream as a spark-submit "
        "(a JVM each) and captures fewer tables: compare the seconds per table.", "",
        "| Spark tasks run as | tables | seconds, trigger to end of run | seconds per table |", "|---|---:|---:|---:|",
        f"| sessions on the shared local server, 12,000 rows each | 9 | {result['nine_s']:.0f} | {result['nine_s'] / 9:.1f} |",
        f"| sessions on the shared local server | {n} | {result['shared_s']:.0f} | {per_shared:.1f} |",
        f"| spark-submits (baseline) | {m} | {result['submit_s']:.0f} | {per_submit:.1f} |", "",
        f"- 9 tables of 12,000 rows in <= 120 s: {'met' if result['nine_s'] <= 120 else 'MISSED'} ({result['nine_s']:.0f} s)",
        f"- {n} tables in <= 5 minutes: {'met' if result['shared_s'] <= 300 else 'MISSED'} "
        f"({result['shared_s']:.0f} s; {per_submit / per_shared:.1f}x less per table than spark-submit)",
        *(_breakdown(result["runs"]) if "runs" in result else
          ["- the biggest fixed cost left is Airflow's own, per task: about 200 task instances here, four at a time "
           "on two cores, each a Python process that parses the DAG and imports the provider (bench/notes.md)"]), "",
    ]


def _breakdown(runs: dict[str, dict]) -> list[str]:
    """Where each run's seconds and CPU went: its tasks by kind, the slots, and CPU seconds by role."""
    names = list(runs)
    kinds = list(dict.fromkeys(kind for run in runs.values() for kind in run["tasks"]["kinds"]))
    roles = sorted({role for run in runs.values() for role in run["cpu"]},
                   key=lambda role: (role == "machine", -max(run["cpu"].get(role, 0.0) for run in runs.values())))

    def task_cell(run: dict, kind: str) -> str:
        found = run["tasks"]["kinds"].get(kind)
        return f"{found['count']} / {found['seconds']:,.0f} / {found['median_s']:.1f}" if found else ""

    return [
        "", "Where the seconds went, from each run's task instances (Airflow's API: a task's start to its end, which "
        "includes the task process's start, parsing the DAG file and importing the provider) and who used the "
        "cores meanwhile (the CPU seconds of every process on the machine over the run, sampled from /proc every "
        "0.5 s, by role; what the samples miss, the last part of each process's life among it, is the last row but "
        "one):", "",
        "| task kind: tasks / task seconds in all / median task seconds | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
        *(f"| {kind} | " + " | ".join(task_cell(runs[name], kind) for name in names) + " |" for kind in kinds),
        "| slots busy over the run (4 slots) | " + " | ".join(f"{runs[n]['tasks']['busy_slots']:.0%}" for n in names) + " |",
        "| seconds tasks waited queued for a slot, in all | "
        + " | ".join(f"{runs[n]['tasks']['queued_s']:,.0f}" for n in names) + " |",
        "| seconds from the run's start to its first task's | "
        + " | ".join(f"{runs[n]['tasks']['first_start_s']}" for n in names) + " |",
        "| seconds from the last task's end to the run's end | "
        + " | ".join(f"{runs[n]['tasks']['after_last_end_s']}" for n in names) + " |", "",
        "| CPU seconds over the run | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names),
        *(f"| {role} | " + " | ".join(f"{runs[n]['cpu'].get(role, 0.0):,.1f}" for n in names) + " |" for role in roles),
        "| of the machine, in none of the above (the benchmark's own polling, other processes, the kernel's interrupts, "
        "time the host took) | " + " | ".join(f"{_unaccounted(runs[n]['cpu']):,.1f}" for n in names) + " |",
        "| the machine's two cores, seconds x 2 | " + " | ".join(f"{2 * runs[n]['seconds']:,.0f}" for n in names) + " |",
    ]


def _unaccounted(cpu: dict[str, float]) -> float:
    """The machine's busy CPU seconds that no sampled process accounts for."""
    return cpu.get("machine", 0.0) - sum(used for role, used in cpu.items() if role != "machine")
