"""Where a chunk-key value sits in its column's order, as the database defines it.

Split planning and the snapshot SELECT compare keys in SQL. The split reader and the binlog filter
must also place keys they decode from the binlog into splits; doing that with Python's ``<`` on
strings would ignore collations ('a' = 'A' under a case-insensitive collation, trailing spaces are
ignored under PAD SPACE, ...). So every chunk key maps to a *sort key* whose Python order equals the
database's order:

- character columns: the collation's weight string, computed by the server itself
  (``WEIGHT_STRING(... AS CHAR(n))`` pads like PAD SPACE comparison does), cached;
- numbers, DECIMAL, temporal types, bytes: the normalised value itself, whose Python order is the
  database's (binary strings compare bytewise in both);
- MariaDB's INET4 and INET6 (normalised to their text): the address's bytes, which the server compares;
- MariaDB's UUID (normalised to its text): the bytes in the order the server's index compares them
  (``uuid_sort_key``). tests/integration/test_key_types.py holds
  every chunk-key type to the server's ORDER BY.
"""

from __future__ import annotations

import datetime as dt
import decimal
import ipaddress
import re
import struct
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pymysql

from airflow_provider_mysqlcdc.cdc.errors import InternalError
from airflow_provider_mysqlcdc.cdc.model.schema import Column
from airflow_provider_mysqlcdc.cdc.records.values import ZeroDate

_WEIGHT_BATCH = 200
_CACHE_SIZE = 200_000


def _itself(value: Any) -> Any:
    return value


def uuid_sort_key(text: str) -> bytes:
    """MariaDB's index order of UUIDs (its in-record form): a UUID whose seventh byte lies in
    0x01..0x5F (version 0 to 5, not all zero) and whose variant's top bit is set is stored with its
    five groups from last to first (time-based ones then sort by time), any other as written; the
    index compares those bytes."""
    raw = uuid.UUID(text).bytes
    if 0 < raw[6] < 0x60 and raw[8] & 0x80:
        return raw[10:16] + raw[8:10] + raw[6:8] + raw[4:6] + raw[0:4]
    return raw


def _inet6_sort_key(text: str) -> bytes:
    return ipaddress.IPv6Address(text if ":" in text else f"::ffff:{text}").packed


def _inet4_sort_key(text: str) -> bytes:
    return ipaddress.IPv4Address(text).packed


@dataclass(frozen=True, order=True)
class TemporalKey:
    """Where a DATE, DATETIME or TIMESTAMP value sits in the server's order: ``number`` is the day's
    ordinal (DATE) or the microseconds since the epoch (DATETIME naive, TIMESTAMP in UTC). A value with
    no calendar date (``ZeroDate``) sits where the server puts it, which compares year, month, day
    and time as numbers: right after the last instant before the first real date that follows it
    (``number``), ordered among its likes by its ``parts``."""

    number: int
    parts: tuple[int, ...] = ()


def _temporal_sort_key(kind: str) -> Callable[[Any], TemporalKey]:
    def key(value: Any) -> TemporalKey:
        if isinstance(value, str):  # a ZeroDate, or a bound of a split carried as text
            parts = ZeroDate(value).parts
            try:
                value = dt.datetime(*parts)
            except ValueError:  # no calendar date
                return TemporalKey(_number(kind, _next_real(parts)) - 1, parts)
        return TemporalKey(_number(kind, value))

    return key


def _number(kind: str, value: dt.date) -> int:
    if kind == "date":
        return value.toordinal() if not isinstance(value, dt.datetime) else value.date().toordinal()
    if not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if kind == "timestamp" and value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return (value - (_EPOCH_UTC if value.tzinfo else _EPOCH)) // dt.timedelta(microseconds=1)


def _next_real(parts: tuple[int, ...]) -> dt.date:
    """The first calendar date after a date with the given (impossible) year, month and day."""
    year, month, day = parts[:3]
    if year == 0:
        return dt.date.min
    if month == 0:
        return dt.date(year, 1, 1)
    if day == 0:
        return dt.date(year, month, 1)
    if month == 12:
        return dt.date(year + 1, 1, 1) if year < dt.MAXYEAR else dt.date.max
    return dt.date(year, month + 1, 1)  # a day past the month's end (ALLOW_INVALID_DATES)


