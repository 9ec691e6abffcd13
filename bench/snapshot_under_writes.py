"""The snapshot of a table under concurrent writes, exactly-once beside at-least-once
(``bin/bench --only snapshot-under-writes``; issue: ``snapshot_consistency``).

One customer-shaped table is read by the chunk job twice, each time into a fresh lake, while
writers update random rows of it at a steady rate: once exactly-once (each split's binlog window is
read and merged, and the partitions it touches are written again) and once at-least-once (no
window). The two runs alternate in order over ``rounds`` so that neither always meets a warmer
machine. Reported: work seconds, the window changes merged, and peak RSS per role, per mode.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.jobs import SNAPSHOT_CONSISTENCIES
from bench.customer_table import create_customer_table
from bench.memory import ROLES
from devtools.throwaway_server import ThrowawayMariaDB

MODES = SNAPSHOT_CONSISTENCIES  # exactly-once first: the baseline


class SteadyUpdates:
    """Threads updating random rows of ``table`` at about ``rate`` rows/s in all, in transactions of
    ``rows_per_txn`` rows, until stopped (bounded: a benchmark must not fill the disk with binlog)."""

    def __init__(self, server: ThrowawayMariaDB, table: TableId, rows: int, rate: int, *, threads: int = 2,
                 rows_per_txn: int = 20, max_seconds: float = 1800) -> None:
        self.server, self.table, self.rows = server, table, rows
        self.pause_s = threads * rows_per_txn / rate
        self.rows_per_txn, self.max_seconds = rows_per_txn, max_seconds
        self.updated = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(seed,), daemon=True) for seed in range(threads)]

    def __enter__(self) -> "SteadyUpdates":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _run(self, seed: int) -> None:
        rng, conn = random.Random(seed), self.server.connect_root()
        deadline = time.monotonic() + self.max_seconds
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                keys = ", ".join(str(rng.randint(1, self.rows)) for _ in range(self.rows_per_txn))
                with conn.cursor() as cur:
                    cur.execute(f"UPDATE {self.table.quoted} SET c_birth_day = 1 + (c_birth_day + 1) % 28, "
                                f"c_login = LEFT(UUID(), 13) WHERE c_customer_sk IN ({keys})")
                conn.commit()
                with self._lock:
                    self.updated += self.rows_per_txn
                self._stop.wait(self.pause_s)
        finally:
            conn.close()


def bench_snapshot_under_writes(server: ThrowawayMariaDB, rows: int, chunk_job: Callable[..., dict[str, Any]], *,
                                rate: int = 2000, rounds: int = 2) -> dict[str, Any]:
    """``chunk_job(conn, table, lake, consistency)``: one chunk job over the whole table (bench/run.py)."""
    conn = server.connect_root()
    table = TableId("bench", "customer_written")
    create_customer_table(conn, table, rows)
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with SteadyUpdates(server, table, rows, rate) as writes:
        started, updated = time.monotonic(), writes.updated
        for number in range(rounds):
            for mode in MODES if number % 2 == 0 else MODES[::-1]:
                result = chunk_job(conn, table, f"lake-written-{mode}-{number}", mode)
                runs[mode].append(result)
                print(f"snapshot under writes, {mode}: {result['ours_work_s']:.1f}s work, "
                      f"{result['merged']} window changes merged", flush=True)
        rate_seen = (writes.updated - updated) / (time.monotonic() - started)
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE {table.quoted}")
    return {"rows": rows, "rate": round(rate_seen), "runs": runs}


def snapshot_under_writes_report(result: dict[str, Any]) -> list[str]:
    mib = 2**20
    lines = ["", f"## Snapshot under concurrent writes: {result['rows']:,} rows, about {result['rate']:,} rows "
                 "updated per second throughout", "",
             "The same chunk job (4 partitions per split) in each `snapshot_consistency`, alternating, "
             "medians of the runs; peak RSS in MiB per role.", "",
             "| mode | runs | work seconds | rows/s | window changes merged | " + " | ".join(ROLES) + " |",
             "|---|---:|---:|---:|---:|" + "---:|" * len(ROLES)]
    medians, drivers = {}, {}
    for mode in MODES:
        runs = result["runs"][mode]
        work = statistics.median(r["ours_work_s"] for r in runs)
        medians[mode] = work
        peaks = {role: max(r["peak_bytes"][role] for r in runs) for role in ROLES}
        drivers[mode] = peaks["python driver"] / mib
        lines.append(f"| {mode} | {len(runs)} | {work:.1f} | {result['rows'] / work:,.0f} | "
                     f"{statistics.median(r['merged'] for r in runs):,.0f} | "
                     + " | ".join(f"{peaks[role] / mib:,.0f}" for role in ROLES) + " |")
    speedup = medians["exactly-once"] / medians["at-least-once"]
    return lines + ["", f"- at-least-once speed-up on the snapshot's work: {speedup:.2f}x (the stream then "
                        "re-applies the window's changes, which it reads anyway)",
                    f"- peak python driver: {drivers['exactly-once']:,.0f} MiB exactly-once, "
                    f"{drivers['at-least-once']:,.0f} MiB at-least-once (the window's merge reads the partitions "
                    "it touches back into the driver)"]
