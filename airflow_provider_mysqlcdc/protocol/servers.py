"""``servers.json``: ``ServerHistory``, the servers the pipeline followed through failovers
(``state/servers.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from airflow_provider_mysqlcdc.protocol.envelope import RecordFormat


@dataclass(frozen=True)
class ServerEpoch:
    """A server the pipeline reads from, from the moment it followed it (state/servers.py)."""

    epoch: int
    server_id: int
    #: the GTID position the pipeline had read up to when it moved to this server (None: the first)
    since: str | None
    followed_at: str = ""


@dataclass(frozen=True)
class ServerHistory:
    """Every server of the pipeline, oldest first: its offsets are numbered by their epoch."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("server-history", 1)

    epochs: tuple[ServerEpoch, ...] = ()

    def to_body(self) -> dict[str, Any]:
        return {"epochs": [{"epoch": e.epoch, "server_id": e.server_id, "since": e.since, "followed_at": e.followed_at}
                           for e in self.epochs]}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "ServerHistory":
        return cls(tuple(ServerEpoch(int(e["epoch"]), int(e["server_id"]), e.get("since"), e.get("followed_at", ""))
                         for e in body["epochs"]))
