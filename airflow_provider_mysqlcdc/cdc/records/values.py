"""One normalisation for column values, whichever path they came by.

A stored value must come out as the same Python value whether it was read by the snapshot
``SELECT`` (pymysql) or decoded from the binlog (python-mysql-replication). The two libraries
disagree on several types, so every value of both paths goes through ``ValueNormalizer``:

========================  ========================  ===========================  =====================
type                      SELECT gives              binlog gives                 normalised to
========================  ========================  ===========================  =====================
FLOAT                     (read as CAST AS DOUBLE)  float32 widened              float (float32 exact)
BIT(n)                    bytes                     '0101' string                int
BINARY(n)                 padded bytes              trailing 0x00 stripped       bytes padded to n
empty VARBINARY/BLOB      b''                       '' (str)                     b''
SET                       'a,b' / ''                {'a','b'} / None if empty    'a,b' in definition order
TIMESTAMP                 naive UTC (session UTC)   naive UTC                    aware datetime in UTC
DECIMAL(p,s)              Decimal                   Decimal                      Decimal with exactly s places
JSON (MySQL)              text                      parsed object                canonical JSON text
zero/partial DATE(TIME)   '2024-00-10' string       the same text                None; in a key: ZeroDate
zero TIMESTAMP            '0000-00-00...' string    the epoch                    None; in a key: ZeroDate
YEAR 0000                 0                         1900                         0
UUID (MariaDB)            text                      16 bytes                     text
INET6/INET4 (MariaDB)     text                      16/4 bytes                   text (as inet_ntop)
========================  ========================  ===========================  =====================

Everything else (integers of every width and sign, DOUBLE, DATE, DATETIME, TIME as timedelta, YEAR,
character data as str, VARBINARY/BLOB and geometry as bytes, ENUM as its label) already agrees.
MariaDB's JSON is an alias of LONGTEXT and is carried as text.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import socket
import struct
import uuid
from collections.abc import Callable
from typing import Any

from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableSchema, quote_identifier
from airflow_provider_mysqlcdc.cdc.records.charsets import codec_name

Converter = Callable[[Any], Any]

_DECIMAL_CONTEXT = decimal.Context(prec=100)


def _to_float32(value: Any) -> float:
    return struct.unpack("<f", struct.pack("<f", float(value)))[0]


def _bit_to_int(value: Any) -> int:
    if isinstance(value, (bytes, bytearray)):
        return int.from_bytes(value, "big")
    if isinstance(value, str):
        return int(value, 2) if value else 0
    return int(value)


#: the zero TIMESTAMP '0000-00-00 00:00:00' is stored as 0 seconds, which the binlog decoder gives as the
#: epoch; no real TIMESTAMP is the epoch itself (their range starts one second later)
_ZERO_TIMESTAMP = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _timestamp_to_utc(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        value = value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value.astimezone(dt.timezone.utc)
        return None if value == _ZERO_TIMESTAMP else value
    return _zero_temporal_to_none(value)


class ZeroDate(str):
    """A DATE, DATETIME or TIMESTAMP value with no calendar date, as the server writes it: the zero date
    or one with a zero or impossible part (``'0000-00-00'``, ``'2024-00-10 12:00:00'``,
    ``'2024-02-30'`` under ``ALLOW_INVALID_DATES``), which no Python or Arrow date can hold. Key
    columns keep it (a NULL could not tell such rows apart); other columns hold None."""

    __slots__ = ()

    @property
    def parts(self) -> tuple[int, int, int, int, int, int, int]:
        """Year, month, day, hour, minute, second, microsecond."""
        day, _, time = self.partition(" ")
        year, month, date = (int(p) for p in day.split("-"))
        clock, _, fraction = time.partition(".")
        hour, minute, second = (int(p) for p in clock.split(":")) if clock else (0, 0, 0)
        return year, month, date, hour, minute, second, int(fraction.ljust(6, "0")[:6]) if fraction else 0


def _zero_temporal_to_none(value: Any) -> Any:
    # pymysql hands back a zero or partial date ('0000-00-00', '2024-00-10 ...') as a string, and so do
    # the binlog decoders, where Python (and Arrow) have no such date
    return None if isinstance(value, str) else value


def zero_date_text(is_date: bool, fsp: int) -> Callable[..., ZeroDate]:
    """The ``ZeroDate`` of a DATE (``is_date``) or a DATETIME/TIMESTAMP with ``fsp`` fraction digits,
    from its parts, as the server writes it: the binlog's decoders and the SELECT's text agree on it."""

    def text(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0,
             micros: int = 0) -> ZeroDate:
        written = f"{year:04d}-{month:02d}-{day:02d}"
        if not is_date:
            written += f" {hour:02d}:{minute:02d}:{second:02d}" + (f".{micros:06d}"[:fsp + 1] if fsp else "")
        return ZeroDate(written)

    return text


def _make_key_temporal(column: Column) -> Converter:
    """A key column's temporal values: a value with no calendar date as the ``ZeroDate`` the server
    writes (the same text from the SELECT and from the binlog), real ones like other columns'."""
    is_timestamp = column.data_type == "timestamp"
    text = zero_date_text(column.data_type == "date", column.datetime_precision or 0)

    def convert(value: Any) -> Any:
        if isinstance(value, str):
            return text(*ZeroDate(value).parts)
        if is_timestamp:
            return _timestamp_to_utc(value) or text(0, 0, 0)
        return value

    return convert


