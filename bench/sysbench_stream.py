"""``sysbench oltp_write_only`` against a continuous stream, merge-on-read beside copy-on-write
(issue 47 item 6; ``bin/bench --only sysbench``).

Debian's ``sysbench`` (installed with apt-get when missing) prepares ``tables`` tables of ``rows``
rows in the benchmark's throwaway MariaDB (database ``sbtest``; its credentials in a config file
only we can read, never on a command line). Then, for each sink in turn (Delta merge-on-read, Delta
copy-on-write, Iceberg merge-on-read: ``SINKS``):

- **As users have them.** The chunk job snapshots each table into a new lake (one spark-submit a
  table, with the mode's sink), then one continuous stream (spark-submit, trigger every 0.2 s,
  bench/continuous.py) follows the tables and the stamp table from the binlog's end.
- **Steady rates.** ``sysbench oltp_write_only --rate=R --time=seconds run`` at each of ``rates``
  transactions/s in turn (each transaction an index update, a non-index update, a delete and an
  insert of the same key: about 4 row changes), while the clock stamps the stamp table every 50 ms
  and a reader polls its sink table every 100 ms: commit-to-visible lag, drained after sysbench
  ends (bench/continuous.py). The row changes are counted in the binlog between the run's start
  and end (our reader over the sysbench tables), over sysbench's own seconds, not assumed from the
  transactions. CPU seconds of the stream's processes, the server, sysbench and this process (the
  clock and the reader), beside the wall seconds. The steps end at the first rate whose p99 lag is
  ``LAG_S`` or more, that sysbench does not reach (90%), or that the stream does not drain.

The result of a mode is the highest rate whose p99 lag stayed under ``LAG_S``.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import resource
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, stream_only_split
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.state.registry import PipelineState
from bench.continuous import (
    DRAIN_S,
    LAG_S,
    STAMP,
    STAMP_COLUMNS,
    STAMP_ROWS_SQL,
    Stamps,
    cpu_seconds,
    spent,
    start_stream,
    steady_batches,
    stop_stream,
)
from bench.customer_table import fresh_table
from bench.jobs import BASELINE_ENGINE, run_chunk_job
from devtools.throwaway_server import ThrowawayMariaDB

TABLES, ROWS, SECONDS = 8, 1_000_000, 30
RATES = (250, 500, 1_000, 2_000)  # transactions/s
#: issue 47's target: the highest rate with p99 lag under LAG_S reaches this many row changes/s
TARGET_CHANGES = 1_000
#: the sinks streamed into, each as (format, merge mode), named in the results by ``sink_name``
SINKS = (("delta", "merge-on-read"), ("delta", "copy-on-write"), ("iceberg", "merge-on-read"))
DATABASE = "sbtest"
#: sysbench's client threads: they mostly wait on the server; the rate is sysbench's, whatever their number
THREADS = 4
#: how long past ``--time`` sysbench may take to end before it is killed
OVERRUN_S = 60.0


def bench_sysbench(server: ThrowawayMariaDB, work: Path, secrets: Path, tables: int = TABLES, rows: int = ROWS,
                   seconds: int = SECONDS, rates: tuple[int, ...] = RATES) -> dict:
    sysbench = ensure_sysbench()
    conn = server.connect_root()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        cur.execute(f"CREATE DATABASE {DATABASE}")
    command = [sysbench, "oltp_write_only", f"--config-file={_config_file(work, SourceConfig.from_private_file(secrets))}",
               f"--tables={tables}", f"--table-size={rows}", f"--threads={THREADS}"]
    started = time.monotonic()
    _sysbench(command + ["prepare"], work / "sysbench-prepare.out", None)
    prepare_s = time.monotonic() - started
    print(f"sysbench: prepared {tables} tables of {rows:,} rows in {prepare_s:.0f} s", flush=True)
    fresh_table(server, STAMP, STAMP_COLUMNS, STAMP_ROWS_SQL)
    schemas = [load_table_schema(conn, TableId(DATABASE, f"sbtest{n}")) for n in range(1, tables + 1)]
    modes = {sink_name(sink_format, mode): _one_mode(server, work, secrets, command, schemas, sink_format, mode, seconds,
                                                     rates) for sink_format, mode in SINKS}
    return {"ran_at": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC", "tables": tables, "rows": rows,
            "seconds": seconds, "threads": THREADS, "prepare_s": prepare_s, "modes": modes}


def sink_name(sink_format: str, mode: str) -> str:
    """A sink's name in the results: its merge mode on Delta (as the first runs had them), else both."""
    return mode if sink_format == "delta" else f"{sink_format} {mode}"


