"""Listing binlog events with ``SHOW BINLOG EVENTS``: positions, kinds and statements, no row data.

The server scans its files; we page through them (``PAGE_EVENTS`` at a time), so listing a range
costs little memory however long it is. Used to end micro-batches at transaction ends
(ranges.py) and to look ahead for DDL on a table (``table_ddl_after``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pymysql

from airflow_provider_mysqlcdc.cdc.binlog.ddl import parse_ddl
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset, binlog_file_number
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.server import binlog_file_sizes

#: Events listed per ``SHOW BINLOG EVENTS``
PAGE_EVENTS = 10_000
_USE = re.compile(r"^use `((?:[^`]|``)*)`; ", re.IGNORECASE)


@dataclass(frozen=True)
class ListedEvent:
    file: str
    position: int  # where the event starts
    kind: str  # the event type, lower case ("query", "xid", "gtid", "write_rows_v1", ...)
    end_position: int  # where it ends (the next event starts)
    info: str  # a statement for query events, else a summary
    epoch: int = 0  # the server's epoch (state/servers.py), given to the offsets below

    @property
    def start(self) -> BinlogOffset:
        return BinlogOffset(self.file, self.position, epoch=self.epoch)

    @property
    def end(self) -> BinlogOffset:
        return BinlogOffset(self.file, self.end_position, epoch=self.epoch)


def binlog_events(conn: pymysql.connections.Connection, start: BinlogOffset, head: BinlogOffset) -> Iterator[ListedEvent]:
    """The events after ``start`` (an event boundary) that end at or before ``head``, in order."""
    with conn.cursor() as cur:
        for file, _ in files_between(conn, start, head):
            position = start.position if file == start.file else 4
            while True:
                cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(position)} LIMIT {PAGE_EVENTS}", (file,))
                rows = cur.fetchall()
                for row in rows:
                    event = listed_event(file, row, start.epoch)
                    if event.end > head:
                        return
                    yield event
                if len(rows) < PAGE_EVENTS:
                    break
                position = int(rows[-1][4])


def listed_window(conn: pymysql.connections.Connection, start: BinlogOffset, skip: int, count: int) -> list[ListedEvent]:
    """``count`` events of ``start``'s file after its first ``skip`` events from ``start``: the
    server skips to them without sending what it skips."""
    with conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(start.position)} LIMIT {int(skip)}, {int(count)}",
                    (start.file,))
        return [listed_event(start.file, row, start.epoch) for row in cur.fetchall()]


def listed_event(file: str, row: tuple, epoch: int) -> ListedEvent:
    """An event from a row of ``SHOW BINLOG EVENTS`` (Log_name, Pos, Event_type, Server_id,
    End_log_pos, Info)."""
    return ListedEvent(file, int(row[1]), str(row[2]).lower(), int(row[4]), str(row[5]).strip(), epoch)


def files_between(conn: pymysql.connections.Connection, start: BinlogOffset,
                  end: BinlogOffset) -> list[tuple[str, int]]:
    """The server's binlog files (with their sizes) from ``start``'s file to ``end``'s, in order."""
    return [(f, size) for f, size in binlog_file_sizes(conn)
            if start.file_number <= binlog_file_number(f) <= end.file_number]


def opens_transaction(event: ListedEvent) -> bool:
    """BEGIN, or MariaDB's GTID event of a transactional group (its info reads ``BEGIN GTID d-s-n``,
    or ``XA START xid GTID d-s-n`` for an XA transaction's), or MySQL's ``XA START`` (xa.py)."""
    if event.kind == "query":
        info = event.info.upper()
        return info == "BEGIN" or info.startswith(("XA START", "XA BEGIN"))
    return event.kind.startswith("gtid") and event.info.startswith(("BEGIN GTID", "XA START"))


def closes_transaction(event: ListedEvent) -> bool:
    """A commit, or the prepare event that ends an XA transaction's group (its outcome comes later)."""
    return event.kind.startswith(("xid", "xa_prepare")) or (event.kind == "query" and event.info.upper() == "COMMIT")


def table_ddl_after(conn: pymysql.connections.Connection, table_id: TableId, after: BinlogOffset,
                    head: BinlogOffset, max_events: int) -> bool | None:
    """Whether any DDL after ``after`` (up to ``head``) changes the table; None when more than
    ``max_events`` events lie in between (too far to look)."""
    for count, event in enumerate(binlog_events(conn, after, head)):
        if count >= max_events:
            return None
        if event.kind != "query" or event.info.upper() in ("BEGIN", "COMMIT"):
            continue
        use = _USE.match(event.info)
        database = use.group(1).replace("``", "`") if use else ""
        ddl = parse_ddl(event.info[use.end():] if use else event.info, database)
        if ddl is None:
            continue
        if any(c.table == table_id for c in ddl.changes) or ddl.dropped_database == table_id.database:
            return True
    return False
