"""A continuous stream's sustained rate on the mixed workload (``bin/bench --only sustained``).

One continuous stream (trigger every 0.2 s, spark-submit) follows the mixed workload's ten tables
(bench/mixed_workload.py: many small transactions, half of the tables wide) and a stamp table.

- **Steady rates.** Writers run the mixed workload's transactions at a steady rate for ``seconds``
  at each of ``RATES`` in turn, while a clock stamps one row of the stamp table with its wall clock
  every 50 ms (each row stamped again only after 50 s, so no stamp is overwritten before it could be
  seen). A reader polls the stamp table's Delta table every 100 ms; a stamp's lag is the time from
  its commit to the reader first seeing it. After the writers stop, the reader goes on until every
  stamp was seen (the stream drained), so the last seconds' stamps count with their whole lag. The
  result is the highest rate the writers reached whose p99 lag stayed under 5 s; a rate the writers
  could not produce on the machine's two cores (shared with the server and the stream) ends the steps.
- **Catch-up.** With the stream stopped, writers as fast as they go leave a backlog of
  ``backlog`` row changes of the same shape; the stream is started again from its checkpoint until
  the stamp written after the backlog is visible. Its catch-up rate is the backlog over its batches'
  time (from its log); the wall time from its start, start-up included, is reported beside it.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pymysql

from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.protocol.jobs import STREAM_ENGINES, STRUCTURED_STREAMING, StreamJob
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
    STREAM_ROLES,
    Stamps,
    cpu_seconds,
    spent,
    start_stream,
    steady_batches,
    stop_stream,
)
from bench.customer_table import fresh_table
from bench.mixed_workload import NARROW, WIDE, MixedTransactions, batch_times, create_tables
from devtools.throwaway_server import ThrowawayMariaDB

#: the first, a trickle: each batch then holds a few changes, so its CPU is the stream's fixed cost per batch
RATES = (100, 2_000, 5_000, 10_000, 20_000, 30_000)
#: issue 48's target: the stream's CPU seconds per batch at a trickle (100 changes/s over the ten tables)
TARGET_TRICKLE_CPU_S = 0.25
#: issue 31's target: the highest steady rate with p99 lag under LAG_S, at least TARGET_RATE
TARGET_RATE = 30_000
WRITERS = 2


def bench_sustained(server: ThrowawayMariaDB, work: Path, secrets: Path, seconds: int = 30,
                    backlog: int = 500_000, engine: str = STRUCTURED_STREAMING, rates: tuple[int, ...] = RATES) -> dict:
    """The steps and the catch-up of one stream engine (``StreamJob.stream_engine``)."""
    conn = create_tables(server)
    fresh_table(server, STAMP, STAMP_COLUMNS, STAMP_ROWS_SQL)
    tables = [*NARROW, *WIDE, STAMP]
    lake, state = work / "sustained-lake", PipelineState(str(work / "sustained-state"))
    sink = open_sink(SinkSpec(str(lake)))
    for table in tables:
        sink.prepare(load_table_schema(conn, table))
    state.commit({t: CapturedTable("id", [stream_only_split(t, "id", current_offset(conn))]) for t in tables})
    job = StreamJob(state=state.location, sink=SinkSpec(str(lake)), mode="continuous", trigger_interval_s=0.2,
                    stream_engine=engine)
    (work / "sustained.json").write_text(job.to_json())
    stamps = Stamps(server, sink)
    writers = [MixedTransactions(random.Random(100 + n), stride=WRITERS, offset=n) for n in range(WRITERS)]
    stream = start_stream(work, secrets, "sustained.json", "sustained.log")
    runs: list[dict[str, Any]] = []
    try:
        stamps.wait_visible(stamps.stamp(), 300, stream, "the stream's first batch")
        for rate in rates:
            run = _at_rate(server, writers, stamps, rate, seconds, stream)
            # the stream's batches while the writers ran (the log's lines reach the file as they are written)
            run["batches"] = steady_batches((work / "sustained.log").read_text(errors="replace"), *run.pop("window"))
            runs.append(run)
            print(f"sustained: {rate:,}/s asked, {run['written_per_s']:,.0f}/s written, p50 {run['p50_s']:.2f} s, "
                  f"p99 {run['p99_s']:.2f} s, drained: {run['drained']}", flush=True)
            if not run["drained"] or run["p99_s"] >= LAG_S or run["written_per_s"] < 0.9 * rate or stream.poll() is not None:
                break
    finally:
        stop_stream(stream)
    catch_up = _catch_up(server, work, secrets, writers, stamps, backlog)
    return {"ran_at": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC", "seconds": seconds, "writers": WRITERS,
            "engine": engine, "runs": runs, "catch_up": catch_up}


def _write(server: ThrowawayMariaDB, workload: MixedTransactions, per_s: float, stop: threading.Event,
           written: list[int], index: int, limit: int | None = None) -> None:
    """One writer: ``workload``'s transactions at ``per_s`` row changes/s (0: as fast as it goes),
    until ``stop`` or ``limit`` changes; its count in ``written[index]``."""
    conn = server.connect_root()
    started = time.monotonic()
    with conn.cursor() as cur:
        while not stop.is_set() and (limit is None or written[index] < limit):
            try:
                written[index] += workload.run_one(conn, cur)
            except pymysql.err.OperationalError as exc:  # two writers' rows in a deadlock: that one is undone
                if exc.args[0] not in (1205, 1213):
                    raise
                conn.rollback()
            if per_s:
                time.sleep(max(0.0, started + written[index] / per_s - time.monotonic()))
    conn.close()


def _writers(server: ThrowawayMariaDB, writers: list[MixedTransactions], per_s: float, stop: threading.Event,
             limit: int | None = None) -> tuple[list[threading.Thread], list[int]]:
    written = [0] * len(writers)
    threads = [threading.Thread(target=_write, args=(server, w, per_s / len(writers), stop, written, n,
                                                     None if limit is None else limit // len(writers)), daemon=True)
               for n, w in enumerate(writers)]
    for thread in threads:
        thread.start()
    return threads, written


def _at_rate(server: ThrowawayMariaDB, writers: list[MixedTransactions], stamps: Stamps, rate: int,
             seconds: int, stream: Any) -> dict:
    stop = threading.Event()
    cpu_before = cpu_seconds(server, stream)
    started = time.time()
    threads, written = _writers(server, writers, rate, stop)
    written_at, seen = stamps.during(lambda: time.time() < started + seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.time() - started
    cores = {role: cpu / elapsed for role, cpu in spent(cpu_before, cpu_seconds(server, stream)).items()}
    lags = stamps.drain(written_at, seen)  # the stamps of the last seconds are seen as the stream drains
    return {"rate": rate, "written_per_s": sum(written) / elapsed, "window": (started, started + elapsed),
            "wall_s": elapsed, "cores": cores, **lags}


def _catch_up(server: ThrowawayMariaDB, work: Path, secrets: Path, writers: list[MixedTransactions],
              stamps: Stamps, backlog: int) -> dict:
    """The backlog written with the stream stopped, then the restarted stream's catch-up: wall time
    from its start (the JVM's and the query's start-up in it), and its batches' own time, from its log."""
    stop = threading.Event()
    started = time.monotonic()
    threads, written = _writers(server, writers, 0, stop, limit=backlog)
    for thread in threads:
        thread.join()
    write_s = time.monotonic() - started
    last = stamps.stamp()
    print(f"sustained: a backlog of {sum(written):,} row changes written in {write_s:.0f} s", flush=True)
    started = time.monotonic()
    stream = start_stream(work, secrets, "sustained.json", "sustained-catch-up.log")
    log_file = work / "sustained-catch-up.log"
    try:
        stamps.wait_visible(last, 3600, stream, "the backlog's catch-up")
        wall_s = time.monotonic() - started
        deadline = time.monotonic() + 60  # the last batch's log line comes just after its commit
        while batch_times(log_file.read_text(errors="replace"))["changes"] < sum(written):
            if time.monotonic() > deadline:
                raise RuntimeError("the catch-up stream did not log the backlog's batches:\n"
                                   + log_file.read_text(errors="replace")[-5000:])
            time.sleep(0.2)
    finally:
        stop_stream(stream)
    batches = batch_times(log_file.read_text(errors="replace"))
    # the batches' own count: a step the stream had not drained leaves changes for it too
    return {"written": sum(written), "write_s": write_s, "wall_s": wall_s, **batches,
            "rate": batches["changes"] / batches["applied_s"] if batches["applied_s"] else 0.0}


