"""Benchmarks, each side by side with its baselines in one run; results go to docs/benchmarks.md.

    bin/bench                      # 2M-row customer snapshot, 200k-row update burst, 1000 changes/s latency
    bin/bench --rows 500000        # smaller

1. snapshot of a TPC-DS customer-shaped table: our chunk job vs ``mariadb --quick`` (the wire limit)
   vs a partitioned Spark JDBC read written to Parquet; work after Spark start-up and end to end; the
   same job as a session on a warm Spark Connect server; and on a table ten times larger (rate and
   peak memory per role, ``--large-rows``);
2. stream apply rate for a large UPDATE burst: our stream job vs ``mariadb-binlog -v`` vs raw
   python-mysql-replication decoding of the same binlog range; the same on many small transactions
   over ten tables, half of them wide (bench/mixed_workload.py); then one OLTP-shaped change
   workload streamed into a 1M-row and a 10M-row sink (bench/merge_scaling.py); and batches of
   random-key changes over whole tables of 100k and 10M rows, copy-on-write beside merge-on-read
   (bench/random_merges.py);
3. commit-to-visible latency in Delta at a steady 1,000 and 10,000 row changes/s (p50, p99; bench/latency.py);
4. peak memory (RSS of the driver and the executors) of the stream for one 5M-row UPDATE, side by
   side with a transaction a fifth that size and with the memory limits switched off (bench/memory.py);
5. a chunk task's fixed cost: spark-submit vs a Spark Connect session (bench/fixed_cost.py), and an
   available-now stream task's, phase by phase (bench/stream_startup.py);
6. the first DAG run capturing 100 small tables under ``airflow standalone``, on the shared local server vs
   spark-submit (bench/many_tables.py; only with ``--only many-tables``: it takes about 15 minutes), and a
   continuous stream's sustained rate on the mixed workload and its catch-up on a backlog
   (bench/sustained.py; only with ``--only sustained``), and ``sysbench oltp_write_only`` against a
   continuous stream, merge-on-read beside copy-on-write (bench/sysbench_stream.py; only with
   ``--only sysbench``), and a continuous stream over 200 tables at 1,000 changes/s spread over all of
   them (bench/wide_stream.py; only with ``--only wide-stream``); the full run repeats the last
   figures of all four;
7. the snapshot of a table under concurrent writes, exactly-once beside at-least-once
   (``snapshot_consistency``; bench/snapshot_under_writes.py);
8. Iceberg beside Delta: the snapshot, the UPDATE burst, the mixed workload and merge scaling into
   each table format from the same data, with peak memory (bench/sink_formats.py; ``--merge-sizes``).

    bin/bench --only memory --memory-rows 5000000   # one benchmark: prints its numbers and report
    bin/bench --only sysbench --sysbench-rows 10000 --sysbench-seconds 5   # a small run of one
    bin/bench --report                              # docs/benchmarks.md again from docs/benchmarks.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.planning.splitter import SplitOptions, TableSplitter
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.launch.submit import spark_home
from airflow_provider_mysqlcdc.protocol.jobs import STREAM_ENGINES, ChunkJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from bench.binlog_baselines import mariadb_binlog_seconds, python_replication_seconds, reader_rows, reader_seconds
from bench.customer_table import create_customer_table, update_burst
from bench.fixed_cost import bench_fixed_cost, connect_runner, fixed_cost_report
from bench.jobs import SPLIT_ROWS, run_chunk_job, run_stream_job, timed
from bench.latency import bench_latency, latency_report
from bench.many_tables import bench_many_tables, many_tables_report
from bench.memory import ROLES, bench_memory, memory_report
from bench.merge_scaling import bench_merge_scaling, merge_scaling_report
from bench.mixed_workload import bench_mixed_workload, mixed_workload_report
from bench.random_merges import bench_random_merges, random_merges_report
from bench.sink_formats import bench_sink_formats, sink_formats_report
from bench.snapshot_under_writes import bench_snapshot_under_writes, snapshot_under_writes_report
from bench.stream_startup import bench_stream_startup, stream_startup_report
from bench.sustained import RATES as SUSTAINED_RATES
from bench.sustained import bench_sustained_engines, sustained_report
from bench.sysbench_stream import bench_sysbench, sysbench_report
from bench.wide_stream import bench_wide_stream, wide_stream_report
from devtools.spark_connect_server import SparkConnectServer
from devtools.throwaway_server import ThrowawayMariaDB

ROOT = Path(__file__).resolve().parent.parent
JDBC_JAR = Path("/usr/share/java/mariadb-java-client.jar")


def ensure_jdbc_jar() -> None:
    if not JDBC_JAR.exists():
        subprocess.run(["apt-get", "install", "-y", "-qq", "libmariadb-java"], check=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


# --- 1. snapshot -----------------------------------------------------------------------------------
def bench_snapshot(server: ThrowawayMariaDB, work: Path, rows: int, secrets: Path, large_rows: int = 0) -> dict:
    conn = server.connect_root()
    table = TableId("bench", "customer")
    gen_s, _ = timed(lambda: create_customer_table(conn, table, rows))
    print(f"generated {rows} rows in {gen_s:.1f}s", flush=True)
    out = {"rows": rows}

    out["mariadb_quick_s"], _ = timed(lambda: _mariadb_quick(server, table))
    print(f"mariadb --quick: {out['mariadb_quick_s']:.1f}s", flush=True)

    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, MYSQLCDC_SOURCE_FILE=str(secrets))
    jdbc = [str(spark_home() / "bin" / "spark-submit"), "--master", "local[2]", "--jars", str(JDBC_JAR),
            "--conf", "spark.ui.enabled=false", str(ROOT / "bench" / "spark_jdbc_to_parquet.py"),
            f"jdbc:mysql://127.0.0.1:{server.port}/bench?permitMysqlScheme", "customer", str(work / "parquet"), "4"]
    total, proc = timed(lambda: subprocess.run(jdbc, env=env, capture_output=True, text=True))
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    result = json.loads(proc.stdout.strip().splitlines()[-1])  # the baseline prints its figures last
    assert result["rows"] == rows, result
    out["jdbc_total_s"], out["jdbc_work_s"] = total, result["seconds"]
    print(f"Spark JDBC -> Parquet: {total:.1f}s total, {result['seconds']:.1f}s work", flush=True)

    out.update(run_chunk_job(conn, table, work, secrets, "lake"))
    print(f"chunk job: {out['ours_total_s']:.1f}s total, {out['ours_work_s']:.1f}s work", flush=True)
    out["connect_total_s"], out["connect_work_s"] = _connect_chunk_job(conn, table, work, secrets)
    print(f"chunk job on a running Spark Connect server: {out['connect_total_s']:.1f}s total, "
          f"{out['connect_work_s']:.1f}s work", flush=True)
    out["shared_total_s"], out["shared_work_s"] = _shared_chunk_job(conn, table, work, secrets)
    print(f"chunk job as a chunk task runs it by default (the shared local server): {out['shared_total_s']:.1f}s "
          f"total, {out['shared_work_s']:.1f}s work", flush=True)
    if large_rows:
        large = TableId("bench", "customer_large")
        gen_s, _ = timed(lambda: create_customer_table(conn, large, large_rows))
        print(f"generated {large_rows} rows in {gen_s:.1f}s", flush=True)
        quick_s, _ = timed(lambda: _mariadb_quick(server, large))
        out["large"] = {"rows": large_rows, "mariadb_quick_s": quick_s,
                        **run_chunk_job(conn, large, work, secrets, "lake-large")}
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE {large.quoted}")  # its gigabytes
        print(f"chunk job, {large_rows} rows: {out['large']['ours_work_s']:.1f}s work", flush=True)
    return out


def _mariadb_quick(server: ThrowawayMariaDB, table: TableId) -> None:
    cmd = ["mariadb", "--quick", "-h", "127.0.0.1", "-P", str(server.port), "-u", "root", "-e",
           f"SELECT * FROM {table.quoted}"]
    with open(os.devnull, "wb") as devnull:
        subprocess.run(cmd, stdout=devnull, check=True)


def _connect_chunk_job(conn: Any, table: TableId, work: Path, secrets: Path) -> tuple[float, float]:
    """The same chunk job as a Spark Connect session (a chunk task's way with a ``spark_connect``
    connection) on a server started beforehand and warmed by one run: its end-to-end and work seconds."""
    with SparkConnectServer(work / "connect-snapshot") as connect:
        return _warm_chunk_job(connect_runner(connect, SourceConfig.from_private_file(secrets)), conn, table, work,
                               secrets, "connect")


def _shared_chunk_job(conn: Any, table: TableId, work: Path, secrets: Path) -> tuple[float, float]:
    """The same chunk job the way a chunk task runs it by default: the snapshot operator's runner, a
    session on the worker's shared local server (started and warmed by a first run): its end-to-end
    and work seconds."""
    from airflow_provider_mysqlcdc.launch.local_server import LOCAL_SPARK_DIR_VARIABLE, stop_all
    from airflow_provider_mysqlcdc.operators.snapshot import MySqlCdcSnapshotOperator

    os.environ[LOCAL_SPARK_DIR_VARIABLE] = str(work / "local-spark")
    try:
        runner = MySqlCdcSnapshotOperator(task_id="bench", state_location=str(work / "state"), sink_root=str(work),
                                          chunk={}).spark_runner
        return _warm_chunk_job(runner, conn, table, work, secrets, "shared")
    finally:
        stop_all(work / "local-spark")
        os.environ.pop(LOCAL_SPARK_DIR_VARIABLE, None)


def _warm_chunk_job(runner: Any, conn: Any, table: TableId, work: Path, secrets: Path, name: str) -> tuple[float, float]:
    """The chunk job over the whole table run twice by ``runner`` (the first warms it up): the second
    run's end-to-end and work seconds."""
    source = SourceConfig.from_private_file(secrets)
    splits = TableSplitter(conn, load_table_schema(conn, table), SplitOptions(split_rows=SPLIT_ROWS)).split()
    for lake in (f"lake-{name}-warm-up", f"lake-{name}"):
        job = ChunkJob(table=str(table), splits=splits, sink=SinkSpec(str(work / lake)), partitions_per_split=4)
        total, result = timed(lambda: runner.run(
            "snapshot_chunk.py", job.to_json(), source=source, report_folder=""))  # noqa: B023 - called at once
    return total, result["seconds"]


