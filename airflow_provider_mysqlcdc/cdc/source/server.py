"""What kind of server we talk to, and reading its binlog position.

MySQL 5.7/8.0 and MariaDB answer ``SHOW MASTER STATUS``; MySQL 8.4 replaced it with
``SHOW BINARY LOG STATUS``. MariaDB keeps its GTID position in ``@@gtid_binlog_pos``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pymysql

from airflow_provider_mysqlcdc.cdc.errors import BinlogPurgedError, PreflightError, SourceChangedError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset, binlog_file_number


@dataclass(frozen=True)
class ServerInfo:
    version: str
    is_mariadb: bool
    major: int
    minor: int

    @property
    def has_binary_log_status(self) -> bool:
        """MySQL 8.2+ has ``SHOW BINARY LOG STATUS`` (and 8.4 removed ``SHOW MASTER STATUS``)."""
        return not self.is_mariadb and (self.major, self.minor) >= (8, 2)


def server_info(conn: pymysql.connections.Connection) -> ServerInfo:
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        version = str(cur.fetchone()[0])
    numbers = version.split("-")[0].split(".")
    return ServerInfo(
        version=version,
        is_mariadb="mariadb" in version.lower(),
        major=int(numbers[0]),
        minor=int(numbers[1]) if len(numbers) > 1 else 0,
    )


def fetch_dict(cur: Any) -> dict[str, Any] | None:
    row = cur.fetchone()
    if row is None:
        return None
    return {desc[0]: value for desc, value in zip(cur.description, row)}


_CONSISTENT_READ_TRIES = 5  # GTID reads around the binlog status before asking for the exact one


def current_offset(conn: pymysql.connections.Connection, info: ServerInfo | None = None) -> BinlogOffset:
    """The binlog offset after the last event written, i.e. where the next event will start.

    On MariaDB the GTID position comes from a second read (``@@gtid_binlog_pos``), so a commit
    between the two would pair the position with a GTID that lies after it. The GTID position is
    read before and after the binlog status: when both agree, no transaction was written in between
    (the status waits for a group being written), so the pair is exact; after a few busy tries the
    server is asked for the GTID position at the position itself (exact, but it reads the file)."""
    info = info or server_info(conn)
    statement = "SHOW BINARY LOG STATUS" if info.has_binary_log_status else "SHOW MASTER STATUS"
    with conn.cursor() as cur:
        cur.execute("SELECT @@server_id, @@gtid_binlog_pos" if info.is_mariadb else "SELECT @@server_id, NULL")
        server_id, gtid_before = cur.fetchone()
        gtid_before = gtid_position_text(gtid_positions(gtid_before))
        for _ in range(_CONSISTENT_READ_TRIES):
            cur.execute(statement)
            row = fetch_dict(cur)
            if not row or not row.get("File"):
                raise PreflightError(
                    "The binary log is off on the source server: start it with log_bin=ON "
                    "(e.g. log-bin=mysql-bin in my.cnf) and restart the server."
                )
            if not info.is_mariadb:
                gtid = row.get("Executed_Gtid_Set") or None  # one statement: consistent with the position
                break
            cur.execute("SELECT @@gtid_binlog_pos")
            gtid = gtid_position_text(gtid_positions(cur.fetchone()[0]))
            if gtid == gtid_before:
                break
            gtid_before = gtid
        else:
            assert row is not None  # checked in the loop
            gtid = gtid_position_at(conn, BinlogOffset(str(row["File"]), int(row["Position"])))
    assert row is not None  # checked in the loop
    return BinlogOffset(file=str(row["File"]), position=int(row["Position"]), gtid_set=gtid or None,
                        server_id=int(server_id))


def binlog_file_sizes(conn: pymysql.connections.Connection) -> list[tuple[str, int]]:
    """The binlog files still on the server with their sizes in bytes, oldest first."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return [(str(row[0]), int(row[1])) for row in cur.fetchall()]


def oldest_offset(conn: pymysql.connections.Connection) -> BinlogOffset:
    """The first offset of the oldest binlog file the server still has."""
    return BinlogOffset(binlog_file_sizes(conn)[0][0], 4)


def binlog_files(conn: pymysql.connections.Connection) -> list[str]:
    """The binlog files still on the server, oldest first."""
    return [name for name, _ in binlog_file_sizes(conn)]


def bytes_between(earlier: BinlogOffset, later: BinlogOffset, sizes: list[tuple[str, int]]) -> int:
    """Binlog bytes from ``earlier`` to ``later`` (how far a reader at ``earlier`` is behind)."""
    if later <= earlier:
        return 0
    if earlier.file == later.file:
        return later.position - earlier.position
    by_name = dict(sizes)
    low, high = binlog_file_number(earlier.file), binlog_file_number(later.file)
    between = sum(size for name, size in sizes if low < binlog_file_number(name) < high)
    return by_name.get(earlier.file, earlier.position) - earlier.position + between + later.position