def ensure_sysbench() -> str:
    """The path of ``sysbench``, installed from Debian's package when missing (needs root and apt)."""
    if not shutil.which("sysbench"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["apt-get", "install", "-y", "-qq", "sysbench"]
        if subprocess.run(install, env=env).returncode:  # a fresh machine: no package lists yet
            subprocess.run(["apt-get", "update", "-qq"], env=env, check=True)
            subprocess.run(install, env=env, check=True)
    found = shutil.which("sysbench")
    assert found, "apt-get installed sysbench, but it is not on PATH"
    return found


def _config_file(work: Path, source: SourceConfig) -> Path:
    """sysbench's connection options in a file only this user reads (``--config-file``): the password
    never appears in a process's arguments."""
    path = work / "secrets" / "sysbench.cfg"
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(f"db-driver=mysql\nmysql-host={source.host}\nmysql-port={source.port}\nmysql-user={source.user}\n"
                  f"mysql-password={source.password}\nmysql-db={DATABASE}\n")
    return path


def _sysbench(command: list[str], output: Path, timeout_s: float | None) -> str:
    """Run sysbench to its end, its output into ``output``; the output."""
    with open(output, "w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command[1:2] + command[-1:])} failed:\n{output.read_text()[-3000:]}")
    return output.read_text()


def _one_mode(server: ThrowawayMariaDB, work: Path, secrets: Path, command: list[str], schemas: list[TableSchema],
              sink_format: str, mode: str, seconds: int, rates: tuple[int, ...]) -> dict:
    """The tables snapshotted into a new lake of the sink, then one continuous stream at each rate."""
    conn = server.connect_root()
    name = f"sysbench-{sink_format}-{mode}"
    started = time.monotonic()
    for schema in schemas:
        run_chunk_job(conn, schema.table_id, work, secrets, f"{name}-lake", sink_format=sink_format, merge_mode=mode)
    snapshot_s = time.monotonic() - started
    spec = SinkSpec(str(work / f"{name}-lake"), sink_format, merge_mode=mode)
    sink = open_sink(spec)
    sink.prepare(load_table_schema(conn, STAMP))
    state = PipelineState(str(work / f"{name}-state"))
    start = current_offset(conn)  # nothing written since the snapshots
    state.commit({t: CapturedTable("id", [stream_only_split(t, "id", start)])
                  for t in [*(s.table_id for s in schemas), STAMP]})
    job = StreamJob(state=state.location, sink=spec, mode="continuous", trigger_interval_s=0.2,
                    stream_engine=BASELINE_ENGINE)
    (work / f"{name}.json").write_text(job.to_json())
    stamps = Stamps(server, sink)
    stream = start_stream(work, secrets, f"{name}.json", f"{name}.log")
    runs: list[dict[str, Any]] = []
    try:
        stamps.wait_visible(stamps.stamp(), 300, stream, "the stream's first batch")
        for rate in rates:
            run = _at_rate(server, work, command, schemas, stamps, stream, name, rate, seconds)
            run["batches"] = steady_batches((work / f"{name}.log").read_text(errors="replace"), *run.pop("window"))
            runs.append(run)
            print(f"sysbench, {sink_name(sink_format, mode)}: {rate:,} tx/s asked, {run['tx_per_s']:,.0f} tx/s done, "
                  f"{run['changes_per_s']:,.0f} row changes/s, p50 {run['p50_s']:.2f} s, p99 {run['p99_s']:.2f} s, "
                  f"drained: {run['drained']}", flush=True)
            if not _held(run) or stream.poll() is not None:
                break
    finally:
        stop_stream(stream)
    return {"snapshot_s": snapshot_s, "runs": runs}


def _at_rate(server: ThrowawayMariaDB, work: Path, command: list[str], schemas: list[TableSchema], stamps: Stamps,
             stream: Any, name: str, rate: int, seconds: int) -> dict:
    conn = server.connect_root()
    before = current_offset(conn)
    output = work / f"{name}-{rate}.out"
    cpu_before, children_before = cpu_seconds(server, stream), _reaped_children_cpu()
    started = time.time()
    with open(output, "w") as out:
        load = subprocess.Popen(command + [f"--rate={rate}", f"--time={seconds}", "run"], stdout=out,
                                stderr=subprocess.STDOUT)
        written_at, seen = stamps.during(lambda: load.poll() is None and time.time() < started + seconds + OVERRUN_S)
        if load.poll() is None:
            load.kill()
            load.wait()
            raise RuntimeError(f"sysbench at {rate} tx/s did not end {OVERRUN_S:.0f} s after its --time")
    elapsed = time.time() - started
    cpu = {**spent(cpu_before, cpu_seconds(server, stream)), "sysbench": _reaped_children_cpu() - children_before}
    after = current_offset(conn)
    lags = stamps.drain(written_at, seen)
    text = output.read_text()
    if load.returncode:
        raise RuntimeError(f"sysbench at {rate} tx/s failed:\n{text[-3000:]}")
    changes = binlog_changes(server, schemas, before, after)
    counts = sysbench_counts(text)
    return {"rate": rate, **counts, "changes": changes, "changes_per_s": changes / counts["total_s"],
            "wall_s": elapsed, "cpu_s": cpu, "window": (started, started + elapsed), **lags}


def _reaped_children_cpu() -> float:
    """CPU seconds of this process's children that ended and were waited for: sysbench's, once it ends
    (the stream, still running, is not among them)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def sysbench_counts(output: str) -> dict:
    """sysbench's own counts from its report: transactions, their rate, write queries, ignored errors,
    and the seconds it ran."""
    def number(pattern: str) -> float:
        found = re.search(pattern, output)
        if not found:
            raise RuntimeError(f"no {pattern!r} in sysbench's report:\n{output[-3000:]}")
        return float(found.group(1))

    return {"transactions": int(number(r"transactions:\s+(\d+)")),
            "tx_per_s": number(r"transactions:\s+\d+\s+\(([\d.]+) per sec"),
            "write_queries": int(number(r"write:\s+(\d+)")),
            "ignored_errors": int(number(r"ignored errors:\s+(\d+)")),
            "total_s": number(r"total time:\s+([\d.]+)s")}


def binlog_changes(server: ThrowawayMariaDB, schemas: list[TableSchema], start: BinlogOffset, end: BinlogOffset) -> int:
    """The row changes of ``schemas``' tables in the binlog from ``start`` to ``end`` (our reader)."""
    reader = BinlogReader.for_schemas(server.root_config(), schemas, start=start, end=end)
    return sum(1 for item in reader if isinstance(item, ChangeRecord))


def _held(run: dict) -> bool:
    return run["drained"] and run["p99_s"] < LAG_S and run["tx_per_s"] >= 0.9 * run["rate"]


def best_run(runs: list[dict]) -> dict | None:
    """The highest rate whose p99 lag stayed under ``LAG_S`` (drained, and reached by sysbench)."""
    return max((r for r in runs if _held(r)), key=lambda r: r["rate"], default=None)


def sysbench_report(result: dict) -> list[str]:
    modes = result["modes"]
    lines = [f"## sysbench oltp_write_only on a continuous stream: {result['tables']} tables of {result['rows']:,} "
             f"rows, {result['seconds']} s at each rate", "",
             f"Run {result.get('ran_at', '')} with `bin/bench --only sysbench` (not part of the full run; the full run "
             "repeats its last figures from docs/benchmarks.json). Debian's `sysbench oltp_write_only` "
             f"({result['threads']} client threads; a transaction updates an indexed and a non-indexed column, deletes "
             "a row and inserts it again) against the throwaway MariaDB, on the same two cores as the stream. For "
             f"each sink ({', '.join(name if ' ' in name else f'Delta {name}' for name in modes)}) the chunk job "
             "snapshots the tables first (one spark-submit a table), then one "
             "continuous stream (trigger 0.2 s) follows them while sysbench runs at steadily higher rates; a clock "
             "stamps a row every 50 ms and a reader polls its sink table every 100 ms: commit-to-visible lag. Row "
             "changes are counted in the binlog. The steps end at the first rate whose p99 lag is "
             f"{LAG_S:g} s or more, that sysbench does not reach, or that the stream does not drain within "
             f"{DRAIN_S:.0f} s.", "",
             f"sysbench's prepare took {result['prepare_s']:.0f} s; the snapshots "
             + ", ".join(f"{m['snapshot_s']:.0f} s ({mode})" for mode, m in modes.items()) + ".", "",
             "CPU seconds while sysbench ran, beside its wall seconds: the stream's processes (JVM, Python driver "
             "and workers), the MariaDB server, sysbench, the benchmark's own process (the clock and the reader "
             "polling the sink table), and every busy core of the machine, other programs included.", "",
             "| sink (Delta unless named), merge mode | tx/s asked | tx/s done | row changes/s | p50 lag | p99 lag | drained | batches | "
             "wall s | CPU s: stream | MariaDB | sysbench | clock, reader | machine |",
             "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for rate in sorted({r["rate"] for m in modes.values() for r in m["runs"]}):
        for mode, m in modes.items():
            for r in (r for r in m["runs"] if r["rate"] == rate):
                c = r["cpu_s"]
                lines.append(f"| {mode} | {rate:,} | {r['tx_per_s']:,.0f} | {r['changes_per_s']:,.0f} | "
                             f"{r['p50_s']:.2f} s | {r['p99_s']:.2f} s | {'yes' if r['drained'] else 'no'} | "
                             f"{(r.get('batches') or {}).get('batches', 0)} | {r['wall_s']:.0f} | {c['stream']:.1f} | "
                             f"{c['server']:.1f} | {c['sysbench']:.1f} | {c['bench']:.1f} | {c['machine']:.1f} |")
    lines.append("")
    for mode, m in modes.items():
        best = best_run(m["runs"])
        changes = best["changes_per_s"] if best else 0.0
        lines.append(f"- {mode}, the highest rate with p99 lag < {LAG_S:g} s >= {TARGET_CHANGES:,} row changes/s: "
                     f"{'met' if changes >= TARGET_CHANGES else 'MISSED'} ("
                     + (f"{best['rate']:,} tx/s asked, {changes:,.0f} row changes/s, p99 {best['p99_s']:.2f} s"
                        if best else "none of the rates") + ")")
    return lines + [""]
