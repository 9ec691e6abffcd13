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
import time
from pathlib import Path

from airflow_provider_mysqlcdc.cdc.source.schema import TableId
from airflow_provider_mysqlcdc.spark.local_server import stop_all
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
               rows: int = ROWS) -> float:
    """Seconds from the trigger to the end of the DAG's first run; chunk tasks through ``spark_conn``
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
            started = time.monotonic()
            run_id = airflow.trigger(DAG_ID)
            state = airflow.wait_until(lambda: airflow.dag_run_state(DAG_ID, run_id) in ("success", "failed") and
                                       airflow.dag_run_state(DAG_ID, run_id), 3600, "the first run ends")
            seconds = time.monotonic() - started
    finally:
        stop_all(work / "local-spark")
    if state != "success":
        raise RuntimeError(f"the first run of {len(tables)} tables ended {state}; see {work / 'airflow'}")
    return seconds


def bench_many_tables(server: ThrowawayMariaDB, work: Path, tables: int = 100, baseline_tables: int = 20) -> dict:
    nine = _tables(server, "nine", 9, rows=12_000)
    nine_s = _first_run(server, work / "nine-run", nine, None, rows=12_000)
    print(f"9 tables of 12,000 rows on the shared local server: {nine_s:.0f}s", flush=True)
    shared_tables = _tables(server, "many", tables)
    shared_s = _first_run(server, work / "shared-run", shared_tables, None)
    print(f"{tables} tables on the shared local server: {shared_s:.0f}s", flush=True)
    submit_tables = _tables(server, "few", baseline_tables)
    submit_s = _first_run(server, work / "submit-run", submit_tables, {"conn_type": "spark", "host": "local[2]"})
    print(f"{baseline_tables} tables, chunks through spark-submit: {submit_s:.0f}s", flush=True)
    return {"rows": ROWS, "shared_tables": tables, "shared_s": shared_s, "nine_s": nine_s,
            "submit_tables": baseline_tables, "submit_s": submit_s,
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
        "- the biggest fixed cost left is Airflow's own, per task: about 200 task instances here, four at a time on "
        "two cores, each a Python process that parses the DAG and imports the provider (bench/notes.md)", "",
    ]

