"""Data files written straight into a sink table's folder by the process that read the rows.

A chunk's partitions each write their rows as one Parquet file into the table's folder, on the Spark
executor that read them (``write_data_file``), and send back only what the table's log needs to know
about it (``DataFile``: path, size, rows, column statistics). Nothing reads a file until a commit
adds it (a Delta commit's add action, sinks/delta/data_files.py; an Iceberg append), so a file no commit
added (a failed task, a driver that died before its commit, a merge killed before its commit) is
invisible; maintenance deletes it once it is older than the retention and ``ORPHAN_MIN_AGE_S``
(``orphans``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from airflow_provider_mysqlcdc.sinks.arrow_rows import CHUNK_COLUMN, conform_to

#: a file in a table's folder that no commit names is deleted only once older than this, whatever the
#: retention: a writer may be about to commit it (a chunk's files wait for its driver's commit);
#: Iceberg's own orphan-file removal waits as long by default
ORPHAN_MIN_AGE_S = 3 * 24 * 3600.0
#: string statistics longer than this are left out (a TEXT column would bloat the log); the chunk
#: column's are always kept: commits decide from them which files a key range holds
MAX_STRING_STAT = 64


@dataclass(frozen=True)
class DataFile:
    """A Parquet data file in a table's folder, not committed yet."""

    path: str  # relative to the table's folder
    size: int
    rows: int
    stats: str  # Delta's per-file statistics (JSON)
    modified_ms: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DataFile":
        return cls(**data)


def write_data_file(table_uri: str, data: pa.Table, file_schema: pa.Schema, *, prefix: str) -> DataFile:
    """Write ``data`` (conformed to ``file_schema``, the table's columns) as a new Parquet file in the
    table's folder; a unique name, so a retried task never overwrites a file a commit may have added."""
    rows, _ = conform_to(data, file_schema)
    name = f"{prefix}-{uuid.uuid4().hex}.parquet"
    fs, root = fsspec.core.url_to_fs(table_uri)
    path = f"{root.rstrip('/')}/{name}"
    fs.makedirs(root, exist_ok=True)  # an Iceberg table's data folder, before its first file
    with fs.open(path, "wb") as handle:
        pq.write_table(rows, handle, compression="snappy")
    return DataFile(name, int(fs.size(path)), rows.num_rows, file_stats(rows), int(time.time() * 1000))


def read_data_file(table_uri: str, path: str) -> pa.Table:
    with open_data_file(table_uri, path) as handle:
        return pq.read_table(handle)


def open_data_file(table_uri: str, path: str) -> Any:
    """The data file at ``path`` (relative to the table's folder), open for reading."""
    fs, root = fsspec.core.url_to_fs(table_uri)
    return fs.open(f"{root.rstrip('/')}/{path}", "rb")


def delete_data_file(table_uri: str, path: str) -> None:
    """Delete a file no commit added (already gone is fine)."""
    fs, root = fsspec.core.url_to_fs(table_uri)
    try:
        fs.rm(f"{root.rstrip('/')}/{path}")
    except FileNotFoundError:
        pass


def orphans(table_uri: str, named: set[str], *, older_than_s: float, skip: str | None = None) -> list[str]:
    """The files under the table's folder (paths relative to it) that ``named`` lacks, last modified
    more than ``older_than_s`` seconds ago; the folder ``skip`` (relative: a log) left out."""
    fs, root = fsspec.core.url_to_fs(table_uri)
    root = root.rstrip("/")
    if not fs.exists(root):
        return []
    oldest = time.time() - older_than_s
    found = []
    for path, info in fs.find(root, detail=True).items():
        relative = path[len(root) + 1:]
        if (skip is None or not relative.startswith(f"{skip}/")) and relative not in named and modified_s(info) < oldest:
            found.append(relative)
    return found


def modified_s(info: dict) -> float:
    """A listed file's modification time in seconds (local files: ``mtime``; object stores:
    ``LastModified``); now when the listing gives none, so that such a file is never taken for old."""
    value = info.get("mtime", info.get("LastModified", info.get("last_modified")))
    if value is None:
        return time.time()
    return value.timestamp() if isinstance(value, dt.datetime) else float(value)


def put_if_absent(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> bool:
    """Write ``data`` at ``path`` only if nothing is there yet, atomically and whole: False when
    something was (another writer won). A hard link on a local disk; a conditional put
    (put-if-absent) on an object store. The folder must exist."""
    if isinstance(fs, LocalFileSystem):
        temporary = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(temporary, "wb") as f:
            f.write(data)
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        finally:
            os.remove(temporary)
        return True
    try:
        with fs.open(path, "xb") as f:
            f.write(data)
    except FileExistsError:
        return False
    return True


def file_stats(data: pa.Table) -> str:
    """Delta's statistics of a data file: its row count, every column's null count, and the minimum
    and maximum of the columns whose JSON form is exact (integers, dates, short strings)."""
    minimum: dict[str, Any] = {}
    maximum: dict[str, Any] = {}
    for field in data.schema:
        column = data.column(field.name)
        if column.null_count == len(column) or not _has_exact_stats(field.type):
            continue
        bounds = pc.min_max(column)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if pa.types.is_string(field.type) and field.name != CHUNK_COLUMN and max(len(low), len(high)) > MAX_STRING_STAT:
            continue
        minimum[field.name], maximum[field.name] = _json_value(low), _json_value(high)
    return json.dumps({"numRecords": data.num_rows, "minValues": minimum, "maxValues": maximum,
                       "nullCount": {f.name: data.column(f.name).null_count for f in data.schema}})


def _has_exact_stats(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_date32(kind)


def _json_value(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.date) else value


def chunk_bounds(stats: dict[str, Any]) -> tuple[str | None, str | None]:
    """The smallest and largest ``_cdc_chunk`` of a committed file, from its statistics as delta-rs
    lists them (``get_add_actions(flatten=True)``); None where they are unknown."""
    return stats.get(f"min.{CHUNK_COLUMN}"), stats.get(f"max.{CHUNK_COLUMN}")


def rows_outside(data: pa.Table, start: str | None, end: str | None) -> pa.Table:
    """The rows of ``data`` outside the key range ``[start, end)`` (compared as strings, byte by
    byte, as delta-rs compares them in a predicate)."""
    return data.filter(pc.invert(in_chunk_range(data.column(CHUNK_COLUMN), start, end)))


def in_chunk_range(chunks: pa.ChunkedArray, start: str | None, end: str | None) -> pa.ChunkedArray:
    """Whether each ``_cdc_chunk`` lies in the key range ``[start, end)`` (None: open), compared as
    strings, byte by byte, as delta-rs compares them in a predicate; NULL lies in none."""
    inside = pc.is_valid(chunks)
    if start is not None:
        inside = pc.and_(inside, pc.greater_equal(chunks, pa.scalar(start)))
    if end is not None:
        inside = pc.and_(inside, pc.less(chunks, pa.scalar(end)))
    return inside
