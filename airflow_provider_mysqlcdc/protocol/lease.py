"""The stream lease's records (``state/lease.py``): ``lease/stream-NNNNNN.json``, ``.heartbeat.json``
and ``.stop.json`` hold ``StreamLease``, ``LeaseHeartbeat`` and ``StopRequest``, the one stream
allowed to run on the pipeline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from airflow_provider_mysqlcdc.protocol.envelope import RecordFormat


@dataclass(frozen=True)
class StreamLease:
    """Lease number ``number`` of the pipeline's stream: who holds it (state/lease.py). Written once."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("stream-lease", 1)

    number: int
    token: str  # unique per holder: only the holder renews or releases it
    holder: str  # who started the stream, for people ("airflow task dag.task run ... try 2")
    host: str  # where its driver runs
    pid: int
    acquired_at: float
    ttl_s: float  # without a heartbeat for this long, the lease may be taken over
    report: str = ""  # the stream's report folder (spark/report.py), when a task started it

    def to_body(self) -> dict[str, Any]:
        return {"number": self.number, "token": self.token, "holder": self.holder, "host": self.host, "pid": self.pid,
                "acquired_at": self.acquired_at, "ttl_s": self.ttl_s, "report": self.report}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "StreamLease":
        return cls(int(body["number"]), body["token"], body["holder"], body["host"], int(body["pid"]),
                   float(body["acquired_at"]), float(body["ttl_s"]), body.get("report", ""))


@dataclass(frozen=True)
class LeaseHeartbeat:
    """The holder of a lease is alive (renewed), or let it go (released)."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("stream-lease-heartbeat", 1)

    token: str
    renewed_at: float
    released: bool = False
    app_id: str = ""  # the stream's Spark application, once it runs
    ui_url: str = ""

    def to_body(self) -> dict[str, Any]:
        return {"token": self.token, "renewed_at": self.renewed_at, "released": self.released, "app_id": self.app_id,
                "ui_url": self.ui_url}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "LeaseHeartbeat":
        return cls(body["token"], float(body["renewed_at"]), bool(body.get("released", False)),
                   body.get("app_id", ""), body.get("ui_url", ""))


@dataclass(frozen=True)
class StopRequest:
    """Someone asked the stream holding a lease to stop (state/lease.py)."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("stream-stop-request", 1)

    reason: str
    requested_at: float

    def to_body(self) -> dict[str, Any]:
        return {"reason": self.reason, "requested_at": self.requested_at}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "StopRequest":
        return cls(body["reason"], float(body["requested_at"]))