def bench_written(server: ThrowawayMariaDB, work: Path, rows: int, secrets: Path) -> dict:
    """The snapshot under concurrent writes, in each snapshot_consistency (bench/snapshot_under_writes.py)."""
    return bench_snapshot_under_writes(server, rows, lambda conn, table, lake, consistency: run_chunk_job(
        conn, table, work, secrets, lake, consistency))


# --- 2. stream apply rate --------------------------------------------------------------------------
def bench_stream(server: ThrowawayMariaDB, work: Path, burst: int, secrets: Path) -> dict:
    table = TableId("bench", "burst")
    conn, start, end = update_burst(server, table, burst)
    out = {"changes": burst, "mariadb_binlog_s": mariadb_binlog_seconds(server, start, end),
           "pymysqlrepl_s": python_replication_seconds(server, start, end, burst),
           "reader_s": reader_seconds(server, [table], start, end, burst)}

    run = run_stream_job(conn, [table], "id", start, work, secrets, "burst")
    result, total = run["result"], run["total_s"]
    assert result["changes_applied"] == burst, result
    print("stream job log:\n" + "\n".join(line for line in run["log"].splitlines() if "mysqlcdc" in line
                                            or "airflow_provider" in line), flush=True)
    out["ours_total_s"], out["ours_stream_s"] = total, result["streaming_seconds"]
    print(f"stream: {burst} changes; mariadb-binlog {out['mariadb_binlog_s']:.1f}s, python-mysql-replication "
          f"{out['pymysqlrepl_s']:.1f}s, ours {result['streaming_seconds']:.1f}s streaming ({total:.1f}s total)", flush=True)
    return out