def bench_sustained_engines(server: ThrowawayMariaDB, work: Path, secrets: Path, *, seconds: int, backlog: int,
                            engines: tuple[str, ...] = STREAM_ENGINES, rates: tuple[int, ...] = RATES) -> dict:
    """The steps and the catch-up of each stream engine in turn, the first the baseline."""
    results = {}
    for engine in engines:
        (work / engine).mkdir(parents=True, exist_ok=True)
        results[engine] = bench_sustained(server, work / engine, secrets, seconds=seconds, backlog=backlog,
                                          engine=engine, rates=rates)
    return {"ran_at": next(iter(results.values()))["ran_at"] if results else "", "engines": results}


def sustained_report(result: dict) -> list[str]:
    """The sustained benchmark's section: one engine's, or (``engines``) each engine's side by side."""
    if "engines" not in result:
        return _engine_report(result)
    lines = ["## A continuous stream's sustained rate on the mixed workload, by stream engine", "",
             f"Run {result['ran_at']} with `bin/bench --only sustained`: the same steps and catch-up for each stream "
             "engine in turn (`stream_engine`, docs/spark-jobs.md), Structured Streaming first as the baseline.", ""]
    for engine, one in result["engines"].items():
        section = _engine_report(one)
        lines += [f"### {engine}", "", *section[2:]]
    return lines


