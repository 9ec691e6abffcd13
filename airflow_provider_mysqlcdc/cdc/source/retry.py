"""Riding out transient faults of the source: a restart, a dropped connection, a network blip.

A fault is transient when the server cannot be reached or went away: client errors 2002/2003 (no
connection), 2006/2013/2055 (connection lost), server errors 1053 (shutdown in progress) and 1927
(connection killed), and socket errors. Such an operation is tried again with exponential backoff
until it succeeds or the fault has lasted longer than the retry budget; then it fails with an error
that says so. Every other error fails at once. Operations retried this way start over from
scratch, so each must be idempotent: opening a connection, a read-only query, a binlog read that
resumes from the last transaction boundary it reached (binlog/reader.py).

A budget of 0 retries nothing: preflight and planning use that, so a wrong host fails at once.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import pymysql

from airflow_provider_mysqlcdc.cdc.errors import SourceUnavailableError

log = logging.getLogger(__name__)

T = TypeVar("T")

TRANSIENT_CODES = frozenset({1053, 1927, 2002, 2003, 2006, 2013, 2055})
_TRANSIENT_ERRNOS = frozenset({errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE,
                               errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH})


def is_transient(exc: BaseException | None) -> bool:
    """True when ``exc`` (or an error it was raised from) means the source is unreachable for now."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (pymysql.err.OperationalError, pymysql.err.InterfaceError)) and exc.args \
                and exc.args[0] in TRANSIENT_CODES:
            return True
        if isinstance(exc, (ConnectionError, TimeoutError)) or \
                (isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


@dataclass(frozen=True)
class RetryPolicy:
    budget_s: float = 300.0  # a fault that lasts longer fails the operation
    first_delay_s: float = 0.5
    max_delay_s: float = 15.0

    def backoff(self, exc: BaseException, fault_started: float, attempt: int, what: str) -> None:
        """Sleep before the next attempt, or raise when ``exc`` is not transient or the fault,
        which began at ``fault_started`` (``time.monotonic()``), outlasted the budget."""
        if not is_transient(exc):
            raise exc
        lasted = time.monotonic() - fault_started
        if lasted >= self.budget_s:
            raise SourceUnavailableError(
                f"{what}: the source has been unreachable for {lasted:.0f}s, longer than the retry budget of "
                f"{self.budget_s:.0f}s ({exc}). Check that the server is up and reachable from here, then run the task "
                "again; raise retry_budget_s to ride out longer outages.") from exc
        delay = min(self.max_delay_s, self.first_delay_s * 2 ** attempt, max(0.1, self.budget_s - lasted))
        log.warning("%s failed: %s; retrying in %.1fs (the fault has lasted %.0fs of a %.0fs retry budget)",
                    what, exc, delay, lasted, self.budget_s)
        time.sleep(delay)

    def run(self, operation: Callable[[], T], what: str) -> T:
        """``operation()``, tried again on transient faults within the budget."""
        started, attempt = time.monotonic(), 0
        while True:
            try:
                return operation()
            except Exception as exc:  # noqa: BLE001 - backoff re-raises what is not transient
                self.backoff(exc, started, attempt, what)
                attempt += 1