# --- report ----------------------------------------------------------------------------------------
def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    version = subprocess.run(["mariadbd", "--version"], capture_output=True, text=True).stdout.strip()
    import pyspark

    return (f"{os.cpu_count()} cores ({cpu}), {mem_gib:.0f} GiB RAM, {platform.platform()}; {version}; "
            f"Spark {pyspark.__version__} local[2]; Python {platform.python_version()}; MariaDB on the same machine")


def now() -> str:
    return f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC"


def verdict(ok: bool, detail: str) -> str:
    return ("met" if ok else "MISSED") + f" ({detail})"


def shared_snapshot_rows(snap: dict, quick: float) -> list[str]:
    """The snapshot's rows for the default path (a session on the worker's shared local server)."""
    if "shared_total_s" not in snap:  # figures of a run before it was measured
        return []
    n = snap["rows"]
    return [f"| chunk job as a chunk task runs it by default (a session on the worker's shared local server), work | "
            f"{snap['shared_work_s']:.1f} | {n / snap['shared_work_s']:,.0f} | {n / snap['shared_work_s'] / quick:.2f} |",
            f"| the same, end to end (the task's session included; the server up) | {snap['shared_total_s']:.1f} | "
            f"{n / snap['shared_total_s']:,.0f} | {n / snap['shared_total_s'] / quick:.2f} |"]


