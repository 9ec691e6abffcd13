"""The rows of a micro-batch: how a read's items (stream/reading.py) travel from the executors to
the driver.

A row is one table's part of a run of up to ``RUN_LENGTH`` changes, as Arrow IPC in ``payload``
(``TableChanges``: change columns typed on the executor, sinks/change_columns.py), or one marker
item (a DDL, an activation, a staged split, a purged gap, a table that failed), pickled, or a
decoding task's timings (``PieceRead``), which the driver logs and does not apply. The only consumer is our Python
``foreachBatch``; a few large binary rows keep Spark's per-row cost off the hot path. ``version``
(the first change's offset as an int64) and ``row``/``part`` order the rows; ``gen`` is the
registry generation the batch captures, under which the driver applies it. A run's tables come
in the order of their first change; between two markers, the driver needs the changes of each
table in binlog order, not the tables' changes interleaved (each table commits on its own).

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

from airflow_provider_mysqlcdc.state.spill import SpillWriter, read_spill_file
from airflow_provider_mysqlcdc.stream.events import PieceRead
from airflow_provider_mysqlcdc.stream.reading import PIECE, ReadItem, in_binlog_order, item_of, item_payload

SCHEMA = "version LONG, row INT, part INT, kind STRING, count INT, ts_ms LONG, gen INT, payload BINARY"
SPILLED = "spilled"
#: a spill file is closed (and a new one begun) once it holds this many bytes
SPILL_FILE_BYTES = 64 << 20


class RowEmitter:
    """Makes one partition's rows from a read's items (stream/reading.py): runs of changes and
    markers, inline up to ``inline_bytes`` (0: no limit), then in spill files under
    ``spill_folder``; a read's timings always inline. Every row passes through a ``yield from``;
    ``close()`` yields the row of the last spill file."""

    def __init__(self, generation: int, *, spill_folder: str | None = None, inline_bytes: int = 0):
        self.generation = generation
        self.spill_folder = spill_folder
        self.inline_left = inline_bytes if spill_folder and inline_bytes else None
        self._spill: SpillWriter | None = None
        self._spill_first: tuple | None = None
        self._spill_items = 0
        self._spill_ts = 0

    def rows(self, items: Iterable[ReadItem]) -> Iterator[tuple]:
        """The rows of a read's items, the last spill file's included."""
        for item in items:
            yield from self.emit(item)
        yield from self.close()

    def emit(self, item: ReadItem) -> Iterator[tuple]:
        version, row, part = item.key
        if item.kind == PIECE:  # one small row, whatever the budget
            yield (0, 0, 0, PIECE, 0, 0, self.generation, item_payload(item))
            return
        yield from self._emit((version, row, part, item.kind, item.count, item.ts_ms, self.generation,
                               item_payload(item)))

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


def piece_rows(rows: Sequence[Any]) -> tuple[list[Any], list[PieceRead]]:
    """A batch's rows apart from its decoding tasks' timings, and those timings."""
    return [r for r in rows if r.kind != PIECE], [item_of(PIECE, r.payload) for r in rows if r.kind == PIECE]


def spill_urls(rows: Iterable[Any]) -> list[str]:
    """The spill files a batch's rows name."""
    return [pickle.loads(r.payload) for r in rows if r.kind == SPILLED]


def batch_items(rows: Sequence[Any]) -> Iterator[Any]:
    """Every item of a batch's rows (sorted by ``row_key``), spill files read in place, in binlog
    order: ``TableChanges`` and markers."""
    runs = (run for row in rows
            for run in (read_spill_file(pickle.loads(row.payload)) if row.kind == SPILLED else [tuple(row)]))
    for run in in_binlog_order(runs, row_key):
        yield item_of(run[3], run[-1])