#: sort keys of the types whose normalised value does not order like the server orders them
_SORT_KEYS: dict[str, Callable[[Any], Any]] = {"uuid": uuid_sort_key, "inet6": _inet6_sort_key,
                                               "inet4": _inet4_sort_key, "date": _temporal_sort_key("date"),
                                               "datetime": _temporal_sort_key("datetime"),
                                               "timestamp": _temporal_sort_key("timestamp")}


class KeyOrdering:
    """Maps chunk-key values of one column to sort keys. Thread-unsafe; make one per reader."""

    def __init__(self, column: Column, connect: Callable[[], pymysql.connections.Connection] | None = None):
        self.column = column
        self._connect = connect
        self._conn: pymysql.connections.Connection | None = None
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._weight_sql: str | None = None
        self._simple: Callable[[Any], Any] | None = None if column.is_text else _SORT_KEYS.get(column.data_type, _itself)

    @property
    def needs_database(self) -> bool:
        return self._simple is None

    def sort_key(self, value: Any) -> Any:
        return self.sort_keys([value])[0]

    def sort_keys(self, values: Iterable[Any]) -> list[Any]:
        values = list(values)
        if self._simple is not None:
            return [None if v is None else self._simple(v) for v in values]
        missing = list(dict.fromkeys(v for v in values if v is not None and v not in self._cache))
        for start in range(0, len(missing), _WEIGHT_BATCH):
            self._fetch_weights(missing[start : start + _WEIGHT_BATCH])
        keys: list[bytes | None] = []
        for v in values:
            if v is None:
                keys.append(None)
            else:
                self._cache.move_to_end(v)
                keys.append(self._cache[v])
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return keys

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # --- weights from the server -----------------------------------------------------------------
    def _fetch_weights(self, batch: list[str]) -> None:
        if self._conn is None:
            if self._connect is None:
                raise InternalError(f"Ordering keys of text column {self.column.name!r} needs a database connection")
            self._conn = self._connect()
        if self._weight_sql is None:
            self._weight_sql = self._weight_expression(self._conn)
        sql = "SELECT " + ", ".join([self._weight_sql] * len(batch))
        with self._conn.cursor() as cur:
            cur.execute(sql, batch)
            weights = cur.fetchone()
        for value, weight in zip(batch, weights):
            self._cache[value] = bytes(weight)

    def _weight_expression(self, conn: pymysql.connections.Connection) -> str:
        charset = _sql_name(self.column.charset or "utf8mb4")
        collation = _sql_name(self.column.collation or f"{charset}_bin")
        expression = f"CONVERT(%s USING {charset}) COLLATE {collation}"
        if _is_pad_space(conn, collation) and self.column.char_max_length:
            return f"WEIGHT_STRING({expression} AS CHAR({int(self.column.char_max_length)}))"
        return f"WEIGHT_STRING({expression})"