def _engine_report(result: dict) -> list[str]:
    runs, catch = result["runs"], result["catch_up"]
    held = [r for r in runs if r["drained"] and r["p99_s"] < LAG_S and r["written_per_s"] >= 0.9 * r["rate"]]
    best = max((r["rate"] for r in held), default=0)
    lines = [f"## A continuous stream's sustained rate on the mixed workload ({result['seconds']} s at each rate)", "",
             f"Run {result.get('ran_at', '')} with `bin/bench --only sustained` (not part of the full run: it takes about "
             "10 minutes; the full run repeats its last figures from docs/benchmarks.json). "
             f"The mixed workload's transactions (ten tables, half of them wide) from {result['writers']} writers at "
             "steadily higher rates against one continuous stream (trigger 0.2 s); a clock stamps a row every 50 ms "
             "and a reader polls the Delta table every 100 ms: commit-to-visible lag. The steps end at the first "
             f"rate whose p99 lag is {LAG_S:g} s or more, that the writers cannot produce, or that the stream does "
             f"not drain within {DRAIN_S:.0f} s.", "",
             "Each micro-batch's time, from the stream's log while the writers ran: its batches, their changes, "
             "and per batch the seconds reading the binlog (the executors' decoding tasks), merging into the ten "
             "Delta tables, and outside the batch function (Spark's trigger, the source's offsets, planning, the "
             "checkpoint's commits).", "",
             "| rate asked | written/s | stamps | p50 lag | p99 lag | drained | batches | changes a batch | reading | "
             "merging | outside |", "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in runs:
        b = r.get("batches") or {}
        n = b.get("batches") or 0
        per = (f"{n} | {b['changes'] / n:,.0f} | {b['reading_s'] / n:.2f} s | {b['merging_s'] / n:.2f} s | "
               f"{b['outside_s'] / n:.2f} s") if n else "| | | |"
        lines.append(f"| {r['rate']:,} | {r['written_per_s']:,.0f} | {r['stamps']} | {r['p50_s']:.2f} s | "
                     f"{r['p99_s']:.2f} s | {'yes' if r['drained'] else 'no'} | {per} |")
    if any("cores" in r for r in runs):
        lines += ["", "Who used the machine's cores while the writers ran (CPU seconds over the step's seconds): the "
                  "MariaDB server, the benchmark's process (the writers' transactions, the clock, the reader "
                  "polling the Delta table), the stream's processes (JVM, driver, Python workers), and every "
                  "busy core of the machine, other programs included.", "",
                  "| rate asked | server | writers, clock, reader | stream | of it: JVM | Python driver | Python "
                  "workers | machine |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in runs:
            if "cores" in r:
                c = r["cores"]
                roles = " | ".join(f"{c.get(f'stream {role}', 0.0):.2f}" for role in STREAM_ROLES[:3])
                lines.append(f"| {r['rate']:,} | {c['server']:.2f} | {c['bench']:.2f} | {c['stream']:.2f} | {roles} | "
                             f"{c['machine']:.2f} |")
    lines += ["", f"Catch-up: a backlog of {catch.get('written', catch['changes']):,} row changes (written in {catch['write_s']:.0f} s with the "
              f"stream stopped); the stream, started again from its checkpoint, applied it in {catch['batches']} batches "
              f"taking {catch['applied_s']:.1f} s ({catch['reading_s']:.1f} s reading the binlog, {catch['merging_s']:.1f} s "
              f"merging): **{catch['rate']:,.0f} row changes/s**; {catch['wall_s']:.1f} s from its start, the JVM's and "
              "the query's start-up included.", "",
              f"- highest steady rate with p99 lag < {LAG_S:g} s >= {TARGET_RATE:,}/s: "
              f"{'met' if best >= TARGET_RATE else 'MISSED'} ({best:,}/s"
              + ("" if best else ": none of the rates") + ")"]
    trickle = next((r for r in runs if r["rate"] == min(x["rate"] for x in runs) and (r.get("batches") or {}).get("batches")), None)
    if trickle and "wall_s" in trickle:
        n, c = trickle["batches"]["batches"], trickle["cores"]
        per_batch = {role: c.get(role, 0.0) * trickle["wall_s"] / n for role in ("stream", *(f"stream {r}" for r in STREAM_ROLES[:3]))}
        lines.append(f"- the stream's fixed cost per batch at a trickle ({trickle['rate']:,} changes/s over the ten tables, "
                     f"{n} batches of {trickle['batches']['changes'] / n:,.0f} changes): "
                     f"**{per_batch['stream']:.2f} CPU-s a batch** (JVM {per_batch['stream ' + STREAM_ROLES[0]]:.2f}, "
                     f"Python driver {per_batch['stream ' + STREAM_ROLES[1]]:.2f}, Python workers "
                     f"{per_batch['stream ' + STREAM_ROLES[2]]:.2f}) against <= {TARGET_TRICKLE_CPU_S:g}: "
                     f"{'met' if per_batch['stream'] <= TARGET_TRICKLE_CPU_S else 'MISSED'}")
    cores = runs[-1].get("cores") if runs else None
    if cores:
        lines.append(f"- the load's share of the machine at {runs[-1]['rate']:,}/s: the server and the benchmark's "
                     f"process (writers, clock, reader) {cores['server'] + cores['bench']:.2f} cores, the stream "
                     f"{cores['stream']:.2f}, the machine {cores['machine']:.2f} of {os.cpu_count()}: what the stream "
                     "sustains here is bounded by the CPU the load leaves it (bench/notes.md)")
    last = runs[-1].get("batches") if runs else None
    if best and last and last["batches"] and last["changes"] and catch["changes"]:
        n, c = last["batches"], last["changes"]
        lines.append(
            f"- where a batch's time goes at {runs[-1]['rate']:,}/s, per 1,000 changes: "
            f"{1000 * last['reading_s'] / c:.3f} s reading, {1000 * last['merging_s'] / c:.3f} s merging, "
            f"{1000 * last['outside_s'] / c:.3f} s outside the batch function ({n} batches of {c / n:,.0f} "
            f"changes); the catch-up's large batches: {1000 * catch['reading_s'] / catch['changes']:.3f} s reading and "
            f"{1000 * catch['merging_s'] / catch['changes']:.3f} s merging per 1,000 ({catch['rate']:,.0f}/s, "
            f"{catch['rate'] / best:.1f}x the highest steady rate)")
    return lines + [""]
