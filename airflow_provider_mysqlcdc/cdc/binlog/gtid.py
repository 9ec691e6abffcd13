"""Finding a MariaDB GTID position in a server's binlog: the same point on another server.

A binlog offset (file, position) means something only on the server that wrote it. With GTIDs on,
a replica that logs what it applies (``log_slave_updates``) holds the same transactions under the
same GTIDs, in the same order per replication domain (``gtid_strict_mode``), at other offsets.
``offset_at_gtid_position`` finds the offset in this server's binlog where exactly the transactions
of a GTID position lie behind, so a reader can continue there after a failover with nothing lost
or read twice; when no such offset exists it says why.

Each binlog file starts with a ``Gtid_list`` event: the GTID position at its start. The newest file
that starts at or before the wanted position is listed forward, GTID event by GTID event, until
the position is reached; the server confirms the answer with ``BINLOG_GTID_POS``.
"""

from __future__ import annotations

import pymysql

from airflow_provider_mysqlcdc.cdc.binlog.listing import binlog_events
from airflow_provider_mysqlcdc.cdc.errors import BinlogPurgedError, SourceChangedError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.source.server import binlog_files, current_offset, gtid_position_at, gtid_sequences

#: {domain: sequence number}: where a GTID position stands in each replication domain
Sequences = dict[int, int]


def _format(position: Sequences) -> str:
    return ",".join(f"{d}-*-{n}" for d, n in sorted(position.items())) or "empty"


def offset_at_gtid_position(conn: pymysql.connections.Connection, position: str) -> BinlogOffset:
    """The offset in this server's binlog behind which lie exactly the transactions of ``position``."""
    wanted = gtid_sequences(position)
    head = current_offset(conn)
    have = gtid_sequences(head.gtid_set)
    lacking = {d: n for d, n in wanted.items() if have.get(d, 0) < n}
    if lacking:
        raise SourceChangedError(
            f"This server's binlog ends at GTID position {head.gtid_set or 'empty'}, but the stream has already "
            f"read up to {position}: it lacks transactions {_format(lacking)} (a failover to a replica that had not "
            "received them loses them). Re-snapshot the pipeline into a new sink location and state.")
    files = binlog_files(conn)
    start = None
    for file in reversed(files):  # the newest file starting at or before the wanted position
        if _not_past(_starting_position(conn, file), wanted):
            start = file
            break
    if start is None:
        raise BinlogPurgedError(
            f"GTID position {position} lies before this server's oldest binlog file {files[0] if files else 'none'}: "
            "the binlog there was purged. Re-snapshot the pipeline (or keep binlogs longer: expire_logs_days).",
            missing=position, oldest=BinlogOffset(files[0], 4) if files else None)
    state = _starting_position(conn, start)
    found: BinlogOffset | None = None
    for event in binlog_events(conn, BinlogOffset(start, 4), head):
        if not event.kind.startswith("gtid") or event.kind.startswith("gtid_list"):
            continue
        if state == wanted:
            found = event.start
            break
        state.update(gtid_sequences(event.info))  # "BEGIN GTID 0-1-6", or "GTID 0-1-7" for DDL
        if not _not_past(state, wanted):
            break
    else:
        found = head if state == wanted else None
    there = gtid_position_at(conn, found) if found else None
    if found is None or gtid_sequences(there) != wanted:
        raise SourceChangedError(
            f"No offset in this server's binlog holds exactly GTID position {position} (its replication domains "
            "interleave differently, or it holds other transactions under the same GTIDs: check gtid_strict_mode). "
            "Re-snapshot the pipeline into a new sink location and state.")
    return BinlogOffset(found.file, found.position, gtid_set=there, server_id=head.server_id)


def _not_past(state: Sequences, wanted: Sequences) -> bool:
    return all(d in wanted and n <= wanted[d] for d, n in state.items())


def _starting_position(conn: pymysql.connections.Connection, file: str) -> Sequences:
    """The GTID position at the start of ``file`` (its Gtid_list event)."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINLOG EVENTS IN %s LIMIT 5", (file,))
        for row in cur.fetchall():
            if str(row[2]).lower().startswith("gtid_list"):
                return gtid_sequences(str(row[5]))
    return {}
