"""Watching a detached stream (one started by ``SparkJobRunner.start``) from anywhere the pipeline's
state location is reachable: a deferred task's trigger, or a task that reconnects to it.

Two things tell how it is doing: its report folder (log lines, then its result or its failure:
spark/report.py) and the pipeline's stream lease (state/lease.py), which names the report folder
of the stream that holds it and shows its heartbeat. Stopping it is a stop request in its report
folder (or on its lease).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from airflow_provider_mysqlcdc.protocol.lease import StopRequest
from airflow_provider_mysqlcdc.protocol.results import StreamPhase, StreamStatus
from airflow_provider_mysqlcdc.spark.report import ReportWatcher, stop_request
from airflow_provider_mysqlcdc.state.lease import LeaseState, StreamLeases
from airflow_provider_mysqlcdc.state.registry import PipelineState

#: after its lease is released, how long a stream may take to write its result
ENDING_GRACE_S = 60.0


class DetachedStream:
    """The stream whose report folder is ``report``, on the pipeline at ``state``."""

    def __init__(self, state: str, report: str, *, submitted_at: float, start_timeout_s: float = 600.0,
                 clock: Callable[[], float] = time.time, storage_options: dict[str, Any] | None = None):
        self.leases = StreamLeases(PipelineState(state, storage_options), clock=clock)
        self.report = ReportWatcher(report, storage_options)
        self.folder = report
        self.submitted_at = submitted_at
        self.start_timeout_s = start_timeout_s
        self.clock = clock
        self.lease_number = 0  # its lease, once seen
        self._released_seen_at: float | None = None

    def status(self, on_line: Callable[[str], None] = lambda line: None) -> StreamStatus:
        """How it is doing now; its new log lines go to ``on_line``."""
        self.report.poll(on_line)
        failure = self.report.failure()
        if failure is not None:
            return StreamStatus(StreamPhase.FAILED, f"the stream failed: {failure}")
        result = self.report.result()
        if result is not None:
            return StreamStatus(StreamPhase.FINISHED, "the stream ended", result)
        current = self.leases.current()
        if current is not None and current.lease.report == self.folder:
            self.lease_number = current.lease.number
            return self._holding(current)
        if self.lease_number:
            taker = current.describe() if current else "no lease"
            return StreamStatus(StreamPhase.LOST, f"the stream's lease {self.lease_number} was taken over ({taker})")
        waited = self.clock() - self.submitted_at
        if waited > self.start_timeout_s:
            return StreamStatus(StreamPhase.LOST, f"the stream did not take the pipeline's lease within "
                                                  f"{self.start_timeout_s:.0f}s of its submission")
        return StreamStatus(StreamPhase.STARTING, f"submitted {waited:.0f}s ago")

    def _holding(self, current: LeaseState) -> StreamStatus:
        if current.live:
            return StreamStatus(StreamPhase.RUNNING, current.describe())
        if current.released:  # it stopped cleanly: its result follows within moments
            self._released_seen_at = self._released_seen_at or self.clock()
            if self.clock() - self._released_seen_at < ENDING_GRACE_S:
                return StreamStatus(StreamPhase.RUNNING, "ending")
            return StreamStatus(StreamPhase.LOST, "the stream released its lease but wrote no result")
        return StreamStatus(StreamPhase.LOST, f"the stream stopped without a result: {current.why_free()} "
                                              f"({current.describe()})")

    def request_stop(self, reason: str) -> None:
        """Ask it to stop: it does within about a second, wherever its driver runs (and at once
        if it has not started yet)."""
        self.report.request_stop(reason)

    def stop_requested(self) -> StopRequest | None:
        """Whether someone asked it to stop (``request_stop``), and why."""
        return self.report.stop_requested()

    def remove_report(self) -> None:
        self.report.remove()


def wait_for_a_stopping_stream(state: str, *, timeout_s: float = 120.0, poll_s: float = 1.0,
                               on_wait: Callable[[str], None] = lambda message: None) -> None:
    """Return once no stream that was asked to stop still holds the pipeline's lease, or after
    ``timeout_s`` (the lease then refuses the next stream, naming this one).

    A task that is cleared or retried while its stream runs asks that stream to stop (``on_kill``);
    the stream needs a few seconds to end its micro-batch and let the lease go, and the task's next
    try must not start its own stream before then. A stream nobody asked to stop is not waited for.
    """
    leases = StreamLeases(PipelineState(state))
    deadline = time.monotonic() + timeout_s
    told = False
    while True:
        current = leases.current()
        if current is None or not current.live:
            return
        request = leases.stop_request(current.lease.number) or (
            stop_request(current.lease.report) if current.lease.report else None)
        if request is None or time.monotonic() > deadline:
            return
        if not told:
            on_wait(f"waiting for the stream asked to stop ({request.reason}) to let the pipeline's lease go: "
                    f"{current.describe()}")
            told = True
        time.sleep(poll_s)
