"""The first run of a DAG capturing many small tables, under a real scheduler (``bin/bench --only
many-tables``): 100 tables of 10,000 rows, one chunk each, on ``airflow standalone`` (LocalExecutor,
4 task slots), from the trigger to the end of the run (plans, chunks, collect, an available-now
stream into Delta).

Side by side in one run: the chunk tasks as Spark Connect sessions on a server started beforehand,
and, as the baseline, as spark-submits (on fewer tables, since each costs a JVM: the figure per
table is what compares). The stream goes through spark-submit both ways.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

from airflow_provider_mysqlcdc.cdc.source.schema import TableId
from devtools.airflow_standalone import AirflowStandalone
from devtools.dag_runner import example_dag_env
from devtools.spark_connect_server import SparkConnectServer
from devtools.throwaway_server import ThrowawayMariaDB

ROWS = 10_000
DAG_ID = "mysqlcdc_example"


def _tables(server: ThrowawayMariaDB, database: str, count: int) -> list[TableId]:
    conn = server.connect_root()
    tables = [TableId(database, f"t{n:03d}") for n in range(count)]
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{database}`")
        for table in tables:
            cur.execute(f"DROP TABLE IF EXISTS {table.quoted}")
            cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, name VARCHAR(40), amount DECIMAL(12,2), "
                        "updated DATETIME(6))")
            cur.execute(f"INSERT INTO {table.quoted} SELECT seq, CONCAT('name ', seq), seq * 1.5, NOW(6) "
                        f"FROM `{database}`.seq_1_to_{ROWS}")
    conn.commit()
    return tables


def _first_run(server: ThrowawayMariaDB, work: Path, tables: list[TableId], spark_conn: dict) -> float:
    """Seconds from the trigger to the end of the DAG's first run."""
    env = example_dag_env(work / "airflow", server.root_config(), tables, sink_root=work / "lake",
                          state_dir=work / "state", split_rows=ROWS, chunk_rows=ROWS)
    env.update(MYSQLCDC_SPARK_CONN_ID="bench_chunks", AIRFLOW_CONN_BENCH_CHUNKS=json.dumps(spark_conn),
               MYSQLCDC_STREAM_SPARK_CONN_ID="bench_stream",
               AIRFLOW_CONN_BENCH_STREAM=json.dumps({"conn_type": "spark", "host": "local[2]"}))
    with AirflowStandalone(env) as airflow:
        airflow.wait_for_dag(DAG_ID, timeout_s=300)
        started = time.monotonic()
        run_id = airflow.trigger(DAG_ID)
        state = airflow.wait_until(lambda: airflow.dag_run_state(DAG_ID, run_id) in ("success", "failed") and
                                   airflow.dag_run_state(DAG_ID, run_id), 3600, "the first run ends")
        seconds = time.monotonic() - started
    if state != "success":
        raise RuntimeError(f"the first run of {len(tables)} tables ended {state}; see {work / 'airflow'}")
    return seconds


def bench_many_tables(server: ThrowawayMariaDB, work: Path, tables: int = 100, baseline_tables: int = 20) -> dict:
    connect_tables = _tables(server, "many", tables)
    with SparkConnectServer(work / "connect") as connect:
        connect_s = _first_run(server, work / "connect-run", connect_tables,
                               connect.connection(server.root_config().password))
    print(f"{tables} tables, chunks on Spark Connect: {connect_s:.0f}s", flush=True)
    submit_tables = _tables(server, "few", baseline_tables)
    submit_s = _first_run(server, work / "submit-run", submit_tables, {"conn_type": "spark", "host": "local[2]"})
    print(f"{baseline_tables} tables, chunks through spark-submit: {submit_s:.0f}s", flush=True)
    return {"rows": ROWS, "connect_tables": tables, "connect_s": connect_s,
            "submit_tables": baseline_tables, "submit_s": submit_s,
            "run_at": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC"}


def many_tables_report(result: dict) -> list[str]:
    n, m = result["connect_tables"], result["submit_tables"]
    per_connect, per_submit = result["connect_s"] / n, result["submit_s"] / m
    return [
        f"## The first DAG run capturing many tables of {result['rows']:,} rows, under `airflow standalone`", "",
        f"Run {result.get('run_at', 'earlier')} with `bin/bench --only many-tables` (not part of the full run: it takes "
        "about 10 minutes; the full run repeats its last figures from docs/benchmarks.json). The example DAG with one "
        "table group per table (a plan task and one chunk each), then collect and an available-now stream through "
        "spark-submit, on `airflow standalone` with LocalExecutor and 4 task slots, from the trigger to the end of "
        "the run. The Spark Connect server was started beforehand. The baseline captures fewer tables, since each "
        "chunk costs a JVM: compare the seconds per table.", "",
        "| chunk tasks run as | tables | seconds, trigger to end of run | seconds per table |", "|---|---:|---:|---:|",
        f"| Spark Connect sessions | {n} | {result['connect_s']:.0f} | {per_connect:.1f} |",
        f"| spark-submits (baseline) | {m} | {result['submit_s']:.0f} | {per_submit:.1f} |", "",
        f"- {n} tables in <= 5 minutes: {'met' if result['connect_s'] <= 300 else 'MISSED'} "
        f"({result['connect_s']:.0f} s; {per_submit / per_connect:.1f}x less per table than spark-submit)",
        "- the biggest fixed cost left is Airflow's own, per task: about 200 task instances here, four at a time on "
        "two cores, each a Python process that parses the DAG and imports the provider (bench/notes.md)", "",
    ]
