"""Cutting the binlog: where a limited micro-batch ends, and pieces of a range decoded in parallel.

``batch_end``: a micro-batch honours a limit in bytes and events, and still ends where a
transaction ends (the batch's end offset is a safe resume point). It lists the events after the
start page by page (``SHOW BINLOG EVENTS``, a server-side scan) and returns the first transaction
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

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.source.server import binlog_file_sizes

_ROW_EVENTS = ("write_rows", "update_rows", "delete_rows")
#: At most this many events are listed to find cut points; the rest of a range stays in its last piece.
MAX_LISTED_EVENTS = 200_000
#: Events listed per ``SHOW BINLOG EVENTS`` when looking for a batch's end
PAGE_EVENTS = 10_000


def _opens_transaction(kind: str, info: str) -> bool:
    """BEGIN, or MariaDB's GTID event of a transactional group (its info reads ``BEGIN GTID d-s-n``)."""
    return (kind == "query" and info.upper() == "BEGIN") or (kind.startswith("gtid") and info.startswith("BEGIN GTID"))


def _closes_transaction(kind: str, info: str) -> bool:
    return kind.startswith("xid") or (kind == "query" and info.upper() == "COMMIT")


def batch_end(conn: pymysql.connections.Connection, start: BinlogOffset, head: BinlogOffset, *,
              max_bytes: int = 0, max_events: int = 0) -> BinlogOffset:
    """The end of a micro-batch starting at ``start`` (a transaction boundary): ``head``, or the first
    transaction end after ``max_bytes`` bytes or ``max_events`` events (0: no limit) when that comes
    first. A transaction larger than the limit is never cut: the batch ends where it ends."""
    if (not max_bytes and not max_events) or head <= start:
        return head
    files = [f for f, _ in binlog_file_sizes(conn)
             if start.sort_key[0] <= BinlogOffset(f, 4).sort_key[0] <= head.sort_key[0]]
    read_bytes = events = 0
    in_transaction = False  # inside BEGIN ... COMMIT (a statement outside one, a DDL, ends where it ends)
    with conn.cursor() as cur:
        for file in files:
            position = start.position if file == start.file else 4
            while True:
                cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(position)} LIMIT {PAGE_EVENTS}", (file,))
                rows = cur.fetchall()
                for row in rows:
                    begin, kind, end, info = int(row[1]), str(row[2]).lower(), int(row[4]), str(row[5]).strip()
                    if BinlogOffset(file, end) > head:
                        return head
                    read_bytes, events = read_bytes + end - begin, events + 1
                    if _opens_transaction(kind, info):
                        in_transaction = True
                    elif _closes_transaction(kind, info) or (kind == "query" and not in_transaction):
                        in_transaction = False
                        if (max_bytes and read_bytes >= max_bytes) or (max_events and events >= max_events):
                            return BinlogOffset(file, end)
                if len(rows) < PAGE_EVENTS:
                    break
                position = int(rows[-1][4])
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
    sizes = [(f, size) for f, size in binlog_file_sizes(conn)
             if start.sort_key[0] <= BinlogOffset(f, 4).sort_key[0] <= end.sort_key[0]]
    files = [f for f, _ in sizes]
    span = sum(size for _, size in sizes) - start.position - (sizes[-1][1] - end.position if sizes else 0)
    if span < min_bytes:
        return whole
    candidates: list[tuple[BinlogOffset, BinlogOffset]] = []  # (cut after this row event, its transaction start)
    listed = 0
    with conn.cursor() as cur:
        for file in files:
            first = start.position if file == start.file else 4
            cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(first)} LIMIT {MAX_LISTED_EVENTS - listed}", (file,))
            rows = cur.fetchall()
            listed += len(rows)
            transaction = None
            for row in rows:
                position, kind, end_position, info = int(row[1]), str(row[2]).lower(), int(row[4]), str(row[5]).strip()
                cut = BinlogOffset(file, end_position)
                if cut >= end:
                    break
                if kind.startswith("gtid") or (_opens_transaction(kind, info) and transaction is None):
                    transaction = BinlogOffset(file, position)
                elif _closes_transaction(kind, info):
                    transaction = None
                elif kind.startswith(_ROW_EVENTS) and transaction is not None:
                    candidates.append((cut, transaction))
            if listed >= MAX_LISTED_EVENTS or file == end.file:
                break
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

