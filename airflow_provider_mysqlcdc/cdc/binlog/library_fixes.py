"""Corrections to python-mysql-replication's decoders, applied on import of the binlog reader.

Each fix is pinned down by tests/integration/test_value_fidelity.py, which compares the binlog
path with the SELECT path for every type.

- TIME(n) with n > 0 and a negative value: MySQL stores the integer and fractional parts as ONE
  two's-complement number (my_time_packed_from_binary); the library negates the integer part alone
  and adds the fraction unsigned, so -838:59:58.999999 came out as -838:59:57.000001.
- Opaque scalars inside MySQL's binary JSON (a DECIMAL, DATE, TIME, DATETIME or TIMESTAMP, or a
  value of any other type, stored in a JSON document): the library gave Python dates and times
  (which crashed on a TIME beyond 23:59:59, a negative one or a partial date, and which JSON text
  cannot hold), and decoded other types' bytes as text. They now come out as MySQL prints them in
  JSON text (``json_opaque_value``), so both paths give the same document (records/values.py).
  Pinned down by tests/unit/cdc/records/test_values.py with binary JSON built byte by byte (only MariaDB, whose
  JSON is text, runs here).
- ENUM and SET labels of a table map: the server writes them in the column's character set; the
  library decoded them as UTF-8 and gave '' where that failed (a latin1 'é'), or other text where it
  did not (UTF-16). They are now decoded as UTF-8 with ``surrogateescape``, which keeps their bytes,
  and table_map.py ``labels_in_charset`` decodes those with the column's charset, as for our own
  framing; tests/integration/test_charsets.py.
- Text in a character set other than UTF-8: the library decoded it with pymysql's codec names, which
  Python reads otherwise than the server (``utf16`` little-endian, ``latin1`` without its five
  holes) or not at all (``macce``: a LookupError naming no table). It now decodes with the codec
  every decoder of ours uses (records/charsets.py); tests/integration/test_charsets.py.
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

from pymysqlreplication import json_binary
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent, TableMapEvent
from pymysqlreplication.util.bytes import decode_decimal, decode_variable_length

from airflow_provider_mysqlcdc.cdc.records.charsets import codec_name, decodable

_TIMEF_INT_OFS = 0x800000
_TIMEF_OFS = 0x800000000000


def time2_packed(raw: bytes) -> int:
    """MySQL's packed TIME value ((hms << 24) + microseconds, signed) from its binlog encoding."""
    frac_bytes = len(raw) - 3
    if frac_bytes == 3:
        return int.from_bytes(raw, "big") - _TIMEF_OFS
    intpart = int.from_bytes(raw[:3], "big") - _TIMEF_INT_OFS
    if frac_bytes == 0:
        return intpart << 24
    frac = int.from_bytes(raw[3:], "big")
    if intpart < 0 and frac:
        # negative values store the fraction in reverse order, for binary sort compatibility
        intpart += 1
        frac -= 1 << (8 * frac_bytes)
    return (intpart << 24) + frac * (10000 if frac_bytes == 1 else 100)


def time2_to_timedelta(raw: bytes) -> dt.timedelta:
    packed = time2_packed(raw)
    negative, magnitude = packed < 0, abs(packed)
    hms, micros = magnitude >> 24, magnitude & 0xFFFFFF
    value = dt.timedelta(hours=(hms >> 12) & 0x3FF, minutes=(hms >> 6) & 0x3F, seconds=hms & 0x3F,
                         microseconds=micros)
    return -value if negative else value


def _read_time2(self: Any, column: Any) -> dt.timedelta:
    frac_bytes = (int(getattr(column, "fsp", 0) or 0) + 1) // 2
    return time2_to_timedelta(self.packet.read(3 + frac_bytes))


def _packed_fields(packed: int, *, time: bool) -> tuple[int, int, int, int, int, int, int]:
    """Year, month, day, hour, minute, second, microsecond of MySQL's in-memory packed temporal
    value (``TIME_to_longlong_datetime_packed``, or ``..._time_packed`` whose hours take 10 bits and
    which has no date), sign dropped."""
    magnitude = abs(packed)
    micros, whole = magnitude % (1 << 24), magnitude >> 24
    if time:
        return 0, 0, 0, (whole >> 12) % (1 << 10), (whole >> 6) % (1 << 6), whole % (1 << 6), micros
    ymd, hms = whole >> 17, whole % (1 << 17)
    ym = ymd >> 5
    return ym // 13, ym % 13, ymd % (1 << 5), hms >> 12, (hms >> 6) % (1 << 6), hms % (1 << 6), micros


def json_opaque_value(field_type: int, payload: bytes) -> Any:
    """An opaque scalar of MySQL's binary JSON, as MySQL prints it in JSON text: a DECIMAL as its
    number, a date ``YYYY-MM-DD``, a time ``[-]HH:MM:SS.ffffff``, a datetime or timestamp
    ``YYYY-MM-DD HH:MM:SS.ffffff`` (zero and partial dates too: they are text here), anything else
    ``base64:type<N>:<its bytes in base64>``."""
    if field_type in (FIELD_TYPE.NEWDECIMAL, FIELD_TYPE.DECIMAL):
        return decode_decimal(payload)
    if field_type in _JSON_TEMPORAL:
        packed = int.from_bytes(payload[:8].ljust(8, b"\x00"), "little", signed=True)
        time = field_type in (FIELD_TYPE.TIME, FIELD_TYPE.TIME2)
        year, month, day, hour, minute, second, micros = _packed_fields(packed, time=time)
        clock = f"{hour:02d}:{minute:02d}:{second:02d}.{micros:06d}"
        if time:
            return f"{'-' if packed < 0 else ''}{clock}"
        date = f"{year:04d}-{month:02d}-{day:02d}"
        return date if field_type in (FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE) else f"{date} {clock}"
    return f"base64:type{field_type}:{base64.b64encode(payload).decode('ascii')}"


_JSON_TEMPORAL = (FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE, FIELD_TYPE.TIME, FIELD_TYPE.TIME2, FIELD_TYPE.DATETIME,
                  FIELD_TYPE.DATETIME2, FIELD_TYPE.TIMESTAMP, FIELD_TYPE.TIMESTAMP2)


def _parse_json_opaque(data: bytes) -> Any:
    """The library's ``parse_opaque`` layout: the field type, a variable-length size, the payload."""
    if not data:
        return None
    length, used = decode_variable_length(data[1:])
    return json_opaque_value(data[0], bytes(data[1 + used:1 + used + length]))


_library_charset_to_encoding = RowsEvent.__dict__["charset_to_encoding"].__func__


def _charset_to_encoding(name: str) -> str:
    """The codec the library decodes a text column with: ours (records/charsets.py) where we have one."""
    return codec_name(name) if decodable(name) else _library_charset_to_encoding(name)


def _read_type_values(self: Any, length: int) -> list[list[str]] | None:
    """The library's ``_read_type_values``, each label's bytes kept (``surrogateescape``)."""
    packet, result = self.packet, []
    read_until = packet.read_bytes + length
    if packet.read_bytes >= read_until:
        return None
    while packet.read_bytes < read_until:
        count = packet.read_length_coded_binary()
        result.append([packet.read_variable_length_string().decode("utf-8", "surrogateescape") for _ in range(count)])
    return result


def apply() -> None:
    RowsEvent._RowsEvent__read_time2 = _read_time2
    json_binary.parse_opaque = _parse_json_opaque  # parse_json looks it up in its module at each call
    RowsEvent.charset_to_encoding = staticmethod(_charset_to_encoding)
    TableMapEvent._read_type_values = _read_type_values


apply()