class _Real(decimal.Decimal):
    """A JSON number written with a fraction or an exponent (a DOUBLE, or a DECIMAL with a scale)."""


def _json_canonical(value: Any) -> str:
    """One JSON text for one JSON value, from MySQL's text (the SELECT) or its binary form (the binlog).

    Keys sorted, no spaces, and numbers by value: an integer as such, any other number (a DOUBLE, a
    DECIMAL with a scale) exactly, in the shortest form of its value (``1.50`` and ``1.5`` are one
    number, as MySQL compares them). The binlog's opaque scalars (DECIMAL, dates and times, other
    types) arrive as MySQL prints them (binlog/library_fixes.py)."""
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8")
    if isinstance(value, str):
        value = json.loads(value, parse_float=_Real)
    return _json_text(value)


def _json_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _real_text(_Real(repr(value)))
    if isinstance(value, decimal.Decimal):  # a _Real, or a DECIMAL from the binlog: integral when it has no scale
        exponent = value.as_tuple().exponent
        return str(int(value)) if not isinstance(value, _Real) and isinstance(exponent, int) and exponent >= 0 \
            else _real_text(value)
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8")
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        items = sorted((k.decode("utf-8") if isinstance(k, (bytes, bytearray)) else str(k), v) for k, v in value.items())
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_json_text(v)}" for k, v in items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_json_text(v) for v in value) + "]"
    raise ValueError(f"a JSON value of an unexpected type: {type(value).__name__}")


def _real_text(value: decimal.Decimal) -> str:
    """A non-integer JSON number's text, as Python writes floats: positional between 1e-4 and 1e16,
    else with an exponent; always with a fraction or an exponent (so it stays a non-integer)."""
    value = decimal.Decimal(value).normalize(_DECIMAL_CONTEXT)
    sign, digits, _ = value.as_tuple()
    adjusted = value.adjusted()
    if -4 <= adjusted < 16:
        text = format(value, "f")
        return text if "." in text else f"{text}.0"
    mantissa = "".join(map(str, digits))
    mantissa = mantissa[0] + (f".{mantissa[1:]}" if len(mantissa) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'+' if adjusted >= 0 else '-'}{abs(adjusted):02d}"


def decimal_text(value: decimal.Decimal) -> str:
    """A DECIMAL as the server prints it: plain digits at the value's scale, never an exponent
    (``str`` gives ``0E-18`` for ``0.000000000000000000``), and no negative zero."""
    return format(value.copy_abs() if value.is_zero() else value, "f")


def _make_decimal(scale: int) -> Converter:
    quantum = decimal.Decimal(1).scaleb(-scale)

    def convert(value: Any) -> decimal.Decimal:
        return decimal.Decimal(value).quantize(quantum, context=_DECIMAL_CONTEXT)

    return convert


def _make_set(labels: tuple[str, ...]) -> Converter:
    order = {label.lower(): i for i, label in enumerate(labels)}

    def convert(value: Any) -> str:
        members = value.split(",") if isinstance(value, str) else list(value)
        members = [m for m in members if m != ""]
        return ",".join(sorted(members, key=lambda m: order.get(m.lower(), len(order))))

    return convert


def _to_bytes(value: Any) -> bytes:
    # python-mysql-replication returns an empty binary string as '' (str).
    return value.encode("latin-1") if isinstance(value, str) else bytes(value)


# The binlog carries MariaDB's UUID as its 16 bytes in text order, INET6 and INET4 as their 16 and 4
# address bytes, each like a BINARY(n): trailing zero bytes stripped, all zeros as '' (str). The
# SELECT gives their text, never empty.
def _year(value: Any) -> int:
    # YEAR 0000 is stored as 0, which the binlog decoder adds 1900 to; no YEAR is 1900 itself (1901-2155)
    return 0 if value == 1900 else value


