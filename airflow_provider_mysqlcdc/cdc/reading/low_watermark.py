"""MySQL's low watermark: no earlier than any transaction the snapshot may not see.

MySQL commits a transaction in three stages: it writes it to the binlog (the binlog position
advances), syncs the binlog, then commits it in InnoDB and adds its GTID to ``gtid_executed``. A
``SHOW MASTER STATUS`` read between the first and the last stage reports a position ``P`` past a
transaction the snapshot that starts next cannot see yet: replaying the binlog from ``P`` would skip
it, and the snapshot lacks it, so it would be lost. (MariaDB reports the snapshot's own binlog
position, ``binlog_snapshot_position``, and has no such window.)

The same statement reports ``Executed_Gtid_Set``, ``E``: every transaction in it is committed, so
visible to a snapshot started afterwards. A transaction before ``P`` whose GTID is not in ``E`` was
in flight: the low watermark is the start of the earliest such transaction, else ``P``. Replaying
from there is always correct (a change the snapshot already holds is applied again to the same
result).

Finding them reads the binlog before ``P``. ``InFlightTransactions`` keeps, per reader, the
transactions it has listed whose GTIDs were not executed yet, and lists only the binlog written
since its last look (from the start of the current file the first time), so a reader pays for each
stretch of binlog once. Without GTIDs (``gtid_mode=OFF``) in-flight transactions cannot be told
apart: the low watermark stays ``P`` and the reader says so once.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset

log = logging.getLogger(__name__)

_GTID_NEXT = re.compile(r"GTID_NEXT\s*=\s*'([0-9a-fA-F-]+):(\d+)'")


@dataclass(frozen=True)
class GtidSet:
    """A MySQL GTID set (``uuid:1-5:7,uuid2:1-3``): which transactions it holds."""

    intervals: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> "GtidSet":
        intervals: dict[str, list[tuple[int, int]]] = {}
        for member in (text or "").replace("\n", "").split(","):
            member = member.strip()
            if not member:
                continue
            server, *ranges = member.split(":")
            for item in ranges:
                low, _, high = item.partition("-")
                intervals.setdefault(server.lower(), []).append((int(low), int(high or low)))
        return cls({server: tuple(sorted(ranges)) for server, ranges in intervals.items()})

    def __contains__(self, gtid: tuple[str, int]) -> bool:
        server, number = gtid
        return any(low <= number <= high for low, high in self.intervals.get(server.lower(), ()))


@dataclass(frozen=True)
class Transaction:
    """A transaction of the binlog, by the GTID event that opens it."""

    gtid: tuple[str, int]  # (server uuid, transaction number)
    start: BinlogOffset  # where its GTID event starts


def transactions_in(events: Iterable[Any]) -> list[Transaction]:
    """The transactions ``events`` (listing.py ``ListedEvent``) open: MySQL's ``Gtid`` events."""
    found = []
    for event in events:
        if getattr(event, "kind", "") == "gtid":
            match = _GTID_NEXT.search(getattr(event, "info", ""))
            if match:
                found.append(Transaction((match.group(1).lower(), int(match.group(2))), event.start))
    return found


@dataclass
class InFlightTransactions:
    """One reader's view of the transactions written to the binlog but not yet committed."""

    listed_to: BinlogOffset | None = None  # where listing the binlog stopped last time
    pending: list[Transaction] = field(default_factory=list)
    _warned: bool = False

    def low_watermark(self, head: BinlogOffset, list_events: Callable[[BinlogOffset, BinlogOffset], Iterable[object]]
                      ) -> BinlogOffset:
        """The low watermark for a snapshot started after ``head`` was read (with its executed GTID
        set in ``head.gtid_set``). ``list_events(after, head)``: the binlog's events between."""
        if not head.gtid_set:
            if not self._warned:
                log.warning("the source has no GTIDs (gtid_mode=OFF): a transaction written to the binlog but not yet "
                            "committed when a split's snapshot starts can be missed; turn GTIDs on for exact snapshots")
                self._warned = True
            return head
        after = self.listed_to if self.listed_to is not None and self.listed_to <= head else \
            BinlogOffset(head.file, 4, epoch=head.epoch)
        return self.advance(transactions_in(list_events(after, head)), GtidSet.parse(head.gtid_set), head)

    def advance(self, listed: Iterable[Transaction], executed: GtidSet, head: BinlogOffset) -> BinlogOffset:
        """Take in the transactions listed up to ``head``; the earliest start of those not in
        ``executed``, else ``head``."""
        self.pending = [t for t in [*self.pending, *listed] if t.gtid not in executed]
        self.listed_to = head
        return min([t.start for t in self.pending] + [head])
