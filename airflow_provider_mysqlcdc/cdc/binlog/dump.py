"""The binlog as a server sends it to a replica, framed without python-mysql-replication.

The library builds several Python objects per event (its packet wrapper, the event, the pymysql
packet) before the reader sees it: on a workload of small transactions that framing was half of
what reading the binlog cost (docs/benchmarks.md, "Where the stream's reading goes"), ten times what
a plain loop over the same bytes costs. This module holds a replication connection of its own and
cuts what the server sends into ``RawEvent``s: the event header's fields and the event's body, with
neither the header nor the checksum.

- **The connection.** pymysql performs the handshake (authentication plugins included) on a socket
  this module creates and keeps (``Connection.connect(sock)``, public API); the session is told the
  checksum this reader understands and MariaDB's GTID capability, as the library does, and the dump
  is asked for with ``COM_BINLOG_DUMP`` on that socket. TLS is not done here (pymysql would wrap
  the socket inside itself, out of reach): the connection is plaintext, so a source with TLS
  settings, or a server that offers TLS, is to be read through the library.
- **Read by framing.py** into the reader's events (events.py); a MySQL server is refused here with
  ``LibraryNeeded`` (the library reads it). tests/integration/test_binlog_dump.py holds this module to
  the library's framing, event bodies and table maps on the same binlog.
- **The framing.** A packet is a 3-byte length, a sequence byte and its payload; an event larger
  than 16 MiB - 1 continues in the next packets (each full one is followed by another, possibly
  empty). The first payload byte says what follows: 0x00 an event, 0xFE (short) the end of a
  non-blocking dump, 0xFF an error, raised as pymysql raises the server's errors (so retry.py
  classifies it as it classifies the library's).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import pymysql
from pymysql.constants import CR
from pymysqlreplication.constants import CHARSET, FIELD_TYPE

from airflow_provider_mysqlcdc.cdc.binlog.native import compiled
from airflow_provider_mysqlcdc.cdc.binlog.table_map import labels_in_charset
from airflow_provider_mysqlcdc.cdc.errors import LibraryNeeded
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import Operation
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig

COM_BINLOG_DUMP = 0x12
BINLOG_DUMP_NON_BLOCK = 0x01
#: a packet of this payload length is continued by the next one
FULL_PACKET = 0xFFFFFF
#: timestamp, type, server id, event size, end position, flags
EVENT_HEADER = struct.Struct("<IBIIIH")
_RECEIVE_BYTES = 1 << 20


class RawEvent(NamedTuple):
    """One binlog event as the server sent it: its header's fields and its body (after the 19 header
    bytes, without the checksum). A tuple, so that the compiled cutter builds one cheaply."""

    type: int
    timestamp: int
    server_id: int
    size: int  # the whole event's bytes, header and checksum included (as the binlog file holds it)
    end_position: int  # the offset after the event in its binlog file (0: an artificial event)
    flags: int
    body: bytes


#: why ``cut_events`` stopped: the buffer ends inside a packet, or the next packet is not one whole
#: event (a continued event, the end of a non-blocking dump, an error: read packet by packet)
NEED_BYTES, NOT_ONE_EVENT = 0, 1
#: a ``wanted`` table marking every event type
EVERY_EVENT = b"\x01" * 256


def cut_events(buffer: bytearray, at: int, checksum_bytes: int, wanted: bytes,
               event_class: type[RawEvent]) -> tuple[list[RawEvent], int, int]:
    """The events of the whole packets in ``buffer`` from ``at`` whose type ``wanted`` marks; the
    offset after the last packet cut; and why the cut stopped (``NEED_BYTES`` or ``NOT_ONE_EVENT``).
    The Python twin of the compiled ``mysqlcdc_rowcodec.cut_events``, which ``PacketReader`` prefers."""
    if len(wanted) != 256:
        raise ValueError(f"wanted must mark each of the 256 event types, not {len(wanted)}")
    found: list[RawEvent] = []
    end, unpack = len(buffer), EVENT_HEADER.unpack_from
    while True:
        if end - at < 4:
            return found, at, NEED_BYTES
        length = buffer[at] | buffer[at + 1] << 8 | buffer[at + 2] << 16
        if length == FULL_PACKET or length < 20 + checksum_bytes:
            return found, at, NOT_ONE_EVENT
        if end - at < 4 + length:
            return found, at, NEED_BYTES
        if buffer[at + 4]:
            return found, at, NOT_ONE_EVENT
        if wanted[buffer[at + 9]]:
            timestamp, kind, server_id, size, end_position, flags = unpack(buffer, at + 5)
            found.append(event_class(kind, timestamp, server_id, size, end_position, flags,
                                     bytes(buffer[at + 24:at + 4 + length - checksum_bytes])))
        at += 4 + length


class PacketReader:
    """Reads the payloads of MySQL protocol packets from a socket, joining continued packets."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._buffer = bytearray()
        self._at = 0

    def _need(self, count: int) -> None:
        """At least ``count`` unread bytes in the buffer."""
        while len(self._buffer) - self._at < count:
            if self._at:
                del self._buffer[:self._at]
                self._at = 0
            chunk = self._sock.recv(max(_RECEIVE_BYTES, count - len(self._buffer)))
            if not chunk:
                raise pymysql.err.OperationalError(CR.CR_SERVER_LOST,
                                                   "Lost connection to server during the binlog dump")
            self._buffer += chunk

    def payload(self) -> bytes:
        """The next packet's payload (a continued one joined with its continuations)."""
        parts = []
        while True:
            self._need(4)
            buffer, at = self._buffer, self._at
            length = buffer[at] | buffer[at + 1] << 8 | buffer[at + 2] << 16
            self._need(4 + length)
            start = self._at + 4
            parts.append(bytes(self._buffer[start:start + length]))
            self._at = start + length
            if length < FULL_PACKET:
                return parts[0] if len(parts) == 1 else b"".join(parts)

    def events(self, checksum_bytes: int, wanted: bytes = EVERY_EVENT) -> Iterator[RawEvent]:
        """The events whose type ``wanted`` marks until a non-blocking dump's end; a server's error is
        raised. Whole received packets are cut in bulk (compiled where built), the rest one by one."""
        cut = compiled("cut_events") or cut_events
        while True:
            found, self._at, stop = cut(self._buffer, self._at, checksum_bytes, wanted, RawEvent)
            yield from found
            if stop == NEED_BYTES:
                self._need(len(self._buffer) - self._at + 1)
                continue
            payload = self.payload()  # a continued event, the end of a dump or an error
            first = payload[0] if payload else 0xFE
            if first == 0xFE and len(payload) < 9:  # EOF: a non-blocking dump reached the binlog's end
                return
            if first == 0xFF:
                pymysql.err.raise_mysql_exception(payload)
            event = _raw_event(payload, checksum_bytes)
            if wanted[event.type]:
                yield event


