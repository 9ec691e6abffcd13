"""A batch of changes merged into an Iceberg table by position deletes (merge-on-read): it costs what it
changes, not the size of the files it touches. The Delta sink's twin (sinks/delta/merge_on_read.py).

A copy-on-write merge rewrites every data file that holds a changed chunk key, whole. Here a batch

1. finds where each changed key's row lives, in the data files whose ``_cdc_chunk`` bounds hold a
   changed chunk key, through the sink's key index (sinks/key_index.py: a file's key columns and
   ``_cdc_version`` read once, its delete files' rows read again only when they change), leaving out
   the rows their delete files delete;
2. decides per key as the copy-on-write merge does (sinks/iceberg/rows.py ``merged``): a change
   newer than the row replaces it (a delete removes it), an older one is dropped, a key no file
   holds is inserted unless the change deletes it;
3. names the replaced rows in one position-delete file per touched data file (sinks/iceberg/row_deltas.py),
   holding that file's earlier deleted positions too, so that the earlier delete file leaves; writes
   the new row images, in chunk-key order, as one new data file; a data file whose live rows the
   batch mostly deletes (``REWRITE_SHARE``) is rewritten instead: its survivors join the new file
   (copying a few rows costs less than keeping a mostly deleted file), and it leaves with its
   delete file;
4. commits all of it in one snapshot, with the stream's position in the table's properties and the
   snapshot's summary (sinks/iceberg/commits.py): the batch lands whole, exactly once, or not at
   all, and then the files it wrote are deleted.

A delete file names only data files of earlier snapshots: Iceberg applies position deletes to data
files of the same sequence number too, and the new images are never named.

Columns the table has and the changes lack (the source dropped them) keep the row's value in an
update and are NULL in an insert, as in the copy-on-write merge.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, parquet_file_to_data_file
from pyiceberg.table import FileScanTask
from pyroaring import BitMap64

from airflow_provider_mysqlcdc.cdc.model.schema import TableSchema
from airflow_provider_mysqlcdc.sinks.arrow_rows import CHUNK_COLUMN, row_key_columns, zero_date_columns
from airflow_provider_mysqlcdc.sinks.base import StreamCommit
from airflow_provider_mysqlcdc.sinks.data_files import write_data_file
from airflow_provider_mysqlcdc.sinks.iceberg.catalog import busy_as_conflict
from airflow_provider_mysqlcdc.sinks.iceberg.commits import record_position, stream_summary
from airflow_provider_mysqlcdc.sinks.iceberg.maintenance import CONFLICTS, chunk_bounds, scan_tasks, scoped_deletes
from airflow_provider_mysqlcdc.sinks.iceberg.row_deltas import (
    MetadataOnce,
    RowDelta,
    deleted_positions,
    write_position_deletes,
)
from airflow_provider_mysqlcdc.sinks.iceberg.schema import arrow_schema_of, as_table_rows, file_schema_of
from airflow_provider_mysqlcdc.sinks.key_index import KeyIndex
from airflow_provider_mysqlcdc.sinks.merge_on_read import carried_columns, decide, holding, rewrites
from airflow_provider_mysqlcdc.sinks.routing import shard_bounds

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MergeResult:
    """What one merge-on-read commit did."""

    snapshot_id: int
    rows_deleted: int  # rows newly named by delete files
    files_with_deletes: int
    files_rewritten: int  # rewritten or removed whole
    rows_written: int  # new row images, and the survivors of rewritten files
    files_read: int  # data files whose key columns were read to find the rows


def with_position_deletes(table: Table) -> Table:
    """``table``, upgraded to format v2 (the first with delete files) in a commit of its own when it is v1."""
    if table.format_version >= 2:
        return table
    with busy_as_conflict(), table.transaction() as tx:
        tx.upgrade_table_version(2)
    return table.refresh()


def table_files(table: Table, key_index: KeyIndex) -> dict[str, FileScanTask]:
    """``table``'s data files as of its current snapshot, each with its delete files (``scan_tasks``):
    the key index's copy, kept by this sink's last commit or read, when the table has not moved on since."""
    current = table.current_snapshot()
    return key_index.table_files(table.location(), None if current is None else current.snapshot_id,
                                 lambda: scan_tasks(table))


def merge_batch(table: Table, key_index: KeyIndex, schema: TableSchema, changes: pa.Table,
                commit: StreamCommit) -> MergeResult:
    """Merge ``changes`` of ``schema``'s table (of ``commit``'s shard only in a routed table) into
    ``table`` by ``merge_by_deletes``: one attempt, the caller retries on a conflicting commit."""
    zeros = zero_date_columns(schema)
    return merge_by_deletes(table, key_index, as_table_rows(changes, table), key_columns=row_key_columns(schema),
                            nullable_keys=set(zeros) | set(zeros.values()),
                            shard_range=shard_bounds(commit.shard) if commit.shard else None,
                            carried=[n for n in arrow_schema_of(table).names if n not in changes.column_names],
                            commit=commit)


def merge_by_deletes(table: Table, key_index: KeyIndex, changes: pa.Table, *, key_columns: Sequence[str],
                     nullable_keys: set[str], shard_range: tuple[str | None, str | None] | None, carried: Sequence[str],
                     commit: StreamCommit | None, operation: str = "merge") -> MergeResult:
    """Merge ``changes`` (the last change per key, as the table's rows with ``_cdc_op``) into ``table``
    (as loaded) in one snapshot carrying ``commit``'s position, finding the rows it replaces through
    ``key_index`` and telling it what the commit did. ``carried``: the table's columns the changes
    lack, which an update keeps from its row. Raises pyiceberg's ``CommitFailedException`` when
    another writer committed first, after deleting the files it wrote."""
    uri = table.location()
    every = table_files(table, key_index)
    key_index.retain(uri, every)
    chunk_id = table.schema().find_field(CHUNK_COLUMN).field_id
    tasks = {t.file.file_path: t for t in holding(every.values(), lambda task: chunk_bounds(task, chunk_id),
                                                  changes.column(CHUNK_COLUMN))}
    files = {path: _Indexed(table.io, task) for path, task in tasks.items()}
    matches = key_index.locate(uri, list(files.values()), changes, key_columns, nullable_keys, shard_range)
    decision = decide(changes, matches)
    deleted = decision.deleted
    physical = _PhysicalRows(table)
    images = changes.take(pa.array(decision.image_rows, pa.int64()))
    if carried and images.num_rows:  # an update keeps, of the columns the changes lack, its row's values
        schema = arrow_schema_of(table)
        values = carried_columns(changes, decision, [schema.field(n) for n in carried],
                                 lambda path, positions: physical.rows(tasks[path].file).take(pa.array(positions,
                                                                                                        pa.int64())))
        for name, column in values.items():
            at = images.schema.get_field_index(name)
            images = images.set_column(at, images.field(at), column)

    written: list[str] = []
    try:
        delete_files: list[DataFile] = []
        removed: set[str] = set()  # data files
        removed_deletes: set[str] = set()
        survivors: list[pa.Table] = []
        indexed: dict[str, tuple[str | None, BitMap64]] = {}  # the deletes of each file given new ones, for the index
        for path, positions in deleted.items():
            task = tasks[path]
            old = key_index.deleted(uri, files[path])
            all_deleted = old | BitMap64(positions)
            now_deleted = np.fromiter(all_deleted, dtype=np.int64, count=len(all_deleted))
            scoped = {f.file_path for f in scoped_deletes(task)}
            if rewrites(task.file.record_count, len(old), len(now_deleted)):
                rows = physical.rows(task.file)
                kept = rows.filter(pa.array(~np.isin(np.arange(rows.num_rows), now_deleted)))
                if kept.num_rows:
                    survivors.append(kept)
                removed.add(path)
                removed_deletes |= scoped
                continue
            kept_elsewhere = [f for f in task.delete_files if f.file_path not in scoped]
            if kept_elsewhere:  # another writer's delete files stay, naming their rows
                now_deleted = np.setdiff1d(now_deleted, deleted_positions(table.io, kept_elsewhere, path))
            delete_file = write_position_deletes(table, path, now_deleted)
            written.append(delete_file.file_path)
            delete_files.append(delete_file)
            removed_deletes |= scoped
            indexed[path] = (_deletes_id([*kept_elsewhere, delete_file]), all_deleted)
            every[path] = FileScanTask(task.file, {*kept_elsewhere, delete_file})
        new_rows = pa.concat_tables([images, *survivors]) if survivors else images
        data_files = []
        if new_rows.num_rows:
            new_rows = new_rows.take(pc.sort_indices(new_rows, sort_keys=[(CHUNK_COLUMN, "ascending")]))
            folder = uri.rstrip("/") + "/data"
            path = f"{folder}/{write_data_file(folder, new_rows, file_schema_of(table), prefix='merged').path}"
            written.append(path)
            data_files.append(parquet_file_to_data_file(table.io, table.metadata, path))
            data_files[-1].spec_id = table.metadata.default_spec_id  # as a manifest read gives it (``every``)
        rewritten = sum(1 for path in deleted if path in removed)
        rows_deleted = sum(len(positions) for path, positions in deleted.items() if path not in removed)
        summary = {**stream_summary(commit, operation), "mysqlcdc.merge-mode": "merge-on-read",
                   "mysqlcdc.files-read": str(len(tasks)), "mysqlcdc.files-rewritten": str(rewritten)}
        with busy_as_conflict(), MetadataOnce(table) as tx:
            delta = RowDelta(tx, table.io, data_files=data_files, delete_files=delete_files, removed_data=removed,
                             removed_deletes=removed_deletes, summary=summary)
            delta.commit()
            record_position(tx, commit)
    except CONFLICTS:  # nothing of it is in the table
        for path in written:
            with contextlib.suppress(FileNotFoundError):
                table.io.delete(path)
        raise
    except BaseException:
        log.warning("merge into %s failed before its commit was known to land; its files stay until orphan "
                    "files are deleted", table.name())
        raise
    for path in removed:
        del every[path]
    every.update((f.file_path, FileScanTask(f)) for f in data_files)
    key_index.committed(uri, added=(data_files[0].file_path, new_rows) if data_files else None, deletes=indexed,
                        removed=sorted(removed), key_columns=key_columns, nullable_keys=nullable_keys,
                        table_files=(delta.snapshot_id, every))
    return MergeResult(delta.snapshot_id, rows_deleted, len(delete_files), rewritten, new_rows.num_rows, len(tasks))


class _PhysicalRows:
    """Data files' physical rows (delete files not applied), as the table's columns, read once."""

    def __init__(self, table: Table):
        self.table = table
        self._read: dict[str, pa.Table] = {}

    def rows(self, data_file: DataFile) -> pa.Table:
        if data_file.file_path not in self._read:
            scan = ArrowScan(self.table.metadata, self.table.io, self.table.schema(), AlwaysTrue())
            self._read[data_file.file_path] = as_table_rows(scan.to_table([FileScanTask(data_file)]), self.table)
        return self._read[data_file.file_path]


@dataclass(frozen=True)
class _Indexed:
    """A data file as the key index reads it (sinks/key_index.py): its deletes are the delete files the
    scan matched to it, named by their paths."""

    io: FileIO
    task: FileScanTask

    @property
    def path(self) -> str:
        return self.task.file.file_path

    @property
    def deletes_id(self) -> str | None:
        return _deletes_id(self.task.delete_files)

    def read_columns(self, columns: Sequence[str]) -> pa.Table:
        with self.io.new_input(self.path).open() as handle:
            return pq.read_table(handle, columns=list(columns))

    def read_deleted(self) -> BitMap64:
        return BitMap64(deleted_positions(self.io, self.task.delete_files, self.path))


def _deletes_id(delete_files: Iterable[DataFile]) -> str | None:
    return "\n".join(sorted(f.file_path for f in delete_files)) or None
