"""The rows of a micro-batch: how decoded items travel from the executors to the driver.

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

from airflow_provider_mysqlcdc.cdc.binlog.table_map import schema_as_of
from airflow_provider_mysqlcdc.cdc.errors import InternalError, describe_error, is_table_fault
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, TableFailed
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.sinks.change_columns import TableChanges, change_columns
from airflow_provider_mysqlcdc.state.spill import SpillWriter, read_spill_file
from airflow_provider_mysqlcdc.stream.events import PieceRead

SCHEMA = "version LONG, row INT, part INT, kind STRING, count INT, ts_ms LONG, gen INT, payload BINARY"
RUN_LENGTH = 1000
SPILLED = "spilled"
CHANGES = "changes"
FAILED = "failed"
#: a decoding task's timings (``PieceRead``): never spilled, taken out before the items (``piece_rows``)
PIECE = "piece"
#: a spill file is closed (and a new one begun) once it holds this many bytes
SPILL_FILE_BYTES = 64 << 20


class RowEmitter:
    """Makes one partition's rows: runs of changes and markers, inline up to ``inline_bytes`` (0: no
    limit), then in spill files under ``spill_folder``. Every row passes through a ``yield from``;
    ``close()`` yields the row of the last spill file.

    One table's failure never stops the partition: a change that cannot be typed (or that the reader
    could not decode, ``fail``) becomes a ``TableFailed`` marker at its event, after the table's
    changes of earlier events; the partition sends none of the table's changes after it."""

    def __init__(self, generation: int, *, schemas: dict[TableId, TableSchema] | None = None, changelog: bool = False,
                 spill_folder: str | None = None, inline_bytes: int = 0):
        self.generation = generation
        #: the executor's schema of each table, which types its changes' columns (None: inferred)
        self.schemas = schemas or {}
        #: whether the changes carry their images as JSON for the changelog
        self.changelog = changelog
        self.spill_folder = spill_folder
        self.inline_left = inline_bytes if spill_folder and inline_bytes else None
        self._spill: SpillWriter | None = None
        self._spill_first: tuple | None = None
        self._spill_items = 0
        self._spill_ts = 0
        #: the tables of this partition that failed (their later changes are not sent)
        self.failed: set[TableId] = set()
        #: the changes sent so far (inline or spilled)
        self.changes_sent = 0
        #: per table map's schema (by identity, held): the executor's schema it was given, and the schema as of it
        self._as_of_schemas: dict[int, tuple[TableSchema, TableSchema | None, TableSchema]] = {}

    def changes(self, batch: Sequence[ChangeRecord], decisions: Sequence[bool]) -> Iterator[tuple]:
        """One row per table of the records of ``batch`` to keep (``decisions``), if any, in the order
        of their first change (a table's failure in its place); one more where a table's changes were
        written under another table map (a DDL the reader did not see between them), each of its runs
        under one schema."""
        runs: list[tuple[TableId, list[ChangeRecord]]] = []
        current: dict[TableId, tuple[TableSchema | None, list[ChangeRecord]]] = {}
        for record, keep in zip(batch, decisions):
            if keep and record.table_id not in self.failed:
                run = current.get(record.table_id)
                if run is None or run[0] is not record.schema:
                    run = current[record.table_id] = (record.schema, [])
                    runs.append((record.table_id, run[1]))
                run[1].append(record)
        rows = [row for table_id, kept in runs for row in self._table_rows(table_id, kept)]
        self.changes_sent += sum(row[4] for row in rows if row[3] == CHANGES)
        for row in sorted(rows, key=row_key):
            yield from self._emit(row)

    def _table_rows(self, table_id: TableId, kept: list[ChangeRecord]) -> list[tuple]:
        try:
            return [self._changes_row(table_id, kept)]
        except Exception as exc:  # noqa: BLE001 - what is not the table's is raised again
            if not is_table_fault(exc):
                raise
            error: BaseException = exc
        # rare: the first change that cannot be typed with the ones before it (the longest prefix that
        # types, by halving); the table's events before it go, then its failure
        typed, failing = 0, len(kept)  # kept[:typed] types, kept[:failing] does not (with ``error``)
        while failing - typed > 1:
            middle = (typed + failing) // 2
            found = self._typing_error(table_id, kept[:middle])
            typed, failing, error = (middle, failing, error) if found is None else (typed, middle, found)
        bad = kept[typed]
        before = [r for r in kept if r.offset < bad.offset]
        self.failed.add(table_id)
        failure = TableFailed(table_id, bad.offset, f"a change at {bad.offset} cannot be typed for the sink: "
                                                    f"{describe_error(error)}")
        return ([self._changes_row(table_id, before)] if before else []) + [self._failure_row(failure)]

    def _typing_error(self, table_id: TableId, records: list[ChangeRecord]) -> BaseException | None:
        try:
            self._changes_row(table_id, records)
            return None
        except Exception as exc:  # noqa: BLE001
            if not is_table_fault(exc):
                raise
            return exc

    def _changes_row(self, table_id: TableId, kept: list[ChangeRecord]) -> tuple:
        first = kept[0]
        schema = self._as_of(table_id, first.schema)
        data = change_columns(schema, kept, changelog=self.changelog)
        return (first.offset.version, first.row, first.part, CHANGES, len(kept), max(r.timestamp_ms for r in kept),
                self.generation, TableChanges(table_id, data, schema).to_ipc())

    def _as_of(self, table_id: TableId, mapped: TableSchema | None) -> TableSchema | None:
        """The table's schema as of changes decoded under ``mapped`` (their table map's), which types
        their columns and travels with them: cdc/binlog/table_map.py ``schema_as_of``."""
        known = self.schemas.get(table_id)
        if mapped is None:
            return known
        held = self._as_of_schemas.get(id(mapped))
        if held is None or held[0] is not mapped or held[1] is not known:
            held = self._as_of_schemas[id(mapped)] = (mapped, known, schema_as_of(mapped, known))
        return held[2]

    def fail(self, failure: TableFailed) -> Iterator[tuple]:
        """The reader could not decode a change of the table (sent once; its later changes are not)."""
        if failure.table_id not in self.failed:
            self.failed.add(failure.table_id)
            yield from self._emit(self._failure_row(failure))

    def _failure_row(self, failure: TableFailed) -> tuple:
        return self._marker_row(failure.offset.version, 0, FAILED, 0, failure)

    def marker(self, version: int, row: int, kind: str, ts_ms: int, item: Any) -> Iterator[tuple]:
        yield from self._emit(self._marker_row(version, row, kind, ts_ms, item))

    def _marker_row(self, version: int, row: int, kind: str, ts_ms: int, item: Any) -> tuple:
        return (version, row, 0, kind, 1, ts_ms, self.generation, pickle.dumps([item], protocol=pickle.HIGHEST_PROTOCOL))

    def piece(self, piece: PieceRead) -> tuple:
        """The row of the partition's timings (sent inline, whatever the budget: one small row)."""
        return (0, 0, 0, PIECE, 0, 0, self.generation, pickle.dumps(piece, protocol=pickle.HIGHEST_PROTOCOL))

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
    return [r for r in rows if r.kind != PIECE], [pickle.loads(r.payload) for r in rows if r.kind == PIECE]


def spill_urls(rows: Iterable[Any]) -> list[str]:
    """The spill files a batch's rows name."""
    return [pickle.loads(r.payload) for r in rows if r.kind == SPILLED]


def batch_items(rows: Sequence[Any]) -> Iterator[Any]:
    """Every item of a batch's rows (sorted by ``row_key``), spill files read in place, in binlog
    order: ``TableChanges`` and markers."""
    last = None
    for row in rows:
        runs = read_spill_file(pickle.loads(row.payload)) if row.kind == SPILLED else [tuple(row)]
        for run in runs:
            key = row_key(run)
            if last is not None and key < last:  # a broken promise of the partitions, never silently applied
                raise InternalError(f"micro-batch rows out of binlog order: {key} after {last}")
            last = key
            if run[3] == CHANGES:
                yield TableChanges.from_ipc(run[-1])
            else:
                yield from pickle.loads(run[-1])