def _raw_event(payload: bytes, checksum_bytes: int) -> RawEvent:
    """The event one packet's (or one continued packet's) payload holds."""
    timestamp, kind, server_id, size, end_position, flags = EVENT_HEADER.unpack_from(payload, 1)
    return RawEvent(kind, timestamp, server_id, size, end_position, flags, payload[20:len(payload) - checksum_bytes])


def dump_command(start: BinlogOffset, server_id: int, follow: bool) -> bytes:
    """The ``COM_BINLOG_DUMP`` packet (sequence 0) asking for the binlog from ``start``."""
    payload = struct.pack("<BIHI", COM_BINLOG_DUMP, start.position, 0 if follow else BINLOG_DUMP_NON_BLOCK,
                          server_id) + start.file.encode()
    return struct.pack("<I", len(payload))[:3] + b"\x00" + payload


class BinlogDump:
    """A replication connection of our own, from ``start``: ``events()`` until a non-blocking dump's
    end (``follow=False``), or for as long as the server sends (heartbeats every ``heartbeat_s``)."""

    def __init__(self, source: SourceConfig, start: BinlogOffset, *, server_id: int, follow: bool = False,
                 heartbeat_s: float = 1.0):
        self.source = source
        self.start = start
        self.server_id = server_id
        self.follow = follow
        self.heartbeat_s = heartbeat_s
        self._sock: socket.socket | None = None
        self._conn: Any = None

    def events(self, wanted: bytes = EVERY_EVENT) -> Iterator[RawEvent]:
        """The dump's events whose type ``wanted`` marks (a byte per event type, nonzero: wanted)."""
        sock = socket.create_connection((self.source.host, self.source.port), self.source.connect_timeout_s)
        self._sock = sock
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        conn = pymysql.connect(host=self.source.host, port=self.source.port, user=self.source.user,
                               password=self.source.secret, charset="utf8mb4", ssl_disabled=True,
                               connect_timeout=self.source.connect_timeout_s, defer_connect=True)
        self._conn = conn
        conn.connect(sock)
        if "mariadb" not in conn.get_server_info().lower():
            raise LibraryNeeded(f"a MySQL server ({conn.get_server_info()}): its events are read by the library")
        with conn.cursor() as cur:
            cur.execute("SELECT @@global.binlog_checksum")
            checksum = str(cur.fetchone()[0] or "NONE").upper()
            if checksum != "NONE":
                cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
            if self.follow:
                cur.execute("SET @master_heartbeat_period = %s", (int(self.heartbeat_s * 1_000_000_000),))
            cur.execute("SET @mariadb_slave_capability = 4")  # GTID events, as the library asks
        sock.settimeout(None)
        sock.sendall(dump_command(self.start, self.server_id, self.follow))
        yield from PacketReader(sock).events(0 if checksum == "NONE" else 4, wanted)

    def close(self) -> None:
        """Close the connection (its socket is this module's: pymysql's close would write a command to it)."""
        if self._sock is not None:
            try:  # now, not when pymysql's file object on the socket is collected
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # not connected (any more)
            self._sock.close()
            self._sock = self._conn = None


