"""A throwaway StatsD listener for tests: a UDP socket on loopback that keeps every metric it gets.

    with StatsdListener() as statsd:
        env["AIRFLOW__METRICS__STATSD_PORT"] = str(statsd.port)
        ...
        statsd.wait_for(lambda m: m.name.endswith(".stream.batch_duration.shop_cdc"), "a batch's duration")
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One StatsD line: ``name:value|type`` (``c`` counter, ``g`` gauge, ``ms`` timer)."""

    name: str
    value: float
    kind: str

    @classmethod
    def parse(cls, line: str) -> "Metric":
        name, rest = line.split(":", 1)
        value, kind = rest.split("|")[:2]
        return cls(name, float(value), kind)


class StatsdListener:
    def __init__(self, host: str = "127.0.0.1"):
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind((host, 0))
        self._socket.settimeout(0.2)
        self.host, self.port = self._socket.getsockname()
        self.metrics: list[Metric] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="statsd-listener", daemon=True)

    def __enter__(self) -> "StatsdListener":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._socket.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._socket.recv(65536)
            except socket.timeout:
                continue
            lines = [line for line in data.decode(errors="replace").splitlines() if ":" in line and "|" in line]
            with self._lock:
                self.metrics.extend(Metric.parse(line) for line in lines)

    def received(self, name_suffix: str = "") -> list[Metric]:
        """The metrics received so far whose name ends with ``name_suffix``."""
        with self._lock:
            return [m for m in self.metrics if m.name.endswith(name_suffix)]

    def wait_for(self, condition: Callable[[list[Metric]], bool], what: str, timeout_s: float = 60) -> list[Metric]:
        """Wait until ``condition`` holds of all metrics received; them."""
        deadline = time.monotonic() + timeout_s
        while True:
            metrics = self.received()
            if condition(metrics):
                return metrics
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; received {sorted({m.name for m in metrics})}")
            time.sleep(0.1)