def shared_snapshot_verdict(snap: dict, quick: float) -> list[str]:
    if "shared_total_s" not in snap:
        return []
    rate = snap["rows"] / snap["shared_total_s"]
    return [f"- on the default path, end to end >= 0.5 x `mariadb --quick`: {verdict(rate >= 0.5 * quick, f'{rate / quick:.2f}x')}"]


def large_snapshot_report(snap: dict) -> list[str]:
    """The chunk job on the larger table beside the first: its rate, and peak RSS per role."""
    if "large" not in snap:
        return []
    runs = [{"rows": snap["rows"], **{k: snap[k] for k in ("ours_work_s", "ours_splits", "peak_bytes")}}, snap["large"]]
    mib = 2**20
    lines = ["", f"The chunk job as the table grows ({SPLIT_ROWS:,} rows per split, 4 partitions each; peak RSS in MiB "
             "per role of its spark-submit, sampled every 0.2 s):", "",
             "| table rows | splits | work seconds | rows/s | " + " | ".join(ROLES) + " |",
             "|---:|---:|---:|---:|" + "---:|" * len(ROLES)]
    for run in runs:
        lines.append(f"| {run['rows']:,} | {run['ours_splits']} | {run['ours_work_s']:.1f} | "
                     f"{run['rows'] / run['ours_work_s']:,.0f} | "
                     + " | ".join(f"{run['peak_bytes'][role] / mib:,.0f}" for role in ROLES) + " |")
    small, large = runs
    rate = (large["rows"] / large["ours_work_s"]) / (small["rows"] / small["ours_work_s"])

    def driver(run: dict) -> int:
        return run["peak_bytes"]["python driver"] + run["peak_bytes"]["driver JVM"]

    growth = driver(large) / driver(small)
    times = large["rows"] // small["rows"]
    versus_quick = large["mariadb_quick_s"] / large["ours_work_s"]
    return lines + [
        "",
        f"- on {large['rows']:,} rows, work >= 0.5 x `mariadb --quick` on the same table "
        f"({large['mariadb_quick_s']:.1f} s): {verdict(versus_quick >= 0.5, f'{versus_quick:.2f}x')}",
        f"- rate on {large['rows']:,} rows within 20% of the rate on {small['rows']:,}: "
        f"{verdict(rate >= 0.8, f'{rate:.2f}x')}",
        "- peak driver memory (python driver + driver JVM) does not grow with the table: "
        + verdict(growth <= 1.25, f"{times}x the rows -> {growth:.2f}x the peak"),
    ]