# --- event bodies (checked against python-mysql-replication's in test_binlog_dump.py) ----------------

ROTATE, QUERY, XID, TABLE_MAP, XA_PREPARE = 4, 2, 16, 19, 38
#: row events' types and the change each writes: v1 (23-25), and v2 (30-32) with extra data after the flags
ROW_OPERATIONS = {23: Operation.CREATE, 24: Operation.UPDATE, 25: Operation.DELETE,
                  30: Operation.CREATE, 31: Operation.UPDATE, 32: Operation.DELETE}
ROWS_V2 = frozenset({30, 31, 32})
MARIADB_GTID = 162
_QUERY_POST_HEADER = struct.Struct("<IIBHH")  # thread id, exec time, schema length, error code, status length


def length_coded(data: bytes, at: int) -> tuple[int, int]:
    """A length-coded integer at ``at``: its value and the offset after it."""
    first = data[at]
    if first < 0xFB:
        return first, at + 1
    if first == 0xFC:
        return data[at + 1] | data[at + 2] << 8, at + 3
    if first == 0xFD:
        return data[at + 1] | data[at + 2] << 8 | data[at + 3] << 16, at + 4
    return int.from_bytes(data[at + 1:at + 9], "little"), at + 9


def rotate(body: bytes) -> tuple[str, int]:
    """A rotate event's next binlog file and position."""
    return body[8:].decode(), int.from_bytes(body[:8], "little")


def query(body: bytes) -> tuple[str, str]:
    """A query event's default schema and statement."""
    _, _, schema_length, _, status_length = _QUERY_POST_HEADER.unpack_from(body, 0)
    at = _QUERY_POST_HEADER.size + status_length
    schema = body[at:at + schema_length].decode()
    return schema, body[at + schema_length + 1:].decode("utf-8", "backslashreplace")  # as the library


def xid(body: bytes) -> int:
    return int.from_bytes(body[:8], "little")


def mariadb_gtid(body: bytes, server_id: int) -> tuple[str, int]:
    """A MariaDB GTID event's GTID (domain-server-sequence) and flags."""
    sequence = int.from_bytes(body[:8], "little")
    domain = int.from_bytes(body[8:12], "little")
    return f"{domain}-{server_id}-{sequence}", body[12]


def xa_prepare(body: bytes) -> tuple[bool, int, bytes, bytes]:
    """An XA prepare event's one-phase flag, and its xid: format id, gtrid and bqual."""
    one_phase = bool(body[0])
    format_id, gtrid_length, bqual_length = struct.unpack_from("<III", body, 1)
    gtrid = body[13:13 + gtrid_length]
    return one_phase, format_id, gtrid, body[13 + gtrid_length:13 + gtrid_length + bqual_length]


