"""Turning split results and change batches into sink writes (one table at a time).

Both paths stamp every row with the metadata columns (arrow_rows.py); ``_cdc_chunk`` comes from
the chunk key's database order (records/ordering.py), so a split's rows are exactly the string
range ``[encode(start), encode(end))``.

The stream's writes are exactly-once by position (sinks/base.py): a writer knows the position of
the last change committed to its table (read from the sink once, then kept), applies only changes
after it, and records the new position in the same commit. So whatever a restarted stream reads
again (a replayed batch, a new or older checkpoint's batches, cut differently) is applied once.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering, encode_int_sort_keys, encode_sort_key
from airflow_provider_mysqlcdc.sinks.arrow_rows import (
    arrow_type,
    column_values,
    data_schema,
    row_key_columns,
    rows_to_data_table,
    with_metadata,
)
from airflow_provider_mysqlcdc.sinks.base import Position, Sink, StreamCommit
from airflow_provider_mysqlcdc.sinks.change_columns import (
    change_columns,
    changes_after,
    conform_changes,
    last_change_per_key,
    position_at,
)
from airflow_provider_mysqlcdc.sinks.changelog import changelog_rows, truncation_changelog, with_source
from airflow_provider_mysqlcdc.sinks.routing import sink_target


def ddl_position(offset: BinlogOffset) -> Position:
    """The position of a DDL statement (no row event ends where it ends)."""
    return (*offset.sort_key, 0, 0)


def staged_position(as_of: BinlogOffset, sequence: int) -> Position:
    """The position of the ``sequence``-th staged split applied at a micro-batch start ``as_of``."""
    return (*as_of.sort_key, -1, sequence)


class SinkWriter:
    def __init__(self, sink: Sink, schema: TableSchema, chunk_key: str, ordering: KeyOrdering):
        self.sink = sink
        self.schema = schema
        self.chunk_key = chunk_key
        self.ordering = ordering
        #: the sink table the rows go to, and their shard of it when it is routed (sinks/routing.py)
        self.target = sink_target(schema)
        #: per target (False: the table, True: its changelog) the last position committed to it
        self._applied: dict[bool, Position | None] = {}

    def carry_positions(self, other: "SinkWriter") -> None:
        """Take the positions ``other`` (a writer of the same sink table and shard) read or committed."""
        self._applied.update(other._applied)

    def applied(self, changelog: bool = False) -> Position | None:
        if changelog not in self._applied:
            self._applied[changelog] = self.sink.applied_position(self.target.table_id, changelog=changelog,
                                                                  shard=self.target.shard)
        return self._applied[changelog]

    def is_applied(self, position: Position, changelog: bool = False) -> bool:
        applied = self.applied(changelog)
        return applied is not None and position <= applied

    def commit(self, app_id: str, batch_id: int, position: Position) -> StreamCommit:
        """What a stream's commit of this writer's rows up to ``position`` records (sinks/base.py)."""
        return StreamCommit(app_id, batch_id, position, self.target.shard)

    def _once(self, commit: StreamCommit, write: Callable[[], None], changelog: bool = False) -> bool:
        """``write()`` (a commit carrying ``commit``) unless the target holds its position already."""
        if self.is_applied(commit.position, changelog):
            return False
        write()
        self._applied[changelog] = commit.position
        return True

    def _chunks(self, data: pa.Table) -> pa.Array | list[str]:
        """``_cdc_chunk`` for every row of ``data`` (vectorised for integer chunk keys): the chunk key's
        text, after the shard's tag in a routed table. Of the shard's own value: a routed table may
        hold the column in a wider type (arrow_rows.py ``arrow_schema``), whose values (a DECIMAL
        of a larger scale) would encode otherwise than the split bounds, which come from the source."""
        own = arrow_type(self.schema.column(self.chunk_key))
        column = data.column(self.chunk_key)
        if not column.type.equals(own):
            column = column.cast(own)
            data = data.set_column(data.schema.get_field_index(self.chunk_key), self.chunk_key, column)
        tag = self.target.tag
        if pa.types.is_integer(column.type) and not self.ordering.needs_database:
            texts = encode_int_sort_keys(column.combine_chunks())  # integers (and TIME as microseconds)
            return pc.binary_join_element_wise(tag, texts, "") if tag else texts
        keys = column_values(data, self.schema, self.chunk_key)
        return [tag + encode_sort_key(k) for k in self.ordering.sort_keys(keys)]

    def split_range(self, split: SnapshotSplit) -> tuple[str | None, str | None]:
        """The split's key range as a range of ``_cdc_chunk``."""
        start, end = self.ordering.sort_keys([split.start, split.end])
        return self.target.bounds(None if start is None else encode_sort_key(start),
                                  None if end is None else encode_sort_key(end))

    def write_split(self, finished: FinishedSplit, rows: Sequence[dict]) -> None:
        """Replace exactly the split's key range by its rows as of the high watermark (idempotent)."""
        self.write_split_table(finished, rows_to_data_table(self.schema, rows))

    def write_split_table(self, finished: FinishedSplit, data: pa.Table, *, commit: StreamCommit | None = None) -> bool:
        """The same, for rows already in Arrow (the source columns only); a stream's ``commit`` at
        most once (False: its position was committed already)."""
        def write() -> None:
            start, end = self.split_range(finished.split)
            self.sink.replace_range(self.target.table_id, start, end, self.stamped(data, finished.high_watermark),
                                    commit=commit)

        if commit is None:
            write()
            return True
        return self._once(commit, write)

    def stamped(self, data: pa.Table, as_of: BinlogOffset) -> pa.Table:
        """Snapshot rows (the source columns) with their metadata columns: read as of ``as_of``."""
        return with_metadata(data, self.schema, ops="r", offsets=as_of, event_ts_ms=int(time.time() * 1000),
                             chunks=self._chunks(data))

    def truncate_before(self, offset: BinlogOffset, timestamp_ms: int, *, app_id: str, batch_id: int,
                        changelog: bool = False) -> bool:
        """A TRUNCATE at ``offset``: remove the rows older than it (a split read after it keeps its rows)."""
        commit = self.commit(app_id, batch_id, ddl_position(offset))
        table_id = self.target.table_id
        if changelog:
            self._once(commit, lambda: self.sink.append_changelog(
                table_id, self._logged(truncation_changelog(offset, timestamp_ms)), commit=commit), changelog=True)
        return self._once(commit, lambda: self.sink.truncate_before(table_id, offset.version, commit=commit))

    def fill_before(self, offset: BinlogOffset, values: dict[str, Any], *, app_id: str, batch_id: int) -> bool:
        """An ``ADD COLUMN ... DEFAULT`` at ``offset``: rows older than it get the default (``values``,
        as the source reads them), typed like the sink's columns; once per position."""
        typed = rows_to_data_table(self.schema, [values])
        scalars = {name: typed.column(name)[0] for name in values}
        commit = self.commit(app_id, batch_id, ddl_position(offset))
        return self._once(commit, lambda: self.sink.fill_before(self.target.table_id, scalars, offset.version,
                                                               commit=commit))

    def _logged(self, rows: pa.Table) -> pa.Table:
        """Changelog rows of this writer's table, with the shard's source names in a routed table."""
        return with_source(rows, self.schema.table_id) if self.target.shard else rows

    @functools.cached_property
    def data_schema(self) -> pa.Schema:
        return data_schema(self.schema)

    def changes_table(self, changes: pa.Table) -> pa.Table:
        """The sink rows of a run of change columns (conformed to this writer: ``conform_changes``)."""
        latest = last_change_per_key(changes, row_key_columns(self.schema))
        data = latest.select(self.data_schema.names)
        offsets = tuple(latest.column(n) for n in ("_cdc_binlog_file", "_cdc_binlog_pos", "_cdc_version"))
        return with_metadata(data, self.schema, ops=latest.column("_cdc_op"), offsets=offsets,
                             event_ts_ms=latest.column("_cdc_event_ms"), chunks=self._chunks(data))

    def apply_changes(self, changes: pa.Table, *, app_id: str, batch_id: int, changelog: bool = False) -> int:
        """Merge the changes (change columns in binlog order, conformed to this writer) not applied
        yet in one commit, and then append them to the changelog too when asked (so that changes the
        table refuses never reach its changelog); returns how many were merged."""
        new = changes_after(changes, self.applied())
        if new.num_rows:
            commit = self.commit(app_id, batch_id, position_at(new, new.num_rows - 1))
            self._once(commit, lambda: self.sink.merge_changes(self.schema, self.changes_table(new), commit=commit))
        if changelog:
            logged = changes_after(changes, self.applied(changelog=True))
            if logged.num_rows:
                commit = self.commit(app_id, batch_id, position_at(logged, logged.num_rows - 1))
                self._once(commit, lambda: self.sink.append_changelog(self.target.table_id,
                                                                      self._logged(changelog_rows(logged)),
                                                                      commit=commit), changelog=True)
        return new.num_rows


