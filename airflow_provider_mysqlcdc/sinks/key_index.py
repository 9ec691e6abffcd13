"""Where each key's row lives in a table's data files: the merge-on-read writer's key index, kept in
memory by a long-lived writer (the stream), so that a batch of random keys costs what it changes and
not what the table holds. Whatever the table format: a format hands it its data files as
``IndexedFile`` (sinks/delta/merge_on_read.py, sinks/iceberg/merge_on_read.py).

A merge must find the row each changed key replaces (its file and position, and its ``_cdc_version``).
Read from the files, that is the key columns of every file whose ``_cdc_chunk`` range holds a changed
key: with random keys, every file, so all of a 10M-row table's keys at every batch. The index keeps,
per data file, what that read gave:

- the rows' ``_cdc_version`` by position, and the keys in sorted order with their positions: a key
  is found by a binary search (``np.searchsorted``) where the row key is one integer, date or time
  column (most OLTP tables); any other key by a membership test and a join over the file's kept key
  columns (no file read, still a pass over the file's keys);
- the rows the file's deletes delete (a Delta deletion vector, Iceberg position-delete files), with
  the identity of those deletes.

A data file never changes (a path names the same rows for ever), so an entry stays right as long as
its deletes are the ones the table holds:

- **The writer's own commits** update it exactly: the data file a merge writes is indexed from the
  rows in memory, a file given new deletes takes their rows, a removed file leaves.
- **Other writers' commits** (a snapshot range, a clustering, a copy-on-write operation): a file the
  index lacks is read the first time a batch needs it; a file whose deletes in the table are not the
  ones the index holds (another writer's, or a commit of ours whose outcome we never heard) has its
  deletes read again.
- **The table's files**: a format whose list of live files costs a read of its metadata (Iceberg's
  manifests) keeps it here too, as of a version of the table (``table_files``), brought up to date
  by its own commits and read again when the table moved on without it.
- **Bounded memory**: at most ``max_rows`` rows (every table of the sink together, about 21 bytes a
  row on the integer path) are kept; the files used least recently leave first and are read again
  when a batch needs them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap64

from airflow_provider_mysqlcdc.sinks.arrow_rows import CHUNK_COLUMN
from airflow_provider_mysqlcdc.sinks.data_files import in_chunk_range
from airflow_provider_mysqlcdc.sinks.merge_on_read import (
    POSITION_COLUMN,
    ROW_COLUMN,
    VERSION_COLUMN,
    Matches,
    join_keys,
    matched,
)

#: a data file as a format describes it (``KeyIndex.table_files``)
F = TypeVar("F")
#: rows kept by a sink's index (all its tables): about 420 MB on the integer path
DEFAULT_MAX_ROWS = 20_000_000
ShardRange = tuple[str | None, str | None]


class IndexedFile(Protocol):
    """A data file of a table, as the index reads it (each format's adapter)."""

    @property
    def path(self) -> str:
        """The file's name in its table (what the table's commits name it by)."""

    @property
    def deletes_id(self) -> str | None:
        """The identity of the deletes that apply to the file now (None: none do)."""

    def read_columns(self, columns: Sequence[str]) -> pa.Table:
        """``columns`` of the file's physical rows (its deletes not applied), in file order."""

    def read_deleted(self) -> BitMap64:
        """The positions the file's deletes delete."""


@dataclass
class _FileKeys:
    """One data file's entry: see the module doc."""

    rows: int
    versions: np.ndarray  # by position
    sorted_keys: np.ndarray | None  # int64, the integer path
    order: np.ndarray | None  # the positions of sorted_keys
    keys: pa.Table | None  # the join keys with their positions, any other key
    deletes_id: str | None = None
    deleted: BitMap64 = field(default_factory=BitMap64)
    in_shard: dict[ShardRange, np.ndarray] = field(default_factory=dict)


class KeyIndex:
    """The key index of a sink's tables (module doc), each named by its folder; safe to share between threads."""

    def __init__(self, max_rows: int = DEFAULT_MAX_ROWS):
        self.max_rows = max_rows
        self._files: OrderedDict[tuple[str, str], _FileKeys] = OrderedDict()
        self._rows = 0
        self._lock = threading.Lock()
        #: per table, its live files as of a version (``table_files``)
        self._tables: dict[str, tuple[object, dict[str, Any]]] = {}

    @property
    def rows(self) -> int:
        """The rows the index holds now."""
        return self._rows

    def locate(self, uri: str, candidates: Sequence[IndexedFile], changes: pa.Table, key_columns: Sequence[str],
               nullable_keys: set[str], shard_range: ShardRange | None) -> Matches:
        """Where the live rows of ``changes``' keys are in the ``candidates`` files of the table at
        ``uri`` (in a routed table, the rows of ``shard_range`` only)."""
        query = join_keys(changes, key_columns, nullable_keys)
        integral = _integral(query, key_columns)
        query = query.append_column(ROW_COLUMN, pa.array(np.arange(changes.num_rows, dtype=np.int64)))
        found: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []
        for data_file in candidates:
            entry = self._entry(uri, data_file, key_columns, nullable_keys)
            if integral is not None and entry.sorted_keys is not None:
                rows, positions = _search(entry, integral)
            else:
                rows, positions = _join(entry, query, key_columns)
            if len(positions) and entry.deleted:
                kept = np.fromiter((int(p) not in entry.deleted for p in positions), dtype=bool, count=len(positions))
                rows, positions = rows[kept], positions[kept]
            if len(positions) and shard_range is not None:
                kept = self._in_shard(data_file, entry, shard_range)[positions]
                rows, positions = rows[kept], positions[kept]
            if len(positions):
                found.append((data_file.path, rows, positions, entry.versions[positions]))
        return Matches.joined(found)

    def deleted(self, uri: str, data_file: IndexedFile) -> BitMap64:
        """The positions ``data_file``'s deletes delete (read once per identity of its deletes)."""
        with self._lock:
            entry = self._files.get((uri, data_file.path))
        if entry is not None:
            self._refresh_deletes(data_file, entry)
            return entry.deleted
        return BitMap64() if data_file.deletes_id is None else data_file.read_deleted()

    def committed(self, uri: str, *, added: tuple[str, pa.Table] | None, deletes: Mapping[str, tuple[str | None, BitMap64]],
                  removed: Sequence[str], key_columns: Sequence[str], nullable_keys: set[str],
                  table_files: tuple[object, dict[str, Any]] | None = None) -> None:
        """What a commit of the writer's own did to the table at ``uri``: the data file it ``added``
        (its path and its rows, in file order), the files it gave new ``deletes`` (path: the identity
        of all the deletes that apply to it now, and the rows they delete), the files it ``removed``;
        ``table_files``: the version the commit made and the table's live files in it (``table_files``)."""
        with self._lock:
            if table_files is not None:
                self._tables[uri] = table_files
            for path in removed:
                self._drop((uri, path))
            for path, (deletes_id, rows) in deletes.items():
                entry = self._files.get((uri, path))
                if entry is not None:
                    entry.deletes_id, entry.deleted = deletes_id, rows
        if added is not None:
            path, rows = added
            self._keep((uri, path), _build(rows, key_columns, nullable_keys))

    def table_files(self, uri: str, version: object, load: Callable[[], dict[str, F]]) -> dict[str, F]:
        """The live files of the table at ``uri`` by path, as of ``version`` (the format's identity of
        the table's state: an Iceberg snapshot id): as kept at that version by the last call or by
        ``committed``, else as ``load()`` gives them (read afresh whenever the table moved on)."""
        with self._lock:
            held = self._tables.get(uri)
        if held is None or held[0] != version:
            held = (version, load())
            with self._lock:
                self._tables[uri] = held
        return dict(held[1])

    def retain(self, uri: str, paths: Collection[str]) -> None:
        """Drop the entries of the table at ``uri`` whose files are not among ``paths`` (the table's
        files now: the others left it)."""
        with self._lock:
            for key in [k for k in self._files if k[0] == uri and k[1] not in paths]:
                self._drop(key)

    # --- entries ---------------------------------------------------------------------------------
    def _entry(self, uri: str, data_file: IndexedFile, key_columns: Sequence[str], nullable_keys: set[str]) -> _FileKeys:
        key = (uri, data_file.path)
        with self._lock:
            entry = self._files.get(key)
            if entry is not None:
                self._files.move_to_end(key)
        if entry is None:
            entry = _build(data_file.read_columns([*key_columns, VERSION_COLUMN]), key_columns, nullable_keys)
            self._keep(key, entry)
        self._refresh_deletes(data_file, entry)
        return entry

    def _refresh_deletes(self, data_file: IndexedFile, entry: _FileKeys) -> None:
        wanted = data_file.deletes_id
        if entry.deletes_id != wanted:
            entry.deleted = BitMap64() if wanted is None else data_file.read_deleted()
            entry.deletes_id = wanted

    def _in_shard(self, data_file: IndexedFile, entry: _FileKeys, shard_range: ShardRange) -> np.ndarray:
        if shard_range not in entry.in_shard:
            chunks = data_file.read_columns([CHUNK_COLUMN]).column(CHUNK_COLUMN)
            entry.in_shard[shard_range] = np.asarray(in_chunk_range(chunks, *shard_range).to_numpy(zero_copy_only=False),
                                                     dtype=bool)
        return entry.in_shard[shard_range]

    def _keep(self, key: tuple[str, str], entry: _FileKeys) -> None:
        with self._lock:
            self._drop(key)
            self._files[key] = entry
            self._rows += entry.rows
            while self._rows > self.max_rows and len(self._files) > 1:
                self._drop(next(iter(self._files)))

    def _drop(self, key: tuple[str, str]) -> None:
        entry = self._files.pop(key, None)
        if entry is not None:
            self._rows -= entry.rows


def _integral(keys: pa.Table, key_columns: Sequence[str]) -> np.ndarray | None:
    """The key as int64 values when it is one integer, date or time column without NULLs."""
    if len(key_columns) != 1:
        return None
    column = keys.column(0)
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_date(kind) or pa.types.is_timestamp(kind)
            or pa.types.is_time(kind)) or column.null_count:
        return None
    if pa.types.is_uint64(kind) and len(column) and pc.max(column).as_py() > np.iinfo(np.int64).max:
        return None
    if not pa.types.is_integer(kind):
        column = column.cast(pa.int64() if kind.bit_width == 64 else pa.int32())
    return np.asarray(column.combine_chunks().to_numpy(zero_copy_only=False), dtype=np.int64)


