"""Row events' bytes straight into normalised values, with a decoder specialised per table map.

python-mysql-replication frames the binlog, reads table maps and GTID/XID/Query/Rotate events, and
parses a row event's rows only when its ``rows`` are read. The reader (reader.py) never reads them
when a decoder of this module can take the table: it hands over the event's row bytes, and gets back
each row image as a dict of values by column name, already normalised as ``ValueNormalizer``
would leave the library's values (records/values.py), so one decode replaces the library's and the
normaliser's passes.

A table map becomes a ``RowLayout``: for each column a *kind* (how it is stored) and its parameters.
Two decoders read a layout:

- ``mysqlcdc_rowcodec``, compiled with Cython from ``native/`` by ``bin/setup`` (a top-level module:
  Spark executors import the package from a zip of sources, where no extension can load);
- ``PythonRowDecoder`` here, the pure-Python twin used when the compiled one is not installed.

They share everything but the loop over the bytes: the kinds' codes, and the converters the rarer
kinds (DECIMAL, TIME, BIT, ENUM, SET, BINARY(n), MariaDB's UUID and INET types, text that is not
UTF-8) are handed to. Tables with a column neither decoder knows (MySQL's binary JSON, the pre-5.6
temporal formats) and events without a full row image keep the library's decoding
(``layout_for`` returns None). tests/integration/test_row_decoders.py holds the three paths to one
result on every type.

Row image layout (v1 and v2 row events alike, after the bitmaps the library reads): per row, a NULL
bitmap over the present columns, then each present non-NULL column's value; an update's row is its
before image followed by its after image.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import struct
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, cast

from pymysqlreplication.constants import FIELD_TYPE

from airflow_provider_mysqlcdc.cdc.binlog.library_fixes import time2_to_timedelta
from airflow_provider_mysqlcdc.cdc.binlog.native import compiled
from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.schema import Column
from airflow_provider_mysqlcdc.cdc.records.charsets import codec_name, decodable
from airflow_provider_mysqlcdc.cdc.records.values import converter_for, zero_date_text

# --- kinds: how a column's value is stored (the compiled decoder uses the same codes) -------------
SIGNED = 1  # little-endian two's complement of ``width`` bytes
UNSIGNED = 2  # little-endian unsigned of ``width`` bytes
FLOAT = 3  # 4-byte IEEE, widened
DOUBLE = 4  # 8-byte IEEE
UTF8 = 5  # a ``width``-byte length, then UTF-8 text
BYTES = 6  # a ``width``-byte length, then bytes
DATE = 7  # 3 bytes: day, month, year bit fields; zero, partial and impossible dates: None, or text in a key
DATETIME = 8  # 5 bytes big-endian packed, then ``fsp`` fraction bytes; impossible dates as DATE's
TIMESTAMP = 9  # 4 bytes big-endian seconds, then fraction bytes; aware UTC; the zero TIMESTAMP as DATE's
YEAR = 10  # 1 byte, years after 1900 (0 is the year 0000)
FIXED = 11  # ``width`` bytes handed to ``convert``
PREFIXED = 12  # a ``width``-byte length, then that many bytes handed to ``convert``
DECIMAL = 13  # MySQL's binary DECIMAL(precision, scale) in ``width`` bytes (the Python twin: ``convert``)

#: the environment variable that picks a decoder: auto (the compiled one when installed), compiled,
#: python, or library (python-mysql-replication's own decoding, then the normaliser)
DECODER_VARIABLE = "MYSQLCDC_ROW_DECODER"
DECODERS = ("auto", "compiled", "python", "library")

UTC = dt.timezone.utc
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
_DIGITS_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes of a group of 0-8 decimal digits
_FLOAT = struct.Struct("<f")
_DOUBLE = struct.Struct("<d")


@dataclass(frozen=True)
class ColumnLayout:
    """How one column's value is stored in a row image, and how it becomes its normalised value."""

    kind: int
    #: the value's bytes (fixed kinds) or its length prefix's bytes (UTF8, BYTES, PREFIXED)
    width: int = 0
    #: fractional-second digits of DATETIME and TIMESTAMP
    fsp: int = 0
    #: the bytes' value, for FIXED and PREFIXED (and DECIMAL, in the Python twin); for DATE, DATETIME and
    #: TIMESTAMP in a key column, the text of a value with no calendar date from its parts (else None)
    convert: Callable[..., Any] | None = None
    #: digits, and digits after the point, of a DECIMAL
    precision: int = 0
    scale: int = 0


@dataclass(frozen=True)
class RowLayout:
    """The columns of one table map, in order, as the decoders read them."""

    names: tuple[str, ...]
    columns: tuple[ColumnLayout, ...]


