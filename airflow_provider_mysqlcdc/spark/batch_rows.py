"""The rows of a micro-batch: how decoded items travel from the executors to the driver.

A row is a run of up to ``RUN_LENGTH`` change records pickled together in ``payload``, or one
marker item (a DDL, an activation, a staged split, a purged gap). The only consumer is our Python
``foreachBatch``; pickling keeps every type exact and keeps Spark's per-row cost off the hot path.
``version`` (the first item's offset as an int64) and ``row``/``part`` order the rows; ``gen`` is
the registry generation the batch captures, under which the driver applies it.

Memory is bounded by configuration, not by the batch: a partition sends its first
``inline_bytes`` of rows through Spark; from there on it writes its rows to spill files in the
state location (state/spill.py) and sends one small ``spilled`` row per file, ordered like the
file's first row. A partition's rows come in binlog order and partitions cover disjoint parts of
the binlog, so the driver, sorting the rows it collects and reading each spill file in place
(``batch_items``), sees every item in binlog order, one run at a time.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord
from airflow_provider_mysqlcdc.state.spill import SpillWriter, read_spill_file

SCHEMA = "version LONG, row INT, part INT, kind STRING, count INT, ts_ms LONG, gen INT, payload BINARY"
RUN_LENGTH = 1000
SPILLED = "spilled"
#: a spill file is closed (and a new one begun) once it holds this many bytes
SPILL_FILE_BYTES = 64 << 20


class RowEmitter:
    """Makes one partition's rows: runs of changes and markers, inline up to ``inline_bytes`` (0: no
    limit), then in spill files under ``spill_folder``. Every row passes through a ``yield from``;
    ``close()`` yields the row of the last spill file."""

    def __init__(self, generation: int, *, spill_folder: str | None = None, inline_bytes: int = 0):
        self.generation = generation
        self.spill_folder = spill_folder
        self.inline_left = inline_bytes if spill_folder and inline_bytes else None
        self._spill: SpillWriter | None = None
        self._spill_first: tuple | None = None
        self._spill_items = 0
        self._spill_ts = 0

    def changes(self, batch: Sequence[ChangeRecord], decisions: Sequence[bool]) -> Iterator[tuple]:
        """One row for the records of ``batch`` to keep (``decisions``), if any."""
        kept = [r for r, keep in zip(batch, decisions) if keep]
        if kept:
            first = kept[0]
            yield from self._emit((first.offset.version, first.row, first.part, "changes", len(kept),
                                   max(r.timestamp_ms for r in kept), self.generation,
                                   pickle.dumps(kept, protocol=pickle.HIGHEST_PROTOCOL)))

    def marker(self, version: int, row: int, kind: str, ts_ms: int, item: Any) -> Iterator[tuple]:
        yield from self._emit((version, row, 0, kind, 1, ts_ms, self.generation,
                               pickle.dumps([item], protocol=pickle.HIGHEST_PROTOCOL)))

    def _emit(self, row: tuple) -> Iterator[tuple]:
        if self.inline_left is None or (self._spill is None and self.inline_left > 0):
            if self.inline_left is not None:
                self.inline_left -= len(row[-1])
            yield row
            return
        if self._spill is None:
            assert self.spill_folder is not None
            self._spill = SpillWriter(self.spill_folder)
            self._spill_first, self._spill_items, self._spill_ts = row, 0, 0
        self._spill.write(row)
        self._spill_items += row[4]
        self._spill_ts = max(self._spill_ts, row[5])
        if self._spill.bytes >= SPILL_FILE_BYTES:
            yield from self.close()

    def close(self) -> Iterator[tuple]:
        if self._spill is not None:
            self._spill.close()
            first = self._spill_first
            assert first is not None
            yield (first[0], first[1], first[2], SPILLED, self._spill_items, self._spill_ts, self.generation,
                   pickle.dumps(self._spill.url, protocol=pickle.HIGHEST_PROTOCOL))
            self._spill = None


def row_key(row: Any) -> tuple[int, int, int]:
    return (row[0], row[1], row[2])


def spill_urls(rows: Iterable[Any]) -> list[str]:
    """The spill files a batch's rows name."""
    return [pickle.loads(r.payload) for r in rows if r.kind == SPILLED]


def batch_items(rows: Sequence[Any]) -> Iterator[Any]:
    """Every item of a batch's rows (sorted by ``row_key``), spill files read in place, in binlog order."""
    last = None
    for row in rows:
        runs = read_spill_file(pickle.loads(row.payload)) if row.kind == SPILLED else [tuple(row)]
        for run in runs:
            key = row_key(run)
            if last is not None and key < last:  # a broken promise of the partitions, never silently applied
                raise RuntimeError(f"micro-batch rows out of binlog order: {key} after {last}")
            last = key
            yield from pickle.loads(run[-1])