def table_map_header(body: bytes) -> tuple[int, str, str, int]:
    """A table map's table id, schema, table, and where its column count starts."""
    table_id = int.from_bytes(body[:6], "little")
    at = 8
    schema_length = body[at]
    schema = body[at + 1:at + 1 + schema_length].decode()
    at += 2 + schema_length
    table_length = body[at]
    table = body[at + 1:at + 1 + table_length].decode()
    return table_id, schema, table, at + 2 + table_length


def rows_header(kind: int, body: bytes) -> tuple[int, int, int]:
    """A row event's table id, column count and where its column bitmaps start."""
    table_id = int.from_bytes(body[:6], "little")
    at = 8
    if kind in ROWS_V2:
        at += int.from_bytes(body[at:at + 2], "little")  # extra data, its length included
    count, at = length_coded(body, at)
    return table_id, count, at


# --- table maps (the columns with their optional metadata, binlog_row_metadata=FULL) ---------------

NUMERIC = {FIELD_TYPE.TINY, FIELD_TYPE.SHORT, FIELD_TYPE.INT24, FIELD_TYPE.LONG, FIELD_TYPE.LONGLONG,
           FIELD_TYPE.NEWDECIMAL, FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE, FIELD_TYPE.YEAR}
#: columns a charset is logged for (MariaDB also logs one for GEOMETRY); ENUM and SET have their own
CHARACTER = {FIELD_TYPE.STRING, FIELD_TYPE.VAR_STRING, FIELD_TYPE.VARCHAR, FIELD_TYPE.BLOB, FIELD_TYPE.GEOMETRY}
#: optional metadata (binlog_row_metadata=FULL): the fields read here
SIGNEDNESS, DEFAULT_CHARSET, COLUMN_CHARSET, COLUMN_NAME, SET_STR_VALUE, ENUM_STR_VALUE = 1, 2, 3, 4, 5, 6
SIMPLE_PRIMARY_KEY, ENUM_AND_SET_DEFAULT_CHARSET, ENUM_AND_SET_COLUMN_CHARSET = 8, 10, 11


@dataclass
class MapColumn:
    """One column of a table map: its storage type and parameters, and what the optional metadata says."""

    type: int
    name: str | None = None
    unsigned: bool = False
    is_primary: bool = False
    collation_id: int | None = None
    max_length: int | None = None
    size: int | None = None  # FLOAT/DOUBLE bytes; ENUM/SET storage bytes
    fsp: int | None = None
    length_size: int | None = None
    precision: int | None = None
    decimals: int | None = None
    bits: int | None = None
    enum_values: list[str] | None = None
    set_values: list[str] | None = None
    #: the codec name and collation python-mysql-replication gives the collation id (``named_charsets``)
    character_set_name: str | None = None
    collation_name: str | None = None

    @property
    def bytes(self) -> int:
        """A BIT column's storage bytes."""
        return ((self.bits or 0) + 7) // 8


def _column(kind: int, meta: bytes, at: int) -> tuple[MapColumn, int]:
    """A column of storage type ``kind`` with its parameters read from the type metadata at ``at``."""
    if kind == FIELD_TYPE.VARCHAR:
        return MapColumn(kind, max_length=int.from_bytes(meta[at:at + 2], "little")), at + 2
    if kind in (FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE):
        return MapColumn(kind, size=meta[at]), at + 1
    if kind in (FIELD_TYPE.TIMESTAMP2, FIELD_TYPE.DATETIME2, FIELD_TYPE.TIME2):
        return MapColumn(kind, fsp=meta[at]), at + 1
    if kind in (FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING):
        value = meta[at] << 8 | meta[at + 1]
        real = value >> 8
        if real in (FIELD_TYPE.ENUM, FIELD_TYPE.SET):
            return MapColumn(real, size=value & 0xFF), at + 2
        return MapColumn(kind, max_length=(((value >> 4) & 0x300) ^ 0x300) + (value & 0xFF)), at + 2
    if kind in (FIELD_TYPE.BLOB, FIELD_TYPE.GEOMETRY, FIELD_TYPE.JSON):
        return MapColumn(kind, length_size=meta[at]), at + 1
    if kind == FIELD_TYPE.NEWDECIMAL:
        return MapColumn(kind, precision=meta[at], decimals=meta[at + 1]), at + 2
    if kind == FIELD_TYPE.BIT:
        return MapColumn(kind, bits=meta[at + 1] * 8 + meta[at]), at + 2
    return MapColumn(kind), at