def layout_for(library_columns: list[Any], columns: tuple[Column, ...],
               key_columns: Collection[str] = ()) -> RowLayout | None:
    """The layout of a table map's row images (``library_columns``: the library's view of the table
    map, ``columns``: ours, column_from_table_map's; ``key_columns``: the row key's), or None when a
    column is stored in a way the decoders leave to the library."""
    layouts = []
    if any(lib.name is None for lib in library_columns):
        return None  # binlog_row_metadata=MINIMAL: the library names the columns while it reads them
    for lib, column in zip(library_columns, columns, strict=True):
        layout = _column_layout(lib, column, column.name in key_columns)
        if layout is None:
            return None
        layouts.append(layout)
    return RowLayout(tuple(c.name for c in columns), tuple(layouts))


def _column_layout(lib: Any, column: Column, key: bool = False) -> ColumnLayout | None:
    code, data_type = lib.type, column.data_type
    if code in _INTEGER_WIDTHS:
        return ColumnLayout(UNSIGNED if lib.unsigned else SIGNED, _INTEGER_WIDTHS[code])
    if code == FIELD_TYPE.FLOAT:
        return ColumnLayout(FLOAT, 4)
    if code == FIELD_TYPE.DOUBLE:
        return ColumnLayout(DOUBLE, 8)
    if code == FIELD_TYPE.YEAR:
        return ColumnLayout(YEAR, 1)
    if code in (FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE):
        return ColumnLayout(DATE, 3, convert=zero_date_text(True, 0) if key else None)
    if code == FIELD_TYPE.DATETIME2:
        return ColumnLayout(DATETIME, 5, fsp=lib.fsp, convert=zero_date_text(False, lib.fsp) if key else None)
    if code == FIELD_TYPE.TIMESTAMP2:
        return ColumnLayout(TIMESTAMP, 4, fsp=lib.fsp, convert=zero_date_text(False, lib.fsp) if key else None)
    if code == FIELD_TYPE.TIME2:
        return ColumnLayout(FIXED, 3 + (lib.fsp + 1) // 2, convert=time2_to_timedelta)
    if code == FIELD_TYPE.NEWDECIMAL:
        return ColumnLayout(DECIMAL, decimal_bytes(lib.precision, lib.decimals),
                            convert=_decimal_reader(lib.precision, lib.decimals), precision=lib.precision,
                            scale=lib.decimals)
    if code == FIELD_TYPE.BIT:
        return ColumnLayout(FIXED, lib.bytes, convert=converter_for(column))  # its bytes as an int
    if code == FIELD_TYPE.ENUM:
        return ColumnLayout(FIXED, lib.size, convert=_enum_reader(tuple(lib.enum_values))) if lib.enum_values else None
    if code == FIELD_TYPE.SET:
        return ColumnLayout(FIXED, lib.size, convert=_set_reader(tuple(lib.set_values or ())))
    if code == FIELD_TYPE.GEOMETRY:
        return ColumnLayout(BYTES, lib.length_size)
    if code in (FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING):
        prefix = 2 if lib.max_length > 255 else 1
    elif code == FIELD_TYPE.BLOB:
        prefix = lib.length_size
    else:
        return None  # MySQL's binary JSON, DATETIME/TIMESTAMP/TIME before 5.6, and anything newer
    if lib.character_set_name is None:
        return None  # no charset in the table map: the library guesses UTF-8
    if column.is_text:
        if not decodable(column.charset):
            return None  # the library's decoding names the column's charset in its error
        encoding = codec_name(column.charset)
        if encoding == "utf-8":
            return ColumnLayout(UTF8, prefix)
        return ColumnLayout(PREFIXED, prefix, convert=_text_reader(encoding))
    if data_type in ("binary", "uuid", "inet6", "inet4"):  # BINARY(n) padded; MariaDB's UUID and INET as text
        return ColumnLayout(PREFIXED, prefix, convert=converter_for(column))
    return ColumnLayout(BYTES, prefix)


_INTEGER_WIDTHS = {FIELD_TYPE.TINY: 1, FIELD_TYPE.SHORT: 2, FIELD_TYPE.INT24: 3, FIELD_TYPE.LONG: 4,
                   FIELD_TYPE.LONGLONG: 8}


def _text_reader(encoding: str) -> Callable[[bytes], str]:
    def convert(raw: bytes) -> str:
        return raw.decode(encoding)

    return convert


def _enum_reader(labels: tuple[str, ...]) -> Callable[[bytes], str]:
    """An ENUM's label by its 1-based index (the library's list starts with '' for the index 0)."""
    def convert(raw: bytes) -> str:
        return labels[int.from_bytes(raw, "little")]

    return convert


def _set_reader(labels: tuple[str, ...]) -> Callable[[bytes], str]:
    """A SET's members in definition order, ',' between them; '' when it has none. A member that is
    the empty string is left out, as the normaliser leaves it out of the SELECT's text."""
    def convert(raw: bytes) -> str:
        bits = int.from_bytes(raw, "little")
        return ",".join(label for i, label in enumerate(labels) if bits >> i & 1 and label)

    return convert


def decimal_bytes(precision: int, scale: int) -> int:
    """The bytes of MySQL's binary DECIMAL(precision, scale): groups of nine digits in four bytes,
    the rest of each side in as few bytes as hold them."""
    whole = precision - scale
    return (whole // 9) * 4 + _DIGITS_BYTES[whole % 9] + (scale // 9) * 4 + _DIGITS_BYTES[scale % 9]


def _decimal_reader(precision: int, scale: int) -> Callable[[bytes], decimal.Decimal]:
    """MySQL's binary DECIMAL as a Decimal with exactly ``scale`` places. The first bit is the sign
    (1: not negative), and a negative number's bytes are all inverted. Each group of digits is a
    big-endian integer: first the whole part's leading ``whole % 9`` digits, then groups of nine, then
    the fraction's groups of nine, then its last ``scale % 9`` digits."""
    whole = precision - scale
    digits = [whole % 9] + [9] * (whole // 9) + [9] * (scale // 9) + [scale % 9]
    parts = [(_DIGITS_BYTES[d], d) for d in digits if d]

    def convert(raw: bytes) -> decimal.Decimal:
        negative = not raw[0] & 0x80
        data = bytes([raw[0] ^ 0x80]) + raw[1:]
        if negative:
            data = bytes(b ^ 0xFF for b in data)
        text, at = [], 0
        for size, width in parts:
            group = int.from_bytes(data[at:at + size], "big")
            if group >= 10 ** width:
                raise ValueError(f"a DECIMAL({precision},{scale}) group holds {group}, more than {width} digits")
            text.append(f"{group:0{width}d}")
            at += size
        number = "".join(text)
        # exact, and exactly ``scale`` places: the constructor neither rounds nor drops a trailing zero
        return decimal.Decimal(f"{'-' if negative else ''}{number[:whole] or '0'}.{number[whole:]}")

    return convert


def fraction_micros(raw: int, fsp: int) -> int:
    """Microseconds of a DATETIME(fsp)/TIMESTAMP(fsp) fraction stored as the integer ``raw`` (an odd
    ``fsp`` stores one digit more, always 0)."""
    if fsp % 2:
        raw //= 10
    return raw * 10 ** (6 - fsp)


def datetime_value(packed: int, micros: int, zero: Callable[..., str] | None = None) -> dt.datetime | str | None:
    """A DATETIME from its 40-bit packed value (sign bit, year*13+month, day, hour, minute, second);
    the zero date and dates with a zero part are None, as the SELECT path has them, or in a key
    column (``zero``: values.zero_date_text) their text."""
    year_month = (packed >> 22) & 0x1FFFF
    year, month, day = year_month // 13, year_month % 13, (packed >> 17) & 0x1F
    hour, minute, second = (packed >> 12) & 0x1F, (packed >> 6) & 0x3F, packed & 0x3F
    try:
        return dt.datetime(year, month, day, hour, minute, second, micros)
    except ValueError:
        return None if zero is None else zero(year, month, day, hour, minute, second, micros)


def date_value(packed: int, zero: Callable[..., str] | None = None) -> dt.date | str | None:
    """A DATE from its 3 bytes; the zero date, dates with a zero part and the impossible dates
    ``ALLOW_INVALID_DATES`` lets in (2024-02-30) are None, or in a key column their text."""
    day, month, year = packed & 0x1F, (packed >> 5) & 0x0F, packed >> 9
    try:
        return dt.date(year, month, day)
    except ValueError:
        return None if zero is None else zero(year, month, day)


def timestamp_value(seconds: int, micros: int, zero: Callable[..., str] | None = None) -> dt.datetime | str | None:
    """An aware UTC datetime; the zero TIMESTAMP is None, or in a key column its text."""
    if not seconds and not micros:
        return None if zero is None else zero(0, 0, 0)
    if micros >= 1_000_000:
        raise ValueError(f"a TIMESTAMP fraction of {micros} microseconds")
    return _EPOCH + dt.timedelta(seconds=seconds, microseconds=micros)


class PythonRowDecoder:
    """Decodes the row images of one layout in pure Python (the compiled decoder's twin)."""

    def __init__(self, layout: RowLayout):
        self.layout = layout
        self._columns: tuple[tuple[Any, ...], ...] = tuple((c.kind, c.width, c.fsp, (c.fsp + 1) // 2, c.convert)
                                                          for c in layout.columns)

    def decode(self, body: bytes | memoryview) -> list[dict[str, Any]]:
        """Every row image in ``body``, in order, each a dict by column name (an update's before and
        after images alternate)."""
        names = self.layout.names
        return [dict(zip(names, values)) for values in self.decode_values(body)]

    def decode_values(self, body: bytes | memoryview) -> list[list[Any]]:
        """Every row image in ``body``, in order, each the list of its values in the layout's order
        (an update's before and after images alternate)."""
        data = bytes(body)
        names, columns, count = self.layout.names, self._columns, len(self._columns)
        bitmap_bytes = (count + 7) // 8
        from_bytes = int.from_bytes
        images, at, end = [], 0, len(data)
        while at < end:
            if at + bitmap_bytes > end:
                raise ValueError("row event bytes end inside a NULL bitmap")
            nulls = from_bytes(data[at:at + bitmap_bytes], "little")
            at += bitmap_bytes
            values: list[Any] = []
            for index, (kind, width, fsp, fraction_bytes, convert) in enumerate(columns):
                if nulls >> index & 1:
                    values.append(None)
                    continue
                if at + width > end:
                    raise ValueError(f"row event bytes end inside column {names[index]!r}")
                if kind == SIGNED or kind == UNSIGNED:
                    values.append(from_bytes(data[at:at + width], "little", signed=kind == SIGNED))
                    at += width
                    continue
                if kind in (UTF8, BYTES, PREFIXED):
                    length = from_bytes(data[at:at + width], "little")
                    at += width
                    if at + length > end:
                        raise ValueError(f"row event bytes end inside column {names[index]!r}")
                    raw = data[at:at + length]
                    at += length
                    values.append(raw.decode("utf-8") if kind == UTF8 else raw if kind == BYTES else convert(raw))
                    continue
                raw = data[at:at + width]
                at += width
                if kind == FLOAT:
                    values.append(_FLOAT.unpack(raw)[0])
                elif kind == DOUBLE:
                    values.append(_DOUBLE.unpack(raw)[0])
                elif kind == DATE:
                    values.append(date_value(from_bytes(raw, "little"), convert))
                elif kind == YEAR:
                    values.append(raw[0] + 1900 if raw[0] else 0)
                elif kind == FIXED or kind == DECIMAL:
                    values.append(convert(raw))
                else:  # DATETIME, TIMESTAMP: the fraction follows
                    if at + fraction_bytes > end:
                        raise ValueError(f"row event bytes end inside column {names[index]!r}")
                    micros = fraction_micros(from_bytes(data[at:at + fraction_bytes], "big"), fsp)
                    at += fraction_bytes
                    if kind == DATETIME:
                        values.append(datetime_value(from_bytes(raw, "big"), micros, convert))
                    else:
                        values.append(timestamp_value(from_bytes(raw, "big"), micros, convert))
            images.append(values)
        return images


def compiled_decoder_class() -> type | None:
    """The compiled decoder's class, when ``mysqlcdc_rowcodec`` is installed (bin/setup builds it)."""
    return cast("type | None", compiled("RowDecoder"))


def chosen_decoder(requested: str | None = None) -> str:
    """Which decoder a reader uses: ``requested``, else ``$MYSQLCDC_ROW_DECODER``, else auto; auto is
    the compiled one when installed, else the Python one."""
    choice = (requested or os.environ.get(DECODER_VARIABLE) or "auto").strip().lower()
    if choice not in DECODERS:
        raise ConfigurationError(f"Unknown row decoder {choice!r} (from {DECODER_VARIABLE} or the reader's "
                                 f"decoder argument): use one of {', '.join(DECODERS)}")
    if choice == "auto":
        return "compiled" if compiled_decoder_class() is not None else "python"
    if choice == "compiled" and compiled_decoder_class() is None:
        raise ConfigurationError(f"{DECODER_VARIABLE}=compiled, but the compiled row decoder (mysqlcdc_rowcodec) is "
                                 "not installed here: build it with `pip install ./native` from the project's "
                                 "source (bin/setup does), or use auto")
    return choice


def decoder_for(layout: RowLayout, choice: str) -> Any:
    """A decoder of ``layout`` of the chosen kind ("compiled" or "python")."""
    if choice == "compiled":
        compiled = compiled_decoder_class()
        assert compiled is not None
        return compiled(layout.names, layout.columns)
    return PythonRowDecoder(layout)
