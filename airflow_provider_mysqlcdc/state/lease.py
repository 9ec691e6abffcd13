"""The stream's lease: at most one stream runs on a pipeline.

Two streams on one pipeline would both apply every change to every sink table, race for the same
Spark checkpoint and delete each other's spill files. So a stream holds the pipeline's lease while
it runs, whatever started it (a task, a deferred task, a person running the stream program).

The lease is a sequence of numbered files in the state location, ``lease/stream-NNNNNN.json``, each
written once with put-if-absent (``StateStorage.create_exclusive``): two streams starting at the
same moment cannot both get the same number. The highest number is the lease in force. Its holder
rewrites ``stream-NNNNNN.heartbeat.json`` every quarter of the lease's TTL, and marks it released
when it stops. Anyone may ask the holder to stop by writing ``stream-NNNNNN.stop.json``: the stream
looks for it every second and ends cleanly (a deferred task that is marked failed does this, since
its driver may run on any machine).

A stream takes number N+1 when lease N was released, when lease N's last heartbeat is older than its
TTL (its driver hung or died on another host), or at once when lease N's driver ran on this host
and its process is gone. Otherwise it refuses with ``StreamAlreadyRunning``, naming the holder.

Taking over is safe because the holder fences itself: at every renewal and before every
micro-batch it checks that no higher number exists, and stops with ``LeaseLost`` when one does (a
stream that stalled past its TTL and wakes up never writes again).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import LeaseLost, StreamAlreadyRunning
from airflow_provider_mysqlcdc.protocol.lease import LeaseHeartbeat, StopRequest, StreamLease
from airflow_provider_mysqlcdc.state.registry import PipelineState

log = logging.getLogger(__name__)

LEASES = "lease"
DEFAULT_TTL_S = 60.0


def _lease_name(number: int) -> str:
    return f"stream-{number:06d}.json"


def _heartbeat_name(number: int) -> str:
    return f"stream-{number:06d}.heartbeat.json"


def _stop_name(number: int) -> str:
    return f"stream-{number:06d}.stop.json"


@dataclass(frozen=True)
class LeaseState:
    """The lease in force and its last heartbeat, as read at ``now``."""

    lease: StreamLease
    heartbeat: LeaseHeartbeat | None
    now: float
    this_host: str

    @property
    def last_sign_of_life(self) -> float:
        return self.heartbeat.renewed_at if self.heartbeat else self.lease.acquired_at

    @property
    def released(self) -> bool:
        return bool(self.heartbeat and self.heartbeat.released)

    @property
    def driver_gone(self) -> bool:
        """Its driver ran on this host and its process no longer exists."""
        return self.lease.host == self.this_host and not _process_exists(self.lease.pid)

    @property
    def expired(self) -> bool:
        return self.now - self.last_sign_of_life > self.lease.ttl_s

    @property
    def live(self) -> bool:
        return not (self.released or self.expired or self.driver_gone)

    def describe(self) -> str:
        """The holder, for people: who started it, where its driver runs, its last heartbeat."""
        hb = self.heartbeat
        app = f", Spark application {hb.app_id}" if hb and hb.app_id else ""
        ui = f" (Spark UI {hb.ui_url})" if hb and hb.ui_url else ""
        return (f"lease {self.lease.number} held by {self.lease.holder}{app}{ui}, driver pid {self.lease.pid} on "
                f"{self.lease.host}, last heartbeat {self.now - self.last_sign_of_life:.0f}s ago")

    def why_free(self) -> str:
        if self.released:
            return "released"
        if self.driver_gone:
            return f"its driver (pid {self.lease.pid} on this host) is gone"
        return f"no heartbeat for {self.now - self.last_sign_of_life:.0f}s (TTL {self.lease.ttl_s:.0f}s)"


def _process_exists(pid: int) -> bool:
    """``pid`` runs (a zombie does not: a killed driver whose parent died waits to be reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # no /proc (not Linux), or it just ended
        return not os.path.isdir("/proc")


class StreamLeases:
    """The leases of one pipeline's stream (see the module doc)."""

    def __init__(self, state: PipelineState, *, clock: Callable[[], float] = time.time, host: str | None = None):
        self.state = state
        self.storage = state.storage
        self.clock = clock
        self.host = host or socket.gethostname()

    def latest_number(self) -> int:
        names = [n for n in self.storage.list_names(LEASES) if n.startswith("stream-") and n.count(".") == 1]
        return max((int(n[len("stream-"):-len(".json")]) for n in names if n.endswith(".json")), default=0)

    def current(self) -> LeaseState | None:
        """The lease in force (live or not), None when no stream ever ran."""
        number = self.latest_number()
        return self.load(number) if number else None

    def request_stop(self, number: int, reason: str) -> None:
        """Ask the stream holding lease ``number`` to stop (it does within about a second, wherever
        its driver runs)."""
        self.storage.write_record(StopRequest(reason, self.clock()), LEASES, _stop_name(number))

    def stop_request(self, number: int) -> StopRequest | None:
        return self.storage.read_record(StopRequest, LEASES, _stop_name(number))

    def load(self, number: int) -> LeaseState:
        """Lease ``number`` (in force or not) and its last heartbeat."""
        lease = self.storage.read_record(StreamLease, LEASES, _lease_name(number))
        if lease is None:
            raise FileNotFoundError(self.storage.url(LEASES, _lease_name(number)))
        heartbeat = self.storage.read_record(LeaseHeartbeat, LEASES, _heartbeat_name(number))
        return LeaseState(lease, heartbeat, self.clock(), self.host)

    def acquire(self, holder: str, *, ttl_s: float = DEFAULT_TTL_S, report: str = "") -> HeldLease:
        """Take the lease for a stream about to start in this process, or raise
        ``StreamAlreadyRunning`` naming the stream that holds it."""
        while True:
            current = self.current()
            if current and current.live:
                raise StreamAlreadyRunning(
                    f"Another stream is running on the pipeline at {self.state.location}: {current.describe()}. Stop "
                    "it first (mark its Airflow task failed, or kill its Spark application), or wait: a lease whose "
                    f"stream sends no heartbeat for {current.lease.ttl_s:.0f}s is taken over.")
            number = (current.lease.number if current else 0) + 1
            lease = StreamLease(number, uuid.uuid4().hex, holder, self.host, os.getpid(), self.clock(), ttl_s, report)
            if self.storage.create_record(lease, LEASES, _lease_name(number)):
                if current:
                    log.info("stream lease %d taken (lease %d was free: %s)", number, current.lease.number,
                             current.why_free())
                held = HeldLease(self, lease)
                held.renew()
                return held
            # another stream took this number first: look again (it is probably live now)


class HeldLease:
    """The lease this process holds: renew it, check it before writing, release it at the end. Its
    keeper's thread and the stream's own may renew it at once (the stream names its application once
    its Spark context is up): one heartbeat is written at a time, each with what is known then."""

    def __init__(self, leases: StreamLeases, lease: StreamLease):
        self.leases = leases
        self.lease = lease
        self.app_id = ""
        self.ui_url = ""
        self._writing = threading.Lock()
        self._released = False

    def __getstate__(self) -> dict[str, Any]:
        # pickled with the fence of a stream's batch function (a Spark Connect server runs it): its lock is made anew there
        return {k: v for k, v in self.__dict__.items() if k != "_writing"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._writing = threading.Lock()

    def check(self) -> None:
        """Raise ``LeaseLost`` when another stream took the pipeline over."""
        newest = self.leases.latest_number()
        if newest != self.lease.number:
            taker = self.leases.current()
            raise LeaseLost(f"This stream's lease {self.lease.number} on {self.leases.state.location} was taken over "
                            f"({taker.describe() if taker else f'lease {newest}'}), because it sent no heartbeat for "
                            f"{self.lease.ttl_s:.0f}s: this stream stops without writing anything more.")

    def renew(self, **running: Any) -> None:
        """Check, then write a heartbeat (``app_id``, ``ui_url``: what the stream runs as)."""
        self.check()
        with self._writing:
            if self._released:
                return  # let go: renewed by no one (the stream names its application once its context is up)
            self.app_id = running.get("app_id", self.app_id)
            self.ui_url = running.get("ui_url", self.ui_url)
            self._write(released=False)

    def release(self) -> None:
        """Let the lease go (the stream stopped); nothing when it was taken over meanwhile."""
        with self._writing:
            self._released = True
            if self.leases.latest_number() == self.lease.number:
                self._write(released=True)

    def _write(self, *, released: bool) -> None:
        heartbeat = LeaseHeartbeat(self.lease.token, self.leases.clock(), released, self.app_id, self.ui_url)
        self.leases.storage.write_record(heartbeat, LEASES, _heartbeat_name(self.lease.number))


class LeaseKeeper:
    """Keeps a held lease while its stream runs, in a thread: renews it every quarter of its TTL and
    looks for a stop request (on the lease, or from ``stop_requested``) every ``poll_s``. Once the
    stream must end, ``stop_stream`` is called every ``poll_s`` until the keeper exits:
    ``lost`` then holds the error when the lease was taken over (or could not be renewed), and
    ``stop_reason`` the reason when someone asked the stream to stop (``StreamLeases.request_stop``)."""

    def __init__(self, held: HeldLease, stop_stream: Callable[[], None], poll_s: float = 1.0,
                 stop_requested: Callable[[], StopRequest | None] = lambda: None):
        self.held = held
        self.stop_stream = stop_stream
        self.stop_requested = stop_requested  # another place a stop request may come from
        self.poll_s = min(poll_s, held.lease.ttl_s / 4)
        self.lost: Exception | None = None
        self.stop_reason = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream-lease", daemon=True)

    def __enter__(self) -> "LeaseKeeper":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.held.release()

    def _run(self) -> None:
        renew_every = self.held.lease.ttl_s / 4
        renewed = failing_since = None
        while not self._stop.wait(self.poll_s):
            if self.lost or self.stop_reason:  # again until it has ended: its query may not have started yet
                self.stop_stream()
                continue
            try:
                request = self.held.leases.stop_request(self.held.lease.number) or self.stop_requested()
                if request:
                    self.stop_reason = request.reason
                    log.info("stopping the stream: %s", request.reason)
                    self.stop_stream()
                    continue
                if renewed is None or time.monotonic() - renewed >= renew_every:
                    self.held.renew()
                    renewed = time.monotonic()
                failing_since = None
            except LeaseLost as exc:
                self._lose(exc)
            except Exception as exc:  # the state location is unreachable for a moment: retried until half the TTL
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > self.held.lease.ttl_s / 2:
                    self._lose(LeaseLost(f"The stream could not renew its lease for {self.held.lease.ttl_s / 2:.0f}s "
                                         f"({exc}); it stops before another stream may take over."))
                else:
                    log.warning("could not renew the stream lease (retrying): %s", exc)

    def _lose(self, exc: Exception) -> None:
        self.lost = exc
        log.error("%s", exc)
        self.stop_stream()
