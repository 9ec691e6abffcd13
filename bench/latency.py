"""Commit-to-visible latency of a continuous stream (``bin/bench --only latency``).

One continuous stream (trigger every 0.2 s) follows a 100,000-row table while a writer updates its
rows at a steady rate, each UPDATE stamping the rows with the wall clock of its statement. A reader
polls the Delta table every 50 ms; the first time it sees a stamp, that stamp's latency is now minus
the stamp: from the source's commit to the row being visible to a Delta reader. The same stream
takes 1,000 and then 10,000 row changes/s, each for ``seconds``.
"""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time
from pathlib import Path

from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, stream_only_split
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.state.registry import PipelineState
from bench.customer_table import fresh_table
from bench.jobs import BASELINE_ENGINE
from devtools.spark_submit import SparkSubmit
from devtools.throwaway_server import ThrowawayMariaDB
from devtools.verify import read_delta

RATES = (1_000, 10_000)
#: each row is stamped again only after every other row was: 10 s later at the highest rate, so no
#: stamp is overwritten before it could become visible (which would leave only the newest stamps
#: of each commit to be seen, and the latency look smaller than it is)
ROWS = 100_000
#: targets per rate: (p50, p99) in seconds; None: no target
TARGETS = {1_000: (1.0, 2.0), 10_000: (None, 5.0)}


def bench_latency(server: ThrowawayMariaDB, work: Path, secrets: Path, seconds: int = 40) -> dict:
    table = TableId("bench", "latency")
    conn = fresh_table(server, table, "id INT PRIMARY KEY, t_ms BIGINT", f"SELECT seq, 0 FROM bench.seq_1_to_{ROWS}")
    lake = work / "latency-lake"
    sink = open_sink(SinkSpec(str(lake)))
    sink.prepare(load_table_schema(conn, table))
    PipelineState(str(work / "latency-state")).commit(
        {table: CapturedTable("id", [stream_only_split(table, "id", current_offset(conn))])})
    job = StreamJob(state=str(work / "latency-state"), sink=SinkSpec(str(lake)), mode="continuous", trigger_interval_s=0.2,
                    stream_engine=BASELINE_ENGINE)
    (work / "latency.json").write_text(job.to_json())
    submit = SparkSubmit(master="local[2]", work_dir=work / "spark")
    proc = submit.start("binlog_stream.py", ["--job", str(work / "latency.json")], secrets, work / "latency.log")
    uri = sink.table_uri(table)
    try:
        with conn.cursor() as cur:  # the stream is at work once it applied a first change
            cur.execute(f"UPDATE {table.quoted} SET t_ms = 1 WHERE id = 1")
        conn.commit()
        deadline = time.time() + 180
        while 1 not in read_delta(uri, columns=["t_ms"]).column(0).to_pylist():
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError("the latency stream applied nothing:\n" + (work / "latency.log").read_text()[-3000:])
            time.sleep(0.2)
        runs = [_at_rate(server, table, uri, rate, seconds) for rate in RATES]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return {"seconds": seconds, "runs": runs}


def _at_rate(server: ThrowawayMariaDB, table: TableId, uri: str, rate: int, seconds: int) -> dict:
    stop = threading.Event()
    written = [0]

    def write() -> None:
        writer = server.connect_root()
        tick = 0.05
        per_tick = max(1, int(rate * tick))
        next_at, i = time.time(), 0
        while not stop.is_set():
            first = i % ROWS + 1
            with writer.cursor() as cur:
                cur.execute(f"UPDATE {table.quoted} SET t_ms = %s WHERE id BETWEEN %s AND %s",
                            (int(time.time() * 1000), first, first + per_tick - 1))
            writer.commit()
            i += per_tick
            written[0] += per_tick
            next_at += tick
            time.sleep(max(0.0, next_at - time.time()))

    thread = threading.Thread(target=write, daemon=True)
    latencies: list[float] = []
    seen: set[int] = set()
    version = DeltaTable(uri).version()
    started = time.time()
    thread.start()
    while time.time() < started + seconds:
        handle = DeltaTable(uri)
        if handle.version() != version:
            version = handle.version()
            now = time.time() * 1000
            for stamp in read_delta(uri, version=version, columns=["t_ms"]).column(0).to_pylist():
                if stamp and stamp > started * 1000 and stamp not in seen:
                    seen.add(stamp)
                    latencies.append((now - stamp) / 1000)
        time.sleep(0.05)
    stop.set()
    thread.join()
    achieved = written[0] / (time.time() - started)
    latencies.sort()
    print(f"latency at {rate:,} changes/s (written {achieved:,.0f}/s): {len(latencies)} stamps seen, "
          f"p50 {statistics.median(latencies):.2f}s, p99 {latencies[int(0.99 * (len(latencies) - 1))]:.2f}s", flush=True)
    return {"rate": rate, "written_per_s": achieved, "samples": len(latencies),
            "p50_s": statistics.median(latencies), "p99_s": latencies[int(0.99 * (len(latencies) - 1))]}


def latency_report(result: dict) -> list[str]:
    lines = [f"## Commit-to-visible latency of a continuous stream ({result['seconds']} s at each rate)", "",
             "A writer updates a 100,000-row table at a steady rate, stamping the rows with its clock; a reader polls "
             "the Delta table every 50 ms. One continuous stream (trigger 0.2 s) takes both rates in turn.", "",
             "| row changes/s | written/s | stamps seen | p50 | p99 |", "|---:|---:|---:|---:|---:|"]
    for run in result["runs"]:
        lines.append(f"| {run['rate']:,} | {run['written_per_s']:,.0f} | {run['samples']} | {run['p50_s']:.2f} s | "
                     f"{run['p99_s']:.2f} s |")
    lines.append("")
    for run in result["runs"]:
        p50_target, p99_target = TARGETS[run["rate"]]
        if p50_target is not None:
            lines.append(f"- at {run['rate']:,}/s, p50 < {p50_target:g} s: "
                         + ("met" if run["p50_s"] < p50_target else "MISSED") + f" ({run['p50_s']:.2f} s)")
        lines.append(f"- at {run['rate']:,}/s, p99 < {p99_target:g} s: "
                     + ("met" if run["p99_s"] < p99_target else "MISSED") + f" ({run['p99_s']:.2f} s)")
    return lines + [""]