def _ints(value: bytes) -> list[int]:
    found, at = [], 0
    while at < len(value):
        number, at = length_coded(value, at)
        found.append(number)
    return found


def _strings(value: bytes, at: int = 0, count: int | None = None) -> tuple[list[str], int]:
    """Length-coded strings as UTF-8, each one's bytes kept where they are not (``surrogateescape``:
    ENUM and SET labels are in their column's charset, decoded once it is known)."""
    found: list[str] = []
    while at < len(value) and (count is None or len(found) < count):
        length, at = length_coded(value, at)
        found.append(value[at:at + length].decode("utf-8", "surrogateescape"))
        at += length
    return found, at


def _charsets(value: bytes, columns: list[MapColumn], of: set[int], by_default: bool) -> None:
    """The collation of each column whose type is in ``of``: a default and exceptions by position
    among those columns (``by_default``), or one per column."""
    chosen = [c for c in columns if c.type in of]
    if by_default:
        numbers = _ints(value)
        collations = [numbers[0]] * len(chosen)
        for index in range(1, len(numbers) - 1, 2):
            collations[numbers[index]] = numbers[index + 1]
    else:
        collations = _ints(value)
    for column, collation in zip(chosen, collations):
        column.collation_id = collation


def table_map_columns(body: bytes, at: int) -> list[MapColumn]:
    """The columns of a table map whose column count starts at ``at`` (``table_map_header``)."""
    count, at = length_coded(body, at)
    kinds = body[at:at + count]
    at += count
    meta_length, at = length_coded(body, at)
    meta, columns, meta_at = body[at:at + meta_length], [], 0
    for kind in kinds:
        column, meta_at = _column(kind, meta, meta_at)
        columns.append(column)
    at += meta_length + (count + 7) // 8  # the type metadata, the nullability bitmap
    while at < len(body):
        field = body[at]
        length, at = length_coded(body, at + 1)
        value, at = body[at:at + length], at + length
        if field == SIGNEDNESS:
            numeric = [c for c in columns if c.type in NUMERIC]
            for index, column in enumerate(numeric):
                column.unsigned = bool(value[index // 8] & (0x80 >> index % 8))
        elif field in (DEFAULT_CHARSET, COLUMN_CHARSET):
            _charsets(value, columns, CHARACTER, field == DEFAULT_CHARSET)
        elif field in (ENUM_AND_SET_DEFAULT_CHARSET, ENUM_AND_SET_COLUMN_CHARSET):
            _charsets(value, columns, {FIELD_TYPE.ENUM, FIELD_TYPE.SET}, field == ENUM_AND_SET_DEFAULT_CHARSET)
        elif field == COLUMN_NAME:
            for column, name in zip(columns, _strings(value)[0]):
                column.name = name
        elif field in (SET_STR_VALUE, ENUM_STR_VALUE):
            kind = FIELD_TYPE.SET if field == SET_STR_VALUE else FIELD_TYPE.ENUM
            chosen, inner = [c for c in columns if c.type == kind], 0
            for column in chosen:
                labels_count, inner = length_coded(value, inner)
                labels, inner = _strings(value, inner, labels_count)
                if field == SET_STR_VALUE:
                    column.set_values = labels
                else:
                    column.enum_values = ["", *labels]
        elif field == SIMPLE_PRIMARY_KEY:  # as the library: a key with a column prefix marks no column
            for index in _ints(value):
                columns[index].is_primary = True
    named_charsets(columns)
    return columns


def named_charsets(columns: list[MapColumn]) -> None:
    """Each column's charset and collation named from its collation id as python-mysql-replication
    names them on MariaDB (its table of ids, public in ``pymysqlreplication.constants.CHARSET``), so
    that a table map decodes alike whichever framing read it: the charset as pymysql's codec name
    (records/charsets.py reads those), an id the table lacks as UTF-8 with no collation. ENUM and
    SET labels are then decoded with their column's charset."""
    for column in columns:
        if column.collation_id is not None:
            found = CHARSET.charset_by_id(column.collation_id, "mariadb")
            column.character_set_name = found.encoding if found is not None else "utf8"
            column.collation_name = found.collation if found is not None else None
            labels_in_charset(column)
