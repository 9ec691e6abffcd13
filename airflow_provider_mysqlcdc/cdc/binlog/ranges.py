"""Cutting the binlog: where a limited micro-batch ends, and pieces of a range decoded in parallel.

``batch_end``: a micro-batch honours a limit in bytes and events, and still ends where a
transaction ends (the batch's end offset is a safe resume point). It lists the events after the
start (listing.py) and returns the first transaction
end at or after the limit; a transaction larger than the limit makes a batch of its own.

``plan_decode_ranges``:

Decoding (python-mysql-replication) is the stream's bottleneck, and a large batch often is one big
transaction, so cutting only at transaction ends would not help. Instead the range is cut after row
events: a piece starts reading at the table-map event that its first row event needs, lets the
events up to its cut pass undecoded (``BinlogReader(decode_after=...)``; the library decodes rows
lazily), and decodes until the next cut. A piece starts at the first event of the transaction its
cut falls in (GTID or BEGIN), so it sees the transaction's GTID and every table map it may need.
Records carry their offsets, so the consumer restores the global order by sorting.
"""

from __future__ import annotations

from dataclasses import dataclass

import pymysql

from airflow_provider_mysqlcdc.cdc.binlog.listing import binlog_events, closes_transaction, files_between, opens_transaction
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.source.server import gtid_positions

_ROW_EVENTS = ("write_rows", "update_rows", "delete_rows")
#: At most this many events are listed to find cut points; the rest of a range stays in its last piece.
MAX_LISTED_EVENTS = 200_000


def batch_end(conn: pymysql.connections.Connection, start: BinlogOffset, head: BinlogOffset, *,
              max_bytes: int = 0, max_events: int = 0) -> BinlogOffset:
    """The end of a micro-batch starting at ``start`` (a transaction boundary): ``head``, or the first
    transaction end after ``max_bytes`` bytes or ``max_events`` events (0: no limit) when that comes
    first. A transaction larger than the limit is never cut: the batch ends where it ends."""
    if (not max_bytes and not max_events) or head <= start:
        return head
    read_bytes = events = 0
    in_transaction = False  # inside BEGIN ... COMMIT (a statement outside one, a DDL, ends where it ends)
    # the MariaDB GTID position as the batch goes, so that its end says which binlog it belongs to
    gtids = gtid_positions(start.gtid_set) if start.gtid_set else None
    for event in binlog_events(conn, start, head):
        read_bytes, events = read_bytes + event.end_position - event.position, events + 1
        if gtids is not None and event.kind.startswith("gtid") and "GTID " in event.info:
            domain, server, sequence = event.info.rsplit("GTID ", 1)[1].split()[0].split("-")
            gtids[int(domain)] = (int(server), int(sequence))
        if opens_transaction(event):
            in_transaction = True
        elif closes_transaction(event) or (event.kind == "query" and not in_transaction):
            in_transaction = False
            if (max_bytes and read_bytes >= max_bytes) or (max_events and events >= max_events):
                text = ",".join(f"{d}-{s}-{n}" for d, (s, n) in sorted(gtids.items())) if gtids else None
                return BinlogOffset(event.file, event.end_position, gtid_set=text, server_id=head.server_id,
                                    epoch=head.epoch)
    return head


@dataclass(frozen=True)
class DecodeRange:
    read_from: BinlogOffset  # where the binlog connection starts
    decode_after: BinlogOffset | None  # events ending at or before this pass undecoded
    end: BinlogOffset  # events ending after this are not read


def plan_decode_ranges(conn: pymysql.connections.Connection, start: BinlogOffset, end: BinlogOffset,
                       pieces: int, min_bytes: int = 1 << 20) -> list[DecodeRange]:
    """Cut ``(start, end]`` into up to ``pieces`` ranges with about as many row events each."""
    whole = [DecodeRange(start, None, end)]
    if pieces < 2 or end <= start:
        return whole
    sizes = files_between(conn, start, end)
    span = sum(size for _, size in sizes) - start.position - (sizes[-1][1] - end.position if sizes else 0)
    if span < min_bytes:
        return whole
    candidates: list[tuple[BinlogOffset, BinlogOffset]] = []  # (cut after this row event, its transaction start)
    transaction = None
    for count, event in enumerate(binlog_events(conn, start, end)):
        if count >= MAX_LISTED_EVENTS or event.end >= end:
            break
        if event.kind.startswith("gtid") or (opens_transaction(event) and transaction is None):
            transaction = event.start
        elif closes_transaction(event) or event.kind == "rotate":
            transaction = None
        elif event.kind.startswith(_ROW_EVENTS) and transaction is not None:
            candidates.append((event.end, transaction))
    if len(candidates) < pieces:
        return whole
    chosen = [candidates[(i * len(candidates)) // pieces - 1] for i in range(1, pieces)]
    ranges = []
    read_from, decode_after = start, None
    for cut, transaction in chosen:
        ranges.append(DecodeRange(read_from, decode_after, cut))
        read_from, decode_after = transaction, cut
    ranges.append(DecodeRange(read_from, decode_after, end))
    return ranges

