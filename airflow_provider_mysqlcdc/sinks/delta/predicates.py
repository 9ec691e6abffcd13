"""The SQL text delta-rs evaluates for the sink (DataFusion SQL): quoted names and literals of an
exact Arrow type, a chunk range's predicate, and which data files a merge must read or a range
commit must rewrite, decided by the files' ``_cdc_chunk`` statistics."""

from __future__ import annotations

import bisect
import math

import pyarrow as pa
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.records.values import decimal_text
from airflow_provider_mysqlcdc.sinks.arrow_rows import CHUNK_COLUMN


def sql_identifier(name: str) -> str:
    """Quote a column name for delta-rs predicates (DataFusion SQL: double quotes)."""
    return '"' + name.replace('"', '""') + '"'


def sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


_UNITS = {"s": "Second", "ms": "Millisecond", "us": "Microsecond", "ns": "Nanosecond"}


def sql_literal(value: pa.Scalar) -> str | None:
    """``value`` as a DataFusion SQL expression of exactly its Arrow type, or None for a type this
    does not cover."""
    t = value.type
    if not value.is_valid:
        return "NULL"
    v = value.as_py()
    if pa.types.is_boolean(t):
        return "TRUE" if v else "FALSE"
    if pa.types.is_integer(t):
        return f"arrow_cast({int(v)}, '{str(t).replace('int', 'Int').replace('uInt', 'UInt')}')"
    if pa.types.is_floating(t) and math.isfinite(v):
        return f"arrow_cast({v!r}, 'Float{t.bit_width}')"
    if pa.types.is_decimal128(t):
        return f"arrow_cast({sql_string(decimal_text(v))}, 'Decimal128({t.precision}, {t.scale})')"
    if pa.types.is_string(t):
        return sql_string(v)
    if pa.types.is_binary(t):
        return f"decode({sql_string(v.hex())}, 'hex')"
    if pa.types.is_date32(t):
        return f"arrow_cast({sql_string(v.isoformat())}, 'Date32')"
    if pa.types.is_timestamp(t):
        text = v.replace(tzinfo=None).isoformat() if t.tz else v.isoformat()
        zone = f'Some("{t.tz}")' if t.tz else "None"
        return f"arrow_cast({sql_string(text)}, 'Timestamp({_UNITS[t.unit]}, {zone})')"
    return None


def chunk_range_predicate(start: str | None, end: str | None, *, alias: str = "") -> str | None:
    """The rows of the chunk range ``[start, end)`` (None: open; None for the whole table), of the
    table ``alias`` names when given (a merge's target)."""
    column = f"{alias}.{CHUNK_COLUMN}" if alias else CHUNK_COLUMN
    parts = []
    if start is not None:
        parts.append(f"{column} >= {sql_string(start)}")
    if end is not None:
        parts.append(f"{column} < {sql_string(end)}")
    return " AND ".join(parts) or None


def files_holding(table: DeltaTable, chunks: pa.ChunkedArray, most: int = 64) -> str | None:
    """A predicate on the target's ``_cdc_chunk``, true for every row of the files whose chunk range
    holds one of ``chunks`` (a batch's changed keys) and for each of those keys that no file's range
    holds, and for as few other rows as ``most`` ranges allow; None when a file's range is unknown (no
    statistics: nothing can be skipped).

    The keys no file holds (new rows past the table's end, or in a gap) are in it for the conflict
    check: delta-rs matches the files a concurrent writer committed against the merge's predicate,
    so a file that holds one of them must match, or the merge would commit beside it and the key
    would be in the table twice."""
    keys = sorted({key for key in chunks.to_pylist() if key is not None})
    if not keys:
        return None
    actions = pa.table(table.get_add_actions(flatten=True))
    if not actions.num_rows:  # an empty table: only the keys themselves, for the conflict check
        return ranges_predicate([(key, key) for key in keys], most)
    if any(f"{edge}.{CHUNK_COLUMN}" not in actions.column_names for edge in ("min", "max")):
        return None
    files = list(zip(actions.column(f"min.{CHUNK_COLUMN}").to_pylist(), actions.column(f"max.{CHUNK_COLUMN}").to_pylist()))
    if any(low is None or high is None for low, high in files):
        return None
    ranges = [(low, high) for low, high in files
              if bisect.bisect_left(keys, low) < bisect.bisect_right(keys, high)]
    held = joined(sorted(files))
    starts = [low for low, _ in held]
    for key in keys:
        at = bisect.bisect_right(starts, key) - 1
        if at < 0 or key > held[at][1]:
            ranges.append((key, key))
    return ranges_predicate(ranges, most)


def joined(ranges: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Sorted ranges with the overlapping ones joined."""
    joined: list[tuple[str, str]] = []
    for low, high in ranges:
        if joined and low <= joined[-1][1]:
            joined[-1] = (joined[-1][0], max(joined[-1][1], high))
        else:
            joined.append((low, high))
    return joined


def ranges_predicate(ranges: list[tuple[str, str]], most: int) -> str:
    merged = joined(sorted(ranges))
    while len(merged) > most:  # join neighbours: wider ranges, still holding every one of them
        merged = [(merged[i][0], merged[min(i + 1, len(merged) - 1)][1]) for i in range(0, len(merged), 2)]
    column = f"t.{sql_identifier(CHUNK_COLUMN)}"
    return " OR ".join(f"({column} >= {sql_string(low)} AND {column} <= {sql_string(high)})" for low, high in merged)


def file_placement(bounds: tuple[str | None, str | None], start: str | None, end: str | None) -> str:
    """Where a committed file lies relative to the chunk range ``[start, end)``, by its statistics:
    ``outside``, ``inside`` or ``partial`` (which includes not knowing)."""
    low, high = bounds
    if low is None or high is None:
        return "partial"
    if (start is not None and high < start) or (end is not None and low >= end):
        return "outside"
    if (start is None or low >= start) and (end is None or high < end):
        return "inside"
    return "partial"
