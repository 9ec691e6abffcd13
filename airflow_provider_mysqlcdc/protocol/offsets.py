"""The stream's offset: a binlog offset plus the registry generation the batch was planned with.

Spark keeps these in the stream's checkpoint (``offsets/N``) and hands them back to the data source;
the stream's progress files and its checkpoint identity hold them too. The keys are short and fixed
forever (``file``, ``pos``, ``gen``, ``gtid``, ``server_id``, and ``epoch`` after a failover):
checkpoints written by any version must stay readable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.protocol.envelope import RecordFormat, decode, encode


@dataclass(frozen=True)
class StreamOffset:
    """Where a micro-batch starts or ends (see spark/binlog_source.py)."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("stream-offset", 1)

    offset: BinlogOffset
    generation: int = 0  # the registry generation whose tables and splits the batch applies

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"file": self.offset.file, "pos": self.offset.position, "gen": self.generation}
        if self.offset.gtid_set:
            body["gtid"] = self.offset.gtid_set
        if self.offset.server_id is not None:
            body["server_id"] = self.offset.server_id
        if self.offset.epoch:
            body["epoch"] = self.offset.epoch
        return body

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "StreamOffset":
        server_id = body.get("server_id")  # version 0: the same keys, without the envelope
        return cls(BinlogOffset(str(body["file"]), int(body["pos"]), gtid_set=body.get("gtid"),
                                server_id=None if server_id is None else int(server_id),
                                epoch=int(body.get("epoch", 0))),
                   int(body.get("gen", 0)))

    def to_spark(self) -> dict[str, Any]:
        """The dict the Python data source gives Spark (and Spark keeps in the checkpoint)."""
        return encode(self)

    @classmethod
    def from_spark(cls, data: Any, where: str = "the stream's Spark offset") -> "StreamOffset":
        return decode(cls, data, where)

    def __str__(self) -> str:
        return f"{self.offset} (registry generation {self.generation})"


def optional_offset(data: dict[str, Any] | None) -> BinlogOffset | None:
    """A ``BinlogOffset`` field of a record that may be absent."""
    return BinlogOffset.from_dict(data) if data else None