def report(snap: dict, stream: dict, merge: dict, latency: dict, memory: dict, fixed: dict, startup: dict,
           many: dict | None = None, mixed: dict | None = None, written: dict | None = None,
           formats: dict | None = None, sustained: dict | None = None, run_at: str | None = None,
           random_merges: dict | None = None, sysbench: dict | None = None, wide_stream: dict | None = None) -> str:
    n = snap["rows"]
    quick = n / snap["mariadb_quick_s"]
    ours_work, ours_total = n / snap["ours_work_s"], n / snap["ours_total_s"]
    jdbc_work, jdbc_total = n / snap["jdbc_work_s"], n / snap["jdbc_total_s"]
    c = stream["changes"]
    binlog_rate, library_rate = c / stream["mariadb_binlog_s"], c / stream["pymysqlrepl_s"]
    raw_rate = c / stream["reader_s"]["compiled"]
    ours_stream = c / stream["ours_stream_s"]
    lines = [
        "# Benchmarks", "",
        f"Run {run_at or now()} with `bin/bench --rows {n}` on: {machine()}.",
        "These machines are shared and noisy: compare the ratios within one run, not absolute numbers across runs.", "",
        f"## Snapshot of a {n:,}-row TPC-DS `customer`-shaped table (18 columns)", "",
        "| what | seconds | rows/s | vs `mariadb --quick` |", "|---|---:|---:|---:|",
        f"| `mariadb --quick -e 'SELECT * ...' > /dev/null` | {snap['mariadb_quick_s']:.1f} | {quick:,.0f} | 1.00 |",
        f"| Spark JDBC (4 partitions) -> Parquet, work after start-up | {snap['jdbc_work_s']:.1f} | {jdbc_work:,.0f} | {jdbc_work / quick:.2f} |",
        f"| Spark JDBC -> Parquet, end to end | {snap['jdbc_total_s']:.1f} | {jdbc_total:,.0f} | {jdbc_total / quick:.2f} |",
        f"| chunk job ({snap['ours_splits']} splits x 4 partitions) -> Delta, work after start-up | {snap['ours_work_s']:.1f} | {ours_work:,.0f} | {ours_work / quick:.2f} |",
        f"| chunk job -> Delta, end to end (one spark-submit) | {snap['ours_total_s']:.1f} | {ours_total:,.0f} | {ours_total / quick:.2f} |",
        f"| chunk job -> Delta as a session on a running Spark Connect server, work | {snap['connect_work_s']:.1f} | {n / snap['connect_work_s']:,.0f} | {n / snap['connect_work_s'] / quick:.2f} |",
        f"| chunk job on Spark Connect, end to end (the task's session included) | {snap['connect_total_s']:.1f} | {n / snap['connect_total_s']:,.0f} | {n / snap['connect_total_s'] / quick:.2f} |",
        *shared_snapshot_rows(snap, quick),
        "",
        f"- work >= 0.5 x `mariadb --quick`: {verdict(ours_work >= 0.5 * quick, f'{ours_work / quick:.2f}x')}",
        f"- work >= 2 x Spark JDBC work: {verdict(ours_work >= 2 * jdbc_work, f'{ours_work / jdbc_work:.2f}x')}",
        f"- end to end faster than Spark JDBC end to end: {verdict(ours_total > jdbc_total, f'{ours_total / jdbc_total:.2f}x')}",
        *shared_snapshot_verdict(snap, quick),
        *large_snapshot_report(snap),
        *(snapshot_under_writes_report(written) if written else []),
        "", f"## Stream apply rate: one UPDATE of {c:,} rows", "",
        "| what | seconds | row changes/s |", "|---|---:|---:|",
        f"| `mariadb-binlog -v` decoding the range | {stream['mariadb_binlog_s']:.1f} | {binlog_rate:,.0f} |",
        f"| python-mysql-replication, raw decoding | {stream['pymysqlrepl_s']:.1f} | {library_rate:,.0f} |",
        *reader_rows(c, stream["reader_s"]),
        f"| stream job, applied to Delta (streaming part) | {stream['ours_stream_s']:.1f} | {ours_stream:,.0f} |",
        f"| stream job, end to end (available-now spark-submit) | {stream['ours_total_s']:.1f} | {c / stream['ours_total_s']:,.0f} |",
        "", f"- >= 50,000 row changes/s applied: {verdict(ours_stream >= 50000, f'{ours_stream:,.0f}/s, {ours_stream / 50000:.2f} of target')}",
        f"- raw decoding >= 25% of `mariadb-binlog -v`: {verdict(raw_rate >= 0.25 * binlog_rate, f'our reader with the compiled decoder at {raw_rate / binlog_rate:.0%}')}",
        "", *(mixed_workload_report(mixed) if mixed else []),
        *merge_scaling_report(merge),
        *(random_merges_report(random_merges) if random_merges else []),
        *latency_report(latency),
        *(sustained_report(sustained) if sustained else []),
        *(sysbench_report(sysbench) if sysbench else []),
        *wide_stream_report(wide_stream),
        *memory_report(memory),
        *fixed_cost_report(fixed),
        *stream_startup_report(startup),
        *(many_tables_report(many) if many else []),
        *(sink_formats_report(formats) if formats else []),
    ]
    notes = ROOT / "bench" / "notes.md"
    return "\n".join(lines) + ("\n" + notes.read_text() if notes.exists() else "")


