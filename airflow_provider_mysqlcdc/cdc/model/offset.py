"""Binlog offsets: a point in one server's binlog, totally ordered, JSON round-trip.

An offset is a point *between* events: ``(file, position)`` where ``position`` is the byte offset
at which the next event starts (what ``SHOW MASTER STATUS`` reports and what python-mysql-replication
calls ``log_pos`` of the event before). A change record carries the offset at the *end* of its event,
so "record is after watermark W" is simply ``record.offset > W``.

Binlog file names are ``<basename>.<number>``; offsets of one server order by (number, position).
The GTID set and the server id, where known, say which binlog the offset belongs to (server.py
``check_same_binlog`` refuses an offset the server's binlog does not hold); they do not order.

The ``epoch`` numbers the servers a pipeline has read from, in the order it followed them through
failovers (state/servers.py): offsets order by epoch first, so everything read from a promoted
replica comes after everything read from the server before it. Epoch 0 is the first server, and
an offset of epoch 0 serialises and orders exactly as before epochs existed.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from functools import total_ordering
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError


def binlog_file_number(file: str) -> int:
    """The sequence number of a binlog file name (``mysql-bin.000042`` -> 42)."""
    _, _, suffix = file.rpartition(".")
    if not suffix.isdigit():
        raise ConfigurationError(
            f"Malformed binlog file name {file!r}: expected '<basename>.<number>', e.g. 'binlog.000042'."
        )
    return int(suffix)


#: bits of a file number in an offset's order (an epoch counts above them)
FILE_NUMBER_BITS = 20


@total_ordering
@dataclass(frozen=True)
class BinlogOffset:
    file: str
    position: int
    gtid_set: str | None = None
    server_id: int | None = None
    epoch: int = 0  # which of the pipeline's servers wrote it (state/servers.py)

    def __post_init__(self) -> None:
        # validates the name; kept, since offsets are compared per change record on the hot path
        number = binlog_file_number(self.file)
        if self.epoch and number >> FILE_NUMBER_BITS:
            raise ConfigurationError(
                f"Binlog file {self.file} of server epoch {self.epoch}: after a failover, binlog file numbers must "
                f"stay below {1 << FILE_NUMBER_BITS} (FLUSH and PURGE binary logs, or RESET MASTER and re-snapshot).")
        object.__setattr__(self, "_order", (self.epoch << FILE_NUMBER_BITS | number, self.position))
        if not isinstance(self.position, int) or self.position < 4:
            raise ConfigurationError(
                f"Malformed binlog position {self.position!r} in {self.file}: positions are integers >= 4."
            )

    @property
    def sort_key(self) -> tuple[int, int]:
        """(epoch << 20 | file number, position): ordered like offsets (epoch 0: the file number)."""
        return self._order  # type: ignore[attr-defined]

    @property
    def file_number(self) -> int:
        return binlog_file_number(self.file)

    @property
    def version(self) -> int:
        """The offset as one int64 ordered like offsets: epoch << 52 | file number << 32 | position
        (sinks store it)."""
        file_order, position = self.sort_key
        return (file_order << 32) | position

    def at(self, file: str, position: int) -> "BinlogOffset":
        """Another offset in the same server's binlog (the same epoch). In the same file (the reader
        makes one per event) it is built without ``__post_init__``: the file's name was checked and
        ordered when this offset was made."""
        if file == self.file and type(position) is int and position >= 4:
            offset = object.__new__(BinlogOffset)
            offset.__dict__.update(file=self.file, position=position, gtid_set=None, server_id=None, epoch=self.epoch,
                                   _order=(self._order[0], position))  # type: ignore[attr-defined]
            return offset
        return BinlogOffset(file, position, epoch=self.epoch)

    def in_epoch(self, epoch: int) -> "BinlogOffset":
        return dataclasses.replace(self, epoch=epoch)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, BinlogOffset):
            return NotImplemented
        return self.sort_key < other.sort_key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BinlogOffset):
            return NotImplemented
        return self.sort_key == other.sort_key

    def __hash__(self) -> int:
        return hash(self.sort_key)

    def __str__(self) -> str:
        return f"{self.file}:{self.position}" + (f" (server epoch {self.epoch})" if self.epoch else "")

    # --- serialisation ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"file": self.file, "position": self.position}
        if self.gtid_set:
            data["gtid_set"] = self.gtid_set
        if self.server_id is not None:
            data["server_id"] = self.server_id
        if self.epoch:
            data["epoch"] = self.epoch
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BinlogOffset":
        try:
            server_id = data.get("server_id")
            return cls(file=str(data["file"]), position=int(data["position"]), gtid_set=data.get("gtid_set"),
                       server_id=None if server_id is None else int(server_id), epoch=int(data.get("epoch", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"Malformed binlog offset {data!r}: expected {{'file': 'binlog.000001', 'position': 4}}."
            ) from exc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "BinlogOffset":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"Malformed binlog offset JSON {text!r}: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigurationError(f"Malformed binlog offset {text!r}: expected a JSON object.")
        return cls.from_dict(data)

    @classmethod
    def parse(cls, text: str) -> "BinlogOffset":
        """Accept ``file:position`` (as printed) or the JSON form."""
        text = text.strip()
        if text.startswith("{"):
            return cls.from_json(text)
        file, sep, pos = text.rpartition(":")
        if not sep or not pos.isdigit():
            raise ConfigurationError(
                f"Malformed binlog offset {text!r}: expected 'binlog.000042:1234' or a JSON object."
            )
        return cls(file=file, position=int(pos))
