"""Cutting a binlog range into pieces that can be decoded in parallel, even inside one transaction.

Decoding (python-mysql-replication) is the stream's bottleneck, and a large batch often is one big
transaction, so cutting only at transaction ends would not help. Instead the range is cut after row
events: a piece starts reading at the table-map event that its first row event needs, lets the
events up to its cut pass undecoded (``BinlogReader(decode_after=...)``; the library decodes rows
lazily), and decodes until the next cut. A piece starts at the first event of the transaction its
cut falls in (GTID or BEGIN), so it sees the transaction's GTID and every table map it may need. Records carry their offsets, so the consumer restores the
global order by sorting.
"""

from __future__ import annotations

from dataclasses import dataclass

import pymysql

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.source.server import binlog_file_sizes

_ROW_EVENTS = ("write_rows", "update_rows", "delete_rows")
#: At most this many events are listed to find cut points; the rest of a range stays in its last piece.
MAX_LISTED_EVENTS = 200_000


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
                position, kind, end_position, info = int(row[1]), str(row[2]).lower(), int(row[4]), str(row[5])
                cut = BinlogOffset(file, end_position)
                if cut >= end:
                    break
                if kind.startswith("gtid") or (kind == "query" and info.strip().upper() == "BEGIN" and transaction is None):
                    transaction = BinlogOffset(file, position)
                elif kind.startswith("xid") or (kind == "query" and info.strip().upper() == "COMMIT"):
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