def _replace_section(page: Path, lines: list[str]) -> None:
    """Put a benchmark's report section (``lines``, from its ``## `` title) into the page written by
    the last full run, in place of its earlier figures or at the end: an ``--only`` run's own update."""
    if not page.exists():
        return
    text, title = page.read_text(), lines[0]
    found = re.search("^" + re.escape(title.split(":")[0]), text, re.MULTILINE)
    start = found.start() if found else -1
    if start < 0:
        notes = text.find("\n## What the figures mean")
        start = end = notes + 1 if notes >= 0 else len(text)
    else:
        following = text.find("\n## ", start + len(title))
        end = following + 1 if following >= 0 else len(text)
    page.write_text(text[:start] + "\n".join(lines) + "\n" + text[end:])


def _keep(figures: Path, key: str, result: dict) -> None:
    """Store one benchmark's figures in docs/benchmarks.json, for the full run's report to repeat."""
    stored = json.loads(figures.read_text()) if figures.exists() else {}
    figures.write_text(json.dumps({**stored, key: result}, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--large-rows", type=int, default=20_000_000,
                        help="rows of the second, larger snapshot (the rate and driver memory as the table grows; 0: none)")
    parser.add_argument("--burst", type=int, default=200_000)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--memory-rows", type=int, default=5_000_000,
                        help="rows of the one UPDATE the memory benchmark streams")
    parser.add_argument("--memory-format", default="delta", choices=["delta", "iceberg"],
                        help="the memory benchmark's sink format (--only memory prints its figures, keeps none)")
    parser.add_argument("--memory-engine", default=None, choices=list(STREAM_ENGINES),
                        help="the memory benchmark's stream engine (default: the one its earlier figures had)")
    parser.add_argument("--memory-merge-mode", default=None, choices=["merge-on-read", "copy-on-write"],
                        help="the memory benchmark's merge mode (default: the format's)")
    parser.add_argument("--written-rows", type=int, default=1_000_000,
                        help="rows of the table snapshotted under concurrent writes, in each snapshot_consistency")
    parser.add_argument("--merge-sizes", default="1000000,10000000",
                        help="the two sink sizes of the merge-scaling workload beside each other in sink-formats")
    parser.add_argument("--sustained-seconds", type=int, default=30, help="seconds at each rate of the sustained benchmark")
    parser.add_argument("--sustained-rates", default=",".join(str(r) for r in SUSTAINED_RATES),
                        help="the sustained benchmark's steps, row changes/s (the first, a trickle, gives the fixed cost)")
    parser.add_argument("--stream-engines", default=",".join(STREAM_ENGINES),
                        help="the stream engines the sustained benchmark runs, in turn (the first is the baseline)")
    parser.add_argument("--backlog", type=int, default=500_000,
                        help="row changes of the backlog the sustained benchmark's stream catches up on")
    parser.add_argument("--sysbench-tables", type=int, default=8, help="tables sysbench prepares and writes")
    parser.add_argument("--sysbench-rows", type=int, default=1_000_000, help="rows of each sysbench table")
    parser.add_argument("--sysbench-seconds", type=int, default=30, help="seconds sysbench runs at each rate")
    parser.add_argument("--sysbench-rates", default="250,500,1000,2000",
                        help="the transactions/s sysbench runs at, in turn, in each merge mode")
    parser.add_argument("--only", choices=["snapshot", "snapshot-under-writes", "stream", "merge-scaling", "random-merges",
                                           "latency", "memory", "fixed-cost",
                                           "stream-startup", "mixed", "many-tables", "sink-formats", "sustained", "wide-stream",
                                           "sysbench"],
                        help="run one benchmark and print its numbers (docs/benchmarks.md is left alone, but for "
                             "sink-formats, whose section it replaces)")
    parser.add_argument("--keep-work", action="store_true",
                        help="leave the run's work folder (its streams' logs, the sink tables) and say where")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: write docs/benchmarks.md again from the figures in docs/benchmarks.json (the "
                             "last full run's, with the --only runs it repeats), after a change to the report")
    args = parser.parse_args(argv)
    figures = Path(args.out).with_suffix(".json")
    if args.report:
        stored = json.loads(figures.read_text())
        Path(args.out).write_text(report(stored["snapshot"], stored["stream"], stored["merge_scaling"], stored["latency"],
                                         stored["memory"], stored["fixed_cost"], stored["stream_startup"],
                                         stored.get("many_tables"), stored.get("mixed"),
                                         stored.get("snapshot_under_writes"), stored.get("sink_formats"),
                                         stored.get("sustained"), run_at=stored.get("run_at"),
                                         random_merges=stored.get("random_merges"), sysbench=stored.get("sysbench"),
                                         wide_stream=stored.get("wide_stream")))
        return 0
    ensure_jdbc_jar()
    work = Path(tempfile.mkdtemp(prefix="mysqlcdc-bench-"))
    try:
        with ThrowawayMariaDB(base_dir=work / "mariadb", max_binlog_size=1024**3) as server:
            secrets = server.root_config().to_private_file(work / "secrets" / "source.json")
            merge_sizes = tuple(int(size) for size in args.merge_sizes.split(","))

            def formats_run() -> dict:
                return bench_sink_formats(server, work, secrets, rows=args.rows, burst=args.burst,
                                          merge_sizes=(merge_sizes[0], merge_sizes[-1]))

            if args.only:
                conn = server.connect_root()
                with conn.cursor() as cur:
                    cur.execute("CREATE DATABASE IF NOT EXISTS bench")
                run = {"snapshot": lambda: bench_snapshot(server, work, args.rows, secrets, args.large_rows),
                       "snapshot-under-writes": lambda: bench_written(server, work, args.written_rows, secrets),
                       "stream": lambda: bench_stream(server, work, args.burst, secrets),
                       "merge-scaling": lambda: bench_merge_scaling(server, work, secrets),
                       "random-merges": lambda: bench_random_merges(work),
                       "latency": lambda: bench_latency(server, work, secrets),
                       "memory": lambda: bench_memory(server, work, secrets, args.memory_rows,
                                                      sink_format=args.memory_format,
                                                      merge_mode=args.memory_merge_mode,
                                                      engine=args.memory_engine),
                       "fixed-cost": lambda: bench_fixed_cost(server, work, secrets),
                       "stream-startup": lambda: bench_stream_startup(server, work, secrets),
                       "mixed": lambda: bench_mixed_workload(server, work, secrets),
                       "many-tables": lambda: bench_many_tables(server, work),
                       "wide-stream": lambda: bench_wide_stream(server, work, secrets),
                       "sink-formats": formats_run,
                       "sustained": lambda: bench_sustained_engines(
                           server, work / "sustained", secrets, seconds=args.sustained_seconds, backlog=args.backlog,
                           engines=tuple(args.stream_engines.split(",")),
                           rates=tuple(int(rate) for rate in args.sustained_rates.split(","))),
                       "sysbench": lambda: bench_sysbench(
                           server, work, secrets, tables=args.sysbench_tables, rows=args.sysbench_rows,
                           seconds=args.sysbench_seconds,
                           rates=tuple(int(rate) for rate in args.sysbench_rates.split(",")))}[args.only]
                result = run()
                print(json.dumps(result, indent=2))
                if args.only == "merge-scaling":
                    print("\n".join(merge_scaling_report(result)))
                if args.only == "random-merges":
                    print("\n".join(random_merges_report(result)))
                    _keep(figures, "random_merges", result)
                    _replace_section(Path(args.out), random_merges_report(result))
                if args.only == "latency":
                    print("\n".join(latency_report(result)))
                if args.only == "memory":
                    print("\n".join(memory_report(result)))
                if args.only == "fixed-cost":
                    print("\n".join(fixed_cost_report(result)))
                if args.only == "mixed":
                    print("\n".join(mixed_workload_report(result)))
                if args.only == "stream-startup":
                    print("\n".join(stream_startup_report(result)))
                if args.only == "snapshot-under-writes":
                    print("\n".join(snapshot_under_writes_report(result)))
                    _keep(figures, "snapshot_under_writes", result)
                if args.only == "sink-formats":
                    print("\n".join(sink_formats_report(result)))
                    _keep(figures, "sink_formats", result)
                    _replace_section(Path(args.out), sink_formats_report(result))
                if args.only == "sustained":
                    print("\n".join(sustained_report(result)))
                    _keep(figures, "sustained", result)
                    _replace_section(Path(args.out), sustained_report(result))
                if args.only == "sysbench":
                    print("\n".join(sysbench_report(result)))
                    _keep(figures, "sysbench", result)
                    _replace_section(Path(args.out), sysbench_report(result))
                if args.only == "wide-stream":
                    print("\n".join(wide_stream_report(result)))
                    _keep(figures, "wide_stream", result)
                    _replace_section(Path(args.out), wide_stream_report(result))
                if args.only == "many-tables":
                    print("\n".join(many_tables_report(result)))
                    _keep(figures, "many_tables", result)
                return 0
            snap = bench_snapshot(server, work, args.rows, secrets, args.large_rows)
            written = bench_written(server, work, args.written_rows, secrets)
            stream = bench_stream(server, work, args.burst, secrets)
            mixed = bench_mixed_workload(server, work, secrets)
            merge = bench_merge_scaling(server, work, secrets)
            random_merges = bench_random_merges(work)
            latency = bench_latency(server, work, secrets)
            memory = bench_memory(server, work, secrets, args.memory_rows)
            fixed = bench_fixed_cost(server, work, secrets)
            startup = bench_stream_startup(server, work, secrets)
            formats = formats_run()
        kept = json.loads(figures.read_text()) if figures.exists() else {}
        many, sustained, sysbench, run_at = kept.get("many_tables"), kept.get("sustained"), kept.get("sysbench"), now()
        text = report(snap, stream, merge, latency, memory, fixed, startup, many, mixed, written, formats, sustained,
                      run_at, random_merges, sysbench, kept.get("wide_stream"))
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
        print(text)
        figures.write_text(json.dumps({"run_at": run_at, "snapshot": snap, "stream": stream, "merge_scaling": merge,
                                       "latency": latency, "memory": memory, "fixed_cost": fixed,
                                       "stream_startup": startup, "many_tables": many, "mixed": mixed,
                                       "snapshot_under_writes": written, "sink_formats": formats,
                                       "sustained": sustained, "random_merges": random_merges, "sysbench": sysbench,
                                       "wide_stream": kept.get("wide_stream")},
                                      indent=2))
    finally:
        if args.keep_work:
            print(f"the run's work folder is kept: {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
