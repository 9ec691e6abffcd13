"""The stream's heartbeat (Flink CDC's ``heartbeat.interval``, Debezium's ``heartbeat.interval.ms``
and ``heartbeat.action.query``): when no micro-batch finished for ``heartbeat_interval_s``, the
stream still says where it stands.

Batches follow the binlog head: a source that writes only to tables the pipeline does not capture
still moves the stream's position on, batch by batch. What goes stale without batches is what is
measured at a batch's end: how far the stream is behind the head, and its lag. A heartbeat measures
them again at the last committed position (a caught-up stream has no lag), and may run a statement
on the source (``heartbeat_query``, e.g. an upsert into a heartbeat table) so that a source that
writes nothing else still moves the binlog, and with it the stream's position, on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Heartbeat:
    """When a heartbeat is due: ``interval_s`` after the last finished batch or the last heartbeat."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic):
        self.interval_s = interval_s
        self.clock = clock
        self._last = clock()

    def batch_finished(self) -> None:
        self._last = self.clock()

    def due(self) -> bool:
        return self.interval_s > 0 and self.clock() - self._last >= self.interval_s

    def beat(self) -> None:
        self._last = self.clock()


def idle_lag(bytes_behind: int | None, last_lag_s: float) -> float:
    """The lag a heartbeat records: none when the stream has caught up with the head, else the last
    batch's (the changes it has not read yet are not timed)."""
    return 0.0 if bytes_behind == 0 else last_lag_s


def beat_query(statement: str, run_query: Callable[[str], None] | None) -> None:
    """Run the heartbeat query ``statement`` (if any) with ``run_query``: a fault is logged, never raised
    (the query was checked when the stream started; a fault here is passing)."""
    if not statement or run_query is None:
        return
    try:
        run_query(statement)
    except Exception as exc:  # noqa: BLE001
        log.warning("the heartbeat query failed: %s", exc)