def _stored_bytes(value: Any, length: int) -> bytes | None:
    if isinstance(value, str) and value:
        return None  # the SELECT's text
    return _to_bytes(value).ljust(length, b"\x00")


def _uuid_text(value: Any) -> str:
    stored = _stored_bytes(value, 16)
    return value if stored is None else str(uuid.UUID(bytes=stored))


def _inet6_text(value: Any) -> str:
    stored = _stored_bytes(value, 16)  # inet_ntop is how MariaDB prints INET6 (::ffff:1.2.3.4 included)
    return value if stored is None else socket.inet_ntop(socket.AF_INET6, stored)


def _inet4_text(value: Any) -> str:
    stored = _stored_bytes(value, 4)
    return value if stored is None else socket.inet_ntoa(stored)


def _make_padded_binary(length: int) -> Converter:
    def convert(value: Any) -> bytes:
        return _to_bytes(value).ljust(length, b"\x00")

    return convert


def _make_text(charset: str | None) -> Converter:
    encoding = codec_name(charset)

    def convert(value: Any) -> Any:
        if isinstance(value, (bytes, bytearray)):
            return bytes(value).decode(encoding)
        return value

    return convert


_BYTES_TYPES = {"varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry", "point", "linestring",
                "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection"}
_TEXT_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}


def converter_for(column: Column, *, key: bool = False) -> Converter | None:
    """The normalising function for one column (None when both paths already agree); non-NULL values
    only. ``key``: the column is part of the row key (or the chunk key), where a date with no calendar
    date is kept as a ``ZeroDate``, not NULL."""
    t = column.data_type
    if key and t in ("date", "datetime", "timestamp"):
        return _make_key_temporal(column)
    if t == "float":
        return _to_float32
    if t == "bit":
        return _bit_to_int
    if t == "timestamp":
        return _timestamp_to_utc
    if t in ("date", "datetime"):
        return _zero_temporal_to_none
    if t == "decimal":
        return _make_decimal(column.numeric_scale or 0)
    if t == "set":
        return _make_set(column.labels)
    if t == "json":
        return _json_canonical
    if t == "year":
        return _year
    if t == "uuid":
        return _uuid_text
    if t == "inet6":
        return _inet6_text
    if t == "inet4":
        return _inet4_text
    if t == "binary":
        return _make_padded_binary(column.char_max_length or 0)
    if t in _BYTES_TYPES:
        return _to_bytes
    if t in _TEXT_TYPES or t == "enum":
        return _make_text(column.charset)
    return None  # integers, DOUBLE, TIME, DATE/DATETIME values, geometry...: both libraries agree


def read_expression(column: Column) -> str:
    """How SQL reads a column so that nothing is lost on the wire.

    FLOAT prints with 6 significant digits in the text protocol; cast to DOUBLE it prints exactly.
    """
    name = quote_identifier(column.name)
    if column.data_type == "float":
        return f"CAST({name} AS DOUBLE)"
    return name


def select_list(columns: tuple[Column, ...]) -> str:
    """The column list of a snapshot SELECT: every column, read losslessly, under its own name."""
    return ", ".join(
        f"{read_expression(c)} AS {quote_identifier(c.name)}" if c.data_type == "float" else quote_identifier(c.name)
        for c in columns
    )


def column_defaults(conn: Any, schema: TableSchema, names: tuple[str, ...]) -> dict[str, Any] | None:
    """The values the server gives a row in columns it does not set (``DEFAULT(col)``), normalised
    as a snapshot reads them; None when the table has no row to evaluate them on."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(f'DEFAULT({quote_identifier(n)})' for n in names)} "
                    f"FROM {schema.table_id.quoted} LIMIT 1")
        row = cur.fetchone()
    return None if row is None else ValueNormalizer(schema).row_from_tuple(names, tuple(row))


class ValueNormalizer:
    """Normalises whole rows of one table; built once per schema."""

    def __init__(self, schema: TableSchema):
        self.schema = schema
        keys = set(schema.key_columns)
        self._converters = {c.name: f for c in schema.columns
                            if (f := converter_for(c, key=c.name in keys)) is not None}

    def row(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Normalise a row in place (the caller hands over ``raw``) and return it."""
        for name, convert in self._converters.items():
            value = raw.get(name)
            if value is not None:
                raw[name] = convert(value)
        return raw

    def row_from_tuple(self, names: tuple[str, ...], values: tuple[Any, ...]) -> dict[str, Any]:
        return self.row(dict(zip(names, values)))