def binlog_changed_error(what: str) -> SourceChangedError:
    """``what`` (an offset past the server's binlog) explained, with the way out."""
    return SourceChangedError(
        f"{what}: the server's binlog was reset (RESET MASTER), the server was restored from a backup, or the "
        "connection points at another server. Nothing more was read or written. If the source is right, "
        "re-snapshot the pipeline into a new sink location and state.")


_GTID = re.compile(r"(\d+)-(\d+)-(\d+)")


def gtid_positions(text: str | None) -> dict[int, tuple[int, int]]:
    """A MariaDB GTID position (``0-1-42,1-2-7``) or GTID list (``[0-1-42,0-2-40]``) as {domain:
    (server_id, sequence number)}, the highest sequence number of each domain."""
    positions: dict[int, tuple[int, int]] = {}
    for domain, server, sequence in _GTID.findall(text or ""):
        if int(sequence) >= positions.get(int(domain), (0, -1))[1]:
            positions[int(domain)] = (int(server), int(sequence))
    return positions


def gtid_position_text(positions: dict[int, tuple[int, int]]) -> str | None:
    """A MariaDB GTID position as written in offsets: one GTID per domain, in domain order (the
    server's own answers differ in order: ``@@gtid_binlog_pos`` against ``BINLOG_GTID_POS``)."""
    return ",".join(f"{d}-{s}-{n}" for d, (s, n) in sorted(positions.items())) or None


def gtid_sequences(text: str | None) -> dict[int, int]:
    """The highest sequence number per domain in a GTID position or list ({domain: sequence})."""
    return {domain: sequence for domain, (_, sequence) in gtid_positions(text).items()}


def gtid_position_at(conn: pymysql.connections.Connection, offset: BinlogOffset) -> str | None:
    """The MariaDB GTID position this server's binlog holds at ``offset`` (it reads the file up to it)."""
    with conn.cursor() as cur:
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (offset.file, offset.position))
        there = cur.fetchone()[0]
    return None if there is None else gtid_position_text(gtid_positions(there)) or ""


def check_same_binlog(conn: pymysql.connections.Connection, offset: BinlogOffset, *, exact: bool = False) -> None:
    """Refuse an offset that was read from another binlog than this server's, with the way out.

    Cheap, on every call: the offset's server id is the server's, and (MariaDB) no GTID domain of the
    offset is further than the server's binlog head: a reset or restored binlog starts its sequence
    numbers again. ``exact`` (MariaDB; once per stream start: the server reads the binlog file up to
    the offset): the binlog holds at the offset the GTID position recorded with it, which also
    catches a reset binlog that has grown past the old offsets since."""
    info = server_info(conn)
    head = current_offset(conn, info)
    if offset.server_id is not None and head.server_id is not None and offset.server_id != head.server_id:
        raise binlog_changed_error(f"Offset {offset} was read from the binlog of server_id {offset.server_id}, but the "
                                   f"server this connection reaches has server_id {head.server_id} (only the stream "
                                   "follows a failover, on MariaDB with GTIDs)")
    if not info.is_mariadb or not offset.gtid_set:
        return
    recorded, now = gtid_positions(offset.gtid_set), gtid_positions(head.gtid_set)
    behind = [f"{d}-{s}-{n}" for d, (s, n) in sorted(recorded.items()) if d not in now or now[d][1] < n]
    if behind:
        raise binlog_changed_error(f"Offset {offset} comes after GTID(s) {', '.join(behind)}, but the server's binlog "
                                   f"ends at GTID position {head.gtid_set or 'none'}")
    if exact:
        there = gtid_position_at(conn, offset)
        if there is None or gtid_positions(there) != recorded:
            raise binlog_changed_error(f"The binlog held GTID position {offset.gtid_set} at {offset} when it was read, "
                                       f"but the server's binlog holds {there or 'nothing'} there now")


def check_offset_available(conn: pymysql.connections.Connection, offset: BinlogOffset, *,
                           exact: bool = False) -> None:
    """Fail clearly when the binlog an offset points into has been purged, or is not this server's
    (``exact``: see ``check_same_binlog``)."""
    sizes = binlog_file_sizes(conn)
    if sizes and offset.file in dict(sizes) and (offset.file != sizes[-1][0] or offset.position <= sizes[-1][1]):
        check_same_binlog(conn, offset, exact=exact)
        return
    newest = offset.at(sizes[-1][0], max(4, sizes[-1][1])) if sizes else None
    if newest is None or offset > newest:
        raise binlog_changed_error(f"Offset {offset} lies beyond the server's binlog, which ends at {newest or 'nothing'}")
    oldest = offset.at(sizes[0][0], 4)
    raise BinlogPurgedError(
        f"Binlog file {offset.file} (needed from offset {offset}) is no longer on the server; the oldest is "
        f"{sizes[0][0]}. The changes from {offset} to {oldest} are lost to CDC. For the stream: run it with "
        "on_binlog_purged='resnapshot' to re-snapshot exactly the tables that needed them (or re-snapshot those "
        "tables yourself); for a chunk task: retry it. Then raise binlog retention (expire_logs_days / "
        "binlog_expire_logs_seconds) above the longest pause of the pipeline.", missing=offset, oldest=oldest)
