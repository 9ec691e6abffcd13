"""What one chunk task costs before it reads a row (``bin/bench --only fixed-cost``).

The same chunk of a small table (1,000 rows, one split, one partition) is read into Delta, side by
side in one run, three times each way:

- through spark-submit in local mode, end to end, as a chunk task with a ``spark`` connection runs
  it: a JVM start, Spark's start-up and planning, then the work;
- as a Spark Connect session (launch/connect_runner.py) on a server started once beforehand (a
  long-running server is the point of Connect: its start is not a task's cost), end to end, as a
  chunk task with a ``spark_connect`` connection runs it in its own process;
- as a session on the worker's shared local server (launch/local_server.py, ``local_spark =
  shared``), the first time with the server's start (a worker's first task pays it), then with the
  server up.

The difference is the fixed cost a chunk task pays; a DAG run of many small tables pays it per chunk.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.planning.splitter import SplitOptions, TableSplitter
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.launch.connect_runner import SparkConnectJobRunner
from airflow_provider_mysqlcdc.launch.local_runner import LocalSparkJobRunner
from airflow_provider_mysqlcdc.launch.local_server import LocalSparkServer, ServerKind
from airflow_provider_mysqlcdc.launch.submit import SparkJobRunner, SparkTarget
from airflow_provider_mysqlcdc.protocol.jobs import ChunkJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from devtools.spark_connect_server import SparkConnectServer
from devtools.spark_submit import SparkSubmit
from devtools.throwaway_server import ThrowawayMariaDB

ROWS = 1000
TIMES = 3
CONNECT_CONN_ID = "mysqlcdc_bench_connect"


def bench_fixed_cost(server: ThrowawayMariaDB, work: Path, secrets: Path) -> dict:
    conn = server.connect_root()
    table = TableId("bench", "small")
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{table.database}`")
        cur.execute(f"DROP TABLE IF EXISTS {table.quoted}")
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, name VARCHAR(40), amount DECIMAL(12,2))")
        cur.execute(f"INSERT INTO {table.quoted} SELECT seq, CONCAT('name ', seq), seq * 1.5 FROM `{table.database}`.seq_1_to_{ROWS}")
    conn.commit()
    schema = load_table_schema(conn, table)
    splits = TableSplitter(conn, schema, SplitOptions(split_rows=ROWS)).split()

    def job(lake: str) -> ChunkJob:
        return ChunkJob(table=str(table), splits=splits, sink=SinkSpec(str(work / lake)), partitions_per_split=1)

    submit = SparkSubmit(master="local[2]", work_dir=work / "spark")
    submitted = []
    for attempt in range(TIMES):
        (work / "small.json").write_text(job(f"lake-submit-{attempt}").to_json())
        started = time.monotonic()
        result = submit.run("snapshot_chunk.py", ["--job", str(work / "small.json")], secrets)
        submitted.append(time.monotonic() - started)
        assert result["rows"] == ROWS, result
        print(f"spark-submit chunk task: {submitted[-1]:.1f}s", flush=True)

    source = SourceConfig.from_private_file(secrets)

    def timed(runner, name: str, times: int) -> list[float]:
        """Seconds of each of ``times`` chunk tasks run by ``runner``, end to end."""
        seconds = []
        for attempt in range(times):
            started = time.monotonic()
            result = runner.run("snapshot_chunk.py", job(f"lake-{name}-{attempt}").to_json(), source=source,
                                report_folder="")
            seconds.append(time.monotonic() - started)
            assert result["rows"] == ROWS, result
            print(f"chunk task ({name}): {seconds[-1]:.1f}s", flush=True)
        return seconds

    with SparkConnectServer(work / "connect") as connect:
        connected = timed(connect_runner(connect, source), "connect", TIMES)
    server = LocalSparkServer(ServerKind("local[2]"), work / "local-spark", idle_s=60)
    quiet = SimpleNamespace(info=lambda *a: None)
    try:
        shared = timed(LocalSparkJobRunner(server, SparkJobRunner(SparkTarget("bench", "local[2]"), name="bench",
                                                                  log=quiet), log=quiet),
                       "shared", TIMES + 1)  # the first starts the server
    finally:
        server.stop()
    return {"rows": ROWS, "spark_submit_s": submitted, "connect_s": connected, "shared_s": shared}


def connect_runner(connect: SparkConnectServer, source: SourceConfig) -> SparkConnectJobRunner:
    """A task's way to run a job as a session on ``connect``: through a ``spark_connect`` connection
    (set in the environment, as Airflow reads it) naming the server and its credentials file."""
    os.environ[f"AIRFLOW_CONN_{CONNECT_CONN_ID.upper()}"] = json.dumps(connect.connection(source.password))
    return SparkConnectJobRunner(CONNECT_CONN_ID, conf={}, server_credentials_file=str(connect.credentials_file),
                                 log=SimpleNamespace(info=lambda *a: None))


def fixed_cost_report(result: dict) -> list[str]:
    submit, connect = statistics.median(result["spark_submit_s"]), statistics.median(result["connect_s"])
    first = result["connect_s"][0]
    shared_first, shared = result["shared_s"][0], statistics.median(result["shared_s"][1:])
    return [
        f"## A chunk task's fixed cost: one split of {result['rows']:,} rows into Delta, {len(result['connect_s'])} times each way",
        "",
        "| how the chunk task runs | median seconds | each run |", "|---|---:|---|",
        f"| spark-submit, local mode, end to end | {submit:.1f} | "
        + ", ".join(f"{s:.1f}" for s in result["spark_submit_s"]) + " |",
        f"| Spark Connect session on a running server, end to end | {connect:.1f} | "
        + ", ".join(f"{s:.1f}" for s in result["connect_s"]) + " |",
        f"| a session on the worker's shared local server (`local_spark = shared`), its first task (which starts the "
        f"server) | {shared_first:.1f} | {shared_first:.1f} |",
        f"| a session on the worker's shared local server, later tasks | {shared:.1f} | "
        + ", ".join(f"{s:.1f}" for s in result["shared_s"][1:]) + " |",
        "",
        f"- a chunk task costs <= 3 s on the shared local server: {'met' if shared <= 3 else 'MISSED'} (median "
        f"{shared:.1f} s once the server is up; the worker's first task pays {shared_first:.1f} s, the server's start)",
        f"- a chunk task costs <= 2 s on Spark Connect: {'met' if connect <= 2 else 'MISSED'} "
        f"(median {connect:.1f} s, first session {first:.1f} s: the server starts its Python workers; "
        f"{submit / connect:.1f}x less than spark-submit)",
        "",
    ]
