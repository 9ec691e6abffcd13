"""A continuous stream under a load, measured: what bench/sustained.py (the mixed workload's writers)
and bench/sysbench_stream.py (``sysbench oltp_write_only``) share.

The stream is one spark-submit of spark_jobs/binlog_stream.py (trigger every 0.2 s) started from a
job file and killed at the end. While the load runs, a clock stamps one row of the stamp table with
its wall clock every 50 ms (each row stamped again only after 50 s, so no stamp is overwritten before
it could be seen) and a reader polls the stamp table's Delta table every 100 ms; a stamp's lag is the
time from its commit to the reader first seeing it. After the load stops, the reader goes on until
every stamp was seen (the stream drained), so the last seconds' stamps count with their whole lag.
CPU seconds are read from /proc for every process of a role (the server, this process, the stream's
processes by role, the whole machine).
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.sinks.base import Sink
from airflow_provider_mysqlcdc.sinks.delta.sink import DeltaSink
from bench.memory import machine_busy_seconds, tree_cpu_seconds
from bench.mixed_workload import batch_times
from devtools.spark_submit import SparkSubmit
from devtools.throwaway_server import ThrowawayMariaDB
from devtools.verify import read_delta

#: the lag bound of issue 31's and issue 47's targets: a rate holds when its p99 lag stays under it
LAG_S = 5.0
STAMP = TableId("bench", "stamp")
STAMP_ROWS = 1000  # one stamp every 50 ms: each row stamped again after 50 s
STAMP_COLUMNS, STAMP_ROWS_SQL = "id INT PRIMARY KEY, t_ms BIGINT", f"SELECT seq, 0 FROM bench.seq_1_to_{STAMP_ROWS}"
#: how long after the load stopped the stream may take to make every stamp of a rate visible
DRAIN_S = 120.0
#: the stream's processes by role (bench/memory.py ``spark_role``)
STREAM_ROLES = ("driver JVM", "python driver", "python workers", "other")


class Stamps:
    """The clock's stamps: written into the stamp table, seen in its sink table (``sink``: read
    through delta-rs for a Delta sink, the format's own reader for another)."""

    def __init__(self, server: ThrowawayMariaDB, sink: Sink):
        self.conn, self.sink = server.connect_root(), sink
        self.next_row = 0

    def stamp(self) -> int:
        """Stamp the next row with the clock (committed); the stamp."""
        now = int(time.time() * 1000)
        with self.conn.cursor() as cur:
            cur.execute(f"UPDATE {STAMP.quoted} SET t_ms = %s WHERE id = %s", (now, self.next_row % STAMP_ROWS + 1))
        self.conn.commit()
        self.next_row += 1
        return now

    def visible(self) -> set[int]:
        if isinstance(self.sink, DeltaSink):
            return set(read_delta(self.sink.table_uri(STAMP), columns=["t_ms"]).column(0).to_pylist())
        return set(self.sink.read(STAMP).column("t_ms").to_pylist())

    def wait_visible(self, stamp: int, timeout_s: float, stream: Any, what: str) -> None:
        """Until ``stamp`` is visible; raises once ``timeout_s`` passed or the stream ended."""
        deadline = time.time() + timeout_s
        while stamp not in self.visible():
            if stream.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"waiting for {what}: the stream "
                                   + ("ended" if stream.poll() is not None else f"was not there in {timeout_s:.0f} s"))
            time.sleep(0.1)

    def during(self, running: Callable[[], bool]) -> tuple[dict[int, float], dict[int, float]]:
        """Stamp every 50 ms and poll every 100 ms while ``running()``: when each stamp was written,
        and when each one seen so far was first seen."""
        written_at: dict[int, float] = {}
        seen: dict[int, float] = {}
        next_stamp = next_poll = time.time()
        while running():
            if time.time() >= next_stamp:
                written_at[self.stamp()] = time.time()
                next_stamp += 0.05
            if time.time() >= next_poll:
                self._saw(written_at, seen)
                next_poll += 0.1
            time.sleep(max(0.0, min(next_stamp, next_poll) - time.time()))
        return written_at, seen

    def drain(self, written_at: dict[int, float], seen: dict[int, float]) -> dict:
        """Poll until every stamp of ``written_at`` was seen (at most ``DRAIN_S``): the stamps, whether
        the stream drained, and their p50 and p99 lag (a stamp never seen: its lag so far)."""
        drain_until = time.time() + DRAIN_S
        while len(seen) < len(written_at) and time.time() < drain_until:
            self._saw(written_at, seen)
            time.sleep(0.1)
        lags = sorted((seen.get(stamp, time.time()) - stamp / 1000) for stamp in written_at)
        return {"stamps": len(written_at), "drained": len(seen) == len(written_at),
                "p50_s": statistics.median(lags), "p99_s": lags[int(0.99 * (len(lags) - 1))]}

    def _saw(self, written_at: dict[int, float], seen: dict[int, float]) -> None:
        now = time.time()
        seen.update({stamp: now for stamp in self.visible() if stamp in written_at and stamp not in seen})


def start_stream(work: Path, secrets: Path, job: str, log: str) -> Any:
    """The continuous stream of the job file ``work / job``, its lines into ``work / log``."""
    submit = SparkSubmit(master="local[2]", work_dir=work / "spark")
    return submit.start("binlog_stream.py", ["--job", str(work / job)], secrets, work / log)


def stop_stream(stream: Any) -> None:
    os.killpg(stream.pid, signal.SIGKILL)
    stream.wait()


def steady_batches(log: str, since: float, until: float) -> dict:
    """The batches a stream logged between ``since`` and ``until`` (epoch seconds), as ``batch_times``
    counts them, and the window's seconds outside them: Spark's own part of each micro-batch (the
    trigger, the source's offsets, planning, the checkpoint's commits)."""
    found = batch_times(batch_lines_between(log, since, until))
    return {**found, "outside_s": max(0.0, until - since - found["applied_s"])}


def batch_lines_between(log: str, since: float, until: float) -> str:
    """The stream's batch lines logged between ``since`` and ``until`` (epoch seconds)."""
    return "\n".join(line for line in log.splitlines()
                     if (logged := _LOGGED.match(line)) and since <= _epoch(logged.group(1)) <= until)


#: a log line of the stream's batch (Python logging's local time, to the millisecond)
_LOGGED = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ \S+: stream batch ")


def _epoch(logged: str) -> float:
    return time.mktime(time.strptime(logged[:19], "%Y-%m-%d %H:%M:%S")) + int(logged[20:]) / 1000


def cpu_seconds(server: ThrowawayMariaDB, stream: Any) -> dict[str, float]:
    """CPU seconds so far of the server, this process (the benchmark's own threads: the clock and the
    reader, and any writers), the stream's processes, and the whole machine."""
    own, stream_roles = os.times(), tree_cpu_seconds(stream.pid)
    server_cpu = sum(tree_cpu_seconds(server.pid).values()) if server.pid else 0.0  # an external server: not seen
    return {"server": server_cpu, "bench": own.user + own.system,
            "stream": sum(stream_roles.values()), "machine": machine_busy_seconds(),
            **{f"stream {role}": stream_roles.get(role, 0.0) for role in STREAM_ROLES}}


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds of each role between two ``cpu_seconds``."""
    return {role: after[role] - before[role] for role in after}
