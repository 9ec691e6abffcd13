"""Where a table captured without a snapshot starts streaming, besides the binlog head and a
``file:position``: the oldest binlog left (``earliest``), the first transaction at or after a time
(``timestamp``), and a MariaDB GTID position.

A time is found without reading the whole binlog: the files are searched by the time of their first
transaction (one short read each, ``log2(files)`` of them), and only the one file the time falls in
is read, event header by event header, up to the first transaction written at or after it. Binlog
times are the server's event timestamps, in whole seconds: "at or after 12:00:00.5" starts at the
first transaction of 12:00:01. A transaction is found by its GTID event: MariaDB writes one for every
transaction; MySQL with ``gtid_mode=ON``.

Each offset comes with the server's id and, on MariaDB, the GTID position there, as
``current_offset`` gives them, so it is placed among the pipeline's servers like any other.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent

from airflow_provider_mysqlcdc.cdc.binlog.gtid import offset_at_gtid_position
from airflow_provider_mysqlcdc.cdc.errors import BinlogPurgedError, ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset, binlog_file_number
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig, pick_server_id
from airflow_provider_mysqlcdc.cdc.source.server import binlog_files, current_offset, gtid_position_at, server_info


def parse_start_time(value: Any) -> float:
    """A start time as seconds since the epoch: a number, or ISO 8601 with a time zone
    (``2026-11-26T12:00:00+00:00``, ``...Z``)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigurationError(f"Malformed start time {value!r}: write ISO 8601 with a time zone "
                                 "('2026-11-26T12:00:00+00:00') or seconds since the epoch.") from None
    if when.tzinfo is None:
        raise ConfigurationError(f"Start time {value!r} has no time zone: binlog times are instants, so write it "
                                 "with one ('+00:00', 'Z').")
    return when.timestamp()


def is_gtid_position(value: Any) -> bool:
    """``0-1-100`` or ``0-1-100,1-2-7``: a MariaDB GTID position (domain-server-sequence per domain)."""
    numbers = [part.strip().split("-") for part in str(value).strip().split(",")]
    return all(len(n) == 3 and all(x.isdigit() for x in n) for n in numbers)


def earliest_offset(conn: pymysql.connections.Connection) -> BinlogOffset:
    """The start of the oldest binlog file the server still has."""
    files = binlog_files(conn)
    if not files:
        raise ConfigurationError("The server keeps no binlog files: enable the binlog (log_bin) to stream from it.")
    return _offset_here(conn, BinlogOffset(files[0], 4))


def gtid_offset(conn: pymysql.connections.Connection, position: str) -> BinlogOffset:
    """The offset behind which lie exactly the transactions of MariaDB GTID ``position``."""
    if not server_info(conn).is_mariadb:
        raise ConfigurationError(f"Start offset {position!r} is a MariaDB GTID position, and this server is MySQL: "
                                 "give a file:position (SHOW BINARY LOG STATUS) or a start time instead.")
    return offset_at_gtid_position(conn, position)


def offset_at_time(source: SourceConfig, conn: pymysql.connections.Connection, at_s: float) -> BinlogOffset:
    """The start of the first transaction written at or after ``at_s`` (the binlog head when none is yet)."""
    files = binlog_files(conn)
    if not files:
        raise ConfigurationError("The server keeps no binlog files: enable the binlog (log_bin) to stream from it.")
    firsts: dict[str, tuple[float, BinlogOffset] | None] = {}

    def first_of(file: str) -> tuple[float, BinlogOffset] | None:
        if file not in firsts:
            firsts[file] = next(_transactions(source, BinlogOffset(file, 4), only_file=True), None)
        return firsts[file]

    index = last_starting_at_or_before(files, first_of, at_s)
    if index is None:  # the oldest file's first transaction is after the time
        first = first_of(files[0])
        if first is not None and _whole_second(at_s) < first[0] and not _nothing_purged(files):
            raise BinlogPurgedError(
                f"Start time {_when(at_s)} lies before the server's oldest binlog, whose first transaction was "
                f"written at {_when(first[0])}: the changes in between may have been purged. Start at or after it, or "
                "use startup mode 'earliest' to start from the oldest binlog left knowingly.",
                missing=None, oldest=BinlogOffset(files[0], 4))
        index = 0
    for file in files[index:]:
        for when, offset in _transactions(source, BinlogOffset(file, 4), only_file=True):
            if when >= _whole_second(at_s):
                return _offset_here(conn, offset)
    return current_offset(conn)


def last_starting_at_or_before(files: Sequence[str], first: Callable[[str], tuple[float, Any] | None],
                               at_s: float) -> int | None:
    """The index of the newest file whose first transaction was written at or before ``at_s`` (files
    without a transaction count as starting at their successor's time), by binary search; None when
    even the oldest starts after it."""
    low, high, found = 0, len(files) - 1, None
    while low <= high:
        middle = (low + high) // 2
        probe = middle
        while probe <= high and first(files[probe]) is None:  # an empty file: look at the next one
            probe += 1
        start = first(files[probe]) if probe <= high else None
        if start is None or start[0] > _whole_second(at_s):
            high = middle - 1
        else:
            found, low = probe, probe + 1
    return found


def _nothing_purged(files: Sequence[str]) -> bool:
    """The oldest binlog file is the server's first (nothing was ever purged): a time before it
    loses nothing."""
    return binlog_file_number(files[0]) == 1


def _whole_second(at_s: float) -> float:
    """Binlog times are whole seconds: a time within a second is reached by the next one's events."""
    whole = float(int(at_s))
    return whole if whole == at_s else whole + 1


def _transactions(source: SourceConfig, start: BinlogOffset, *, only_file: bool) -> Iterator[tuple[float, BinlogOffset]]:
    """(time, offset where it starts) of each transaction from ``start``: its GTID event's header."""
    stream = BinLogStreamReader(connection_settings=source.replication_settings(), server_id=pick_server_id(),
                                log_file=start.file, log_pos=start.position, resume_stream=True, blocking=False,
                                only_events=[GtidEvent, MariadbGtidEvent])
    try:
        for event in stream:
            if only_file and stream.log_file != start.file:
                return
            end = int(event.packet.log_pos)
            yield float(event.timestamp), BinlogOffset(stream.log_file, end - int(event.packet.event_size))
    finally:
        stream.close()


def _offset_here(conn: pymysql.connections.Connection, offset: BinlogOffset) -> BinlogOffset:
    """``offset`` with the server's id and (MariaDB) its GTID position there."""
    head = current_offset(conn)
    gtid = gtid_position_at(conn, offset) if head.gtid_set is not None else None
    return BinlogOffset(offset.file, offset.position, gtid_set=gtid, server_id=head.server_id)


def _when(at_s: float) -> str:
    return dt.datetime.fromtimestamp(at_s, dt.timezone.utc).isoformat(timespec="seconds")
