"""Corrections to python-mysql-replication's decoders, applied on import of the binlog reader.

Each fix is pinned down by tests/integration/test_value_fidelity.py, which compares the binlog
path with the SELECT path for every type.

- TIME(n) with n > 0 and a negative value: MySQL stores the integer and fractional parts as ONE
  two's-complement number (my_time_packed_from_binary); the library negates the integer part alone
  and adds the fraction unsigned, so -838:59:58.999999 came out as -838:59:57.000001.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pymysqlreplication.row_event import RowsEvent

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


def apply() -> None:
    RowsEvent._RowsEvent__read_time2 = _read_time2  # type: ignore[attr-defined]


apply()