def apply_table_changes(writers: dict, changes: dict, *, app_id: str, batch_id: int, changelog: bool = False) -> dict:
    """Apply one batch of change columns per table (each in binlog order, conformed to its writer),
    each table in one commit; returns rows merged per table. Changes a table already holds (a batch
    replayed after a crash, or read again by a new checkpoint) are left out. With ``changelog``,
    every change is also appended to the table's changelog, exactly once the same way."""
    merged = {}
    for table_id, table_changes in changes.items():
        count = writers[table_id].apply_changes(table_changes, app_id=app_id, batch_id=batch_id, changelog=changelog)
        if count:
            merged[table_id] = count
    return merged


#: how many sink tables one unit of a batch merges into at once, on a sink that allows it
#: (``Sink.concurrent_tables``): a batch of small transactions over ten tables is ten merges, each
#: mostly a fixed cost that a merge of another table can overlap
MERGE_THREADS = 4


def merge_outcomes(writers: dict, changes: dict[TableId, pa.Table], *, app_id: str, batch_id: int,
                   changelog: bool = False, threads: int = MERGE_THREADS,
                   tables_fault: Callable[[TableId, Exception], bool] = lambda table_id, exc: False
                   ) -> dict[TableId, int | Exception]:
    """``SinkWriter.apply_changes`` for each table's changes (conformed to its writer), the tables of
    different sink tables at once in up to ``threads`` threads when the sink allows it; the shards of
    one routed sink table (routing.py) one after another. Per table, in the order of ``changes``: the
    rows merged, or the exception its merge raised. An error that is not the table's own fault
    (``tables_fault``) stops the merges not begun yet (they are left out of the result): the batch
    fails, and its replay merges them. Each merge commits on its own and exactly once by position, so
    the replay redoes only what no table holds."""
    by_target: dict[TableId, list[TableId]] = {}
    for table_id in changes:
        by_target.setdefault(writers[table_id].target.table_id, []).append(table_id)
    failed = threading.Event()

    def merge(tables: list[TableId]) -> dict[TableId, int | Exception]:
        outcomes: dict[TableId, int | Exception] = {}
        for table_id in tables:
            if failed.is_set():
                break
            try:
                outcomes[table_id] = writers[table_id].apply_changes(changes[table_id], app_id=app_id,
                                                                     batch_id=batch_id, changelog=changelog)
            except Exception as exc:  # noqa: BLE001 - handed to the caller, which raises what is not the table's
                outcomes[table_id] = exc
                if not tables_fault(table_id, exc):
                    failed.set()
            except BaseException:
                failed.set()
                raise
        return outcomes

    groups = list(by_target.values())
    if threads <= 1 or len(groups) <= 1 or not all(writers[t].sink.concurrent_tables for t in changes):
        done = [merge(group) for group in groups]
    else:
        pool = ThreadPoolExecutor(min(threads, len(groups)), thread_name_prefix="mysqlcdc-merge")
        try:
            done = list(pool.map(merge, groups))
        finally:
            failed.set()  # after an error here (an interrupt), no queued merge begins
            pool.shutdown(wait=True, cancel_futures=True)
    merged = {table_id: outcome for outcomes in done for table_id, outcome in outcomes.items()}
    return {table_id: merged[table_id] for table_id in changes if table_id in merged}


def apply_change_batch(writers: dict, records: Sequence[ChangeRecord], *, app_id: str, batch_id: int,
                       changelog: bool = False) -> dict:
    """``apply_table_changes`` for records (in binlog order), typed by each table's writer."""
    by_table: dict = {}
    for record in records:
        by_table.setdefault(record.table_id, []).append(record)
    changes = {t: change_columns(writers[t].schema, r, changelog=changelog) for t, r in by_table.items()}
    return apply_table_changes(writers, {t: conform_changes(c, writers[t].data_schema)[0] for t, c in changes.items()},
                               app_id=app_id, batch_id=batch_id, changelog=changelog)
