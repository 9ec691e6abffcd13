"""``servers.json``: ``ServerHistory``, the servers the pipeline followed through failovers
(``state/servers.py``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
from airflow_provider_mysqlcdc.cdc.source.server import gtid_sequences
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

    def epoch_of(self, offset: BinlogOffset) -> int:
        """The epoch of the server ``offset`` was read from, by its server id and GTID position: a
        server followed twice by the stint whose starting GTID position the offset has passed, a
        server not followed yet by the next epoch (the one it gets when the stream follows it)."""
        if offset.server_id is None or not self.epochs:
            return offset.epoch
        same = [e for e in self.epochs if e.server_id == offset.server_id]
        if not same:
            return self.epochs[-1].epoch + 1
        have = gtid_sequences(offset.gtid_set)
        passed = [e for e in same if all(have.get(d, 0) >= n for d, n in gtid_sequences(e.since).items())]
        return max(e.epoch for e in passed or same)

    def place(self, offset: BinlogOffset) -> BinlogOffset:
        epoch = self.epoch_of(offset)
        return offset if epoch == offset.epoch else offset.in_epoch(epoch)

    def place_split(self, finished: FinishedSplit) -> FinishedSplit:
        placed = self.place(finished.high_watermark)
        return finished if placed.epoch == finished.high_watermark.epoch else \
            dataclasses.replace(finished, high_watermark=placed)

    def to_body(self) -> dict[str, Any]:
        return {"epochs": [{"epoch": e.epoch, "server_id": e.server_id, "since": e.since, "followed_at": e.followed_at}
                           for e in self.epochs]}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "ServerHistory":
        return cls(tuple(ServerEpoch(int(e["epoch"]), int(e["server_id"]), e.get("since"), e.get("followed_at", ""))
                         for e in body["epochs"]))
