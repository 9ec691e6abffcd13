"""A continuous stream over many tables at a steady rate spread over all of them (``bin/bench --only
wide-stream``): issue 48's 200 tables at 1,000 changes/s, p99 commit-to-visible lag < 2 s.

``TABLES`` tables of ``ROWS`` rows each (``id``, an integer, a short string) and the stamp table are
captured by one continuous stream on the default path (the driver engine, trigger 0.2 s, a
spark-submit). The sinks are filled first, through the stream itself: the tables' rows are inserted
after it started, and the measured load begins once the stream has applied them (the stamp written
after them is visible). Then writers run single-row updates of random rows of random tables (each
its own transaction, as an OLTP application's) at ``rate`` changes/s for ``seconds`` while the clock
of bench/continuous.py stamps the stamp table every 50 ms and a reader polls its Delta table through
delta-rs every 100 ms: a stamp's lag is the time from its commit to the reader first seeing it (the
stamp table is one table among all the others in every batch). CPU seconds from /proc for every
process of each role beside the wall seconds; the stream's batches (tables, changes, reading and
merging time) from its log.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, stream_only_split
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.state.registry import PipelineState
from bench.continuous import (
    STAMP,
    STAMP_COLUMNS,
    STAMP_ROWS_SQL,
    Stamps,
    batch_lines_between,
    cpu_seconds,
    spent,
    start_stream,
    steady_batches,
    stop_stream,
)
from bench.customer_table import fresh_table
from devtools.throwaway_server import ThrowawayMariaDB

TABLES = 200
ROWS = 1_000
RATE = 1_000
#: issue 48's target: p99 commit-to-visible lag below this
TARGET_P99_S = 2.0
WRITERS = 2


def _tables(server: ThrowawayMariaDB, count: int) -> list[TableId]:
    conn = server.connect_root()
    tables = [TableId("bench", f"wide_{n:03d}") for n in range(count)]
    with conn.cursor() as cur:
        for table in tables:
            cur.execute(f"DROP TABLE IF EXISTS {table.quoted}")
            cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, v INT NOT NULL, s VARCHAR(32) NOT NULL)")
    conn.commit()
    return tables


def _fill(server: ThrowawayMariaDB, tables: list[TableId], rows: int) -> None:
    conn = server.connect_root()
    with conn.cursor() as cur:
        for table in tables:
            cur.execute(f"INSERT INTO {table.quoted} SELECT seq, 0, CONCAT('row ', seq) FROM bench.seq_1_to_{rows}")
            conn.commit()


def _update(server: ThrowawayMariaDB, tables: list[TableId], rows: int, per_s: float, stop: threading.Event,
            written: list[int], index: int, seed: int) -> None:
    """One writer: single-row updates of random rows of random tables at ``per_s``, until ``stop``."""
    conn, rng = server.connect_root(), random.Random(seed)
    started = time.monotonic()
    with conn.cursor() as cur:
        while not stop.is_set():
            table = tables[rng.randrange(len(tables))]
            cur.execute(f"UPDATE {table.quoted} SET v = v + 1 WHERE id = %s", (rng.randint(1, rows),))
            conn.commit()
            written[index] += 1
            time.sleep(max(0.0, started + written[index] / per_s - time.monotonic()))
    conn.close()


def bench_wide_stream(server: ThrowawayMariaDB, work: Path, secrets: Path, *, tables: int = TABLES, rows: int = ROWS,
                      rate: int = RATE, seconds: int = 30) -> dict:
    conn = server.connect_root()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS bench")
    captured = _tables(server, tables)
    fresh_table(server, STAMP, STAMP_COLUMNS, STAMP_ROWS_SQL)
    lake, state = work / "wide-lake", PipelineState(str(work / "wide-state"))
    sink = open_sink(SinkSpec(str(lake)))
    for table in [*captured, STAMP]:
        sink.prepare(load_table_schema(conn, table))
    start = current_offset(conn)
    state.commit({t: CapturedTable("id", [stream_only_split(t, "id", start)]) for t in [*captured, STAMP]})
    (work / "wide.json").write_text(StreamJob(state=state.location, sink=SinkSpec(str(lake)), mode="continuous",
                                              trigger_interval_s=0.2).to_json())
    stamps = Stamps(server, sink)
    stream = start_stream(work, secrets, "wide.json", "wide.log")
    try:
        filling = time.monotonic()
        _fill(server, captured, rows)
        stamps.wait_visible(stamps.stamp(), 900, stream, "the sinks' first rows")
        fill_s = time.monotonic() - filling
        print(f"wide stream: {tables} tables of {rows:,} rows applied in {fill_s:.1f} s", flush=True)
        stop, written = threading.Event(), [0] * WRITERS
        threads = [threading.Thread(target=_update, args=(server, captured, rows, rate / WRITERS, stop, written, n,
                                                          300 + n), daemon=True) for n in range(WRITERS)]
        cpu_before = cpu_seconds(server, stream)
        started = time.time()
        for thread in threads:
            thread.start()
        written_at, seen = stamps.during(lambda: time.time() < started + seconds)
        stop.set()
        for thread in threads:
            thread.join()
        elapsed = time.time() - started
        cpu = spent(cpu_before, cpu_seconds(server, stream))
        lags = stamps.drain(written_at, seen)
        log = (work / "wide.log").read_text(errors="replace")
    finally:
        stop_stream(stream)
    batches = steady_batches(log, started, started + elapsed)
    tables_per_batch = [int(m.group(1)) for m in _TABLES_MERGED.finditer(batch_lines_between(log, started, started + elapsed))]
    result = {"ran_at": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC", "tables": tables, "rows": rows,
              "rate": rate, "seconds": seconds, "fill_s": fill_s, "written_per_s": sum(written) / elapsed,
              "wall_s": elapsed, "cpu_s": cpu, **lags, "batches": batches,
              "tables_per_batch": statistics.median(tables_per_batch) if tables_per_batch else None}
    print(f"wide stream: {result['written_per_s']:,.0f} changes/s over {tables} tables, p50 {lags['p50_s']:.2f} s, "
          f"p99 {lags['p99_s']:.2f} s, drained: {lags['drained']}", flush=True)
    return result


#: the tables a batch merged, from its batch line ("... merging; N unit(s), M table(s), ...")
_TABLES_MERGED = re.compile(r"stream batch \d+: .*? unit\(s\), (\d+) table\(s\)")


def wide_stream_report(result: dict[str, Any] | None) -> list[str]:
    if not result:
        return []
    cpu, wall = result["cpu_s"], result["wall_s"]
    batches = result["batches"]
    verdict = "met" if result["drained"] and result["p99_s"] < TARGET_P99_S else "MISSED"
    return [
        f"## A continuous stream over {result['tables']} tables at {result['rate']:,} changes/s",
        "",
        f"Run {result['ran_at']} with `bin/bench --only wide-stream`. {result['tables']} tables of {result['rows']:,} rows "
        "and a stamp table, one continuous stream on the default path (the driver engine, trigger 0.2 s); the sinks "
        "filled first through the stream. Writers update one random row of a random table per transaction; a clock "
        "stamps the stamp table every 50 ms and a reader polls its Delta table through delta-rs every 100 ms.",
        "",
        "| changes/s asked | written | p50 lag | p99 lag | batches | tables per batch | CPU s: stream | MariaDB | "
        "writers, clock, reader | machine | wall s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {result['rate']:,} | {result['written_per_s']:,.0f} | {result['p50_s']:.2f} s | {result['p99_s']:.2f} s | "
        f"{batches.get('batches', 0)} | {result['tables_per_batch'] or 0:.0f} | {cpu['stream']:.1f} | {cpu['server']:.1f} | "
        f"{cpu['bench']:.1f} | {cpu['machine']:.1f} | {wall:.1f} |",
        "",
        f"- p99 commit-to-visible lag {result['p99_s']:.2f} s against < {TARGET_P99_S:.0f} s: {verdict}"
        + ("" if result["drained"] else " (the stream had not drained two minutes after the load)"),
        "",
    ]