def _is_pad_space(conn: pymysql.connections.Connection, collation: str) -> bool:
    """MySQL 8 reports PAD_ATTRIBUTE; MariaDB marks NO PAD collations by 'nopad' in the name."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'information_schema' "
            "AND TABLE_NAME = 'COLLATIONS' AND COLUMN_NAME = 'PAD_ATTRIBUTE'"
        )
        if cur.fetchone()[0]:
            cur.execute("SELECT PAD_ATTRIBUTE FROM information_schema.COLLATIONS WHERE COLLATION_NAME = %s", (collation,))
            row = cur.fetchone()
            return bool(row) and str(row[0]).upper() == "PAD SPACE"
    return "nopad" not in collation.lower()


def _sql_name(name: str) -> str:
    """Charset and collation names go into SQL text; they come from information_schema but are checked."""
    if not re.fullmatch(r"[A-Za-z0-9_]+", name):
        raise ValueError(f"Unexpected charset or collation name {name!r}")
    return name


# --- an order-preserving text form of sort keys ------------------------------------------------------
# Sinks store it beside each row (``_cdc_chunk``), so that "the rows of split [start, end)" is a plain
# string range predicate in any lakehouse engine, exact under the source's collation and for every
# chunk-key type: hex(a) < hex(b) iff a < b.

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
#: hex digits of a ZeroDate's year, month, day, hour, minute, second and microsecond in its encoding
_PART_WIDTHS = (4, 1, 2, 2, 2, 2, 5)


def encode_sort_key(key: Any) -> str:
    """Hex text whose string order equals the order of ``key`` (a value from ``KeyOrdering``)."""
    if isinstance(key, bytes):
        return key.hex()
    if isinstance(key, bool):
        return _encode_int(int(key))
    if isinstance(key, int):
        return _encode_int(key)
    if isinstance(key, decimal.Decimal):
        # All values of a DECIMAL column carry the column's scale, so the unscaled integer orders them.
        sign, digits, exponent = key.as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * (10 ** max(exponent, 0))  # type: ignore[operator]  # a finite Decimal: an int exponent
        return _encode_int(-unscaled if sign else unscaled)
    if isinstance(key, float):
        bits = struct.unpack(">Q", struct.pack(">d", key))[0]
        bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | (1 << 63)
        return f"{bits:016x}"
    if isinstance(key, TemporalKey):  # a ZeroDate's parts follow its number: after it, before the next
        suffix = "".join(f"{p:0{w}x}" for p, w in zip(key.parts, _PART_WIDTHS))
        return _encode_int(key.number) + (f"~{suffix}" if key.parts else "")
    if isinstance(key, dt.datetime):
        base = _EPOCH_UTC if key.tzinfo else _EPOCH
        return _encode_int((key - base) // dt.timedelta(microseconds=1))
    if isinstance(key, dt.date):
        return _encode_int(key.toordinal())
    if isinstance(key, dt.timedelta):
        return _encode_int(key // dt.timedelta(microseconds=1))
    raise TypeError(f"no order-preserving encoding for {type(key).__name__}")


def _encode_int(n: int) -> str:
    """Sign, then length, then magnitude; negative numbers complemented so larger |n| sorts first."""
    magnitude = abs(n)
    body = magnitude.to_bytes(max(1, (magnitude.bit_length() + 7) // 8), "big")
    if n >= 0:
        return "8" + f"{len(body):02x}" + body.hex()
    inverted = bytes(255 - b for b in body)
    return "7" + f"{255 - len(body):02x}" + inverted.hex()


def encode_int_sort_keys(values: Any) -> Any:
    """``encode_sort_key`` for a whole Arrow integer array at once (NumPy, no Python loop).

    Same strings as the scalar function: sign digit, length byte, minimal big-endian magnitude;
    negative numbers with the length and the bytes complemented.
    """
    import numpy as np
    import pyarrow as pa

    v = values.cast(pa.int64()).to_numpy(zero_copy_only=False)
    n = len(v)
    negative = v < 0
    magnitude = v.astype(np.uint64)
    magnitude = np.where(negative, ~magnitude + np.uint64(1), magnitude)  # |v|, also for -2**63
    nbytes = np.ones(n, dtype=np.int64)
    for k in range(1, 8):
        nbytes += magnitude >= (np.uint64(1) << np.uint64(8 * k))
    big_endian = magnitude.astype(">u8").view(np.uint8).reshape(n, 8)
    big_endian = np.where(negative[:, None], 255 - big_endian, big_endian)
    hex_digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    length_byte = np.where(negative, 255 - nbytes, nbytes).astype(np.uint8)
    full = np.empty((n, 19), dtype=np.uint8)
    full[:, 0] = np.where(negative, ord("7"), ord("8"))
    full[:, 1] = hex_digits[length_byte >> 4]
    full[:, 2] = hex_digits[length_byte & 15]
    full[:, 3::2] = hex_digits[big_endian >> 4]
    full[:, 4::2] = hex_digits[big_endian & 15]
    columns = np.arange(19)
    keep = (columns[None, :] < 3) | (columns[None, :] >= 3 + 2 * (8 - nbytes)[:, None])
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(3 + 2 * nbytes, out=offsets[1:])
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets.tobytes()), pa.py_buffer(full[keep].tobytes()))