def _build(rows: pa.Table, key_columns: Sequence[str], nullable_keys: set[str]) -> _FileKeys:
    """An entry for a file of ``rows`` (its key columns and ``_cdc_version`` at least, in file order)."""
    keys = join_keys(rows, key_columns, nullable_keys)
    versions = np.asarray(rows.column(VERSION_COLUMN).to_numpy(zero_copy_only=False), dtype=np.int64)
    integral = _integral(keys, key_columns)
    if integral is not None:
        order = np.argsort(integral, kind="stable")
        return _FileKeys(rows.num_rows, versions, integral[order], order, None)
    keys = keys.append_column(POSITION_COLUMN, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
    return _FileKeys(rows.num_rows, versions, None, None, keys)


def _search(entry: _FileKeys, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (change row, position) pairs where the file holds a queried key (every copy of it)."""
    assert entry.sorted_keys is not None and entry.order is not None
    keys = entry.sorted_keys
    if not len(keys):
        empty = np.array([], dtype=np.int64)
        return empty, empty
    low = np.searchsorted(keys, query, side="left")
    at = np.minimum(low, len(keys) - 1)
    hit = np.flatnonzero(keys[at] == query)
    after = np.minimum(low[hit] + 1, len(keys) - 1)
    if not ((after > low[hit]) & (keys[after] == query[hit])).any():  # no key twice: one row each
        return hit.astype(np.int64), entry.order[low[hit]].astype(np.int64)
    counts = np.searchsorted(keys, query[hit], side="right") - low[hit]
    rows = np.repeat(hit, counts)
    starts = np.repeat(low[hit], counts)
    offsets = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    return rows.astype(np.int64), entry.order[starts + offsets].astype(np.int64)


def _join(entry: _FileKeys, query: pa.Table, key_columns: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The (change row, position) pairs where the file holds a queried key (``matched``)."""
    keys = entry.keys
    if keys is None:  # a file indexed on the integer path, queried by keys that are not (NULLs in them)
        keys = pa.table({key_columns[0]: pa.array(entry.sorted_keys), POSITION_COLUMN: pa.array(entry.order, pa.int64())})
    return matched(keys, query, key_columns)
