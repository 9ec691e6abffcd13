"""A batch of changes merged into a Delta table by deletion vectors (merge-on-read): it costs what it
changes, not the size of the files it touches.

A copy-on-write MERGE rewrites every file that holds a changed key, whole: 1,000 updates of random
keys rewrite nearly all of a table. Here a batch

1. finds where each changed key's row lives: reading only the key columns and ``_cdc_version`` of
   the files whose ``_cdc_chunk`` range holds a changed key, skipping rows their vectors delete;
2. decides per key as the MERGE does: a change newer than the row replaces it (a delete removes it),
   an older one is dropped, a key no file holds is inserted unless the change deletes it;
3. marks the replaced rows deleted, in one new deletion vector file (each touched file's vector is
   its old rows and the new ones), and writes the new row images, in chunk-key order, as one new
   data file; a file whose live rows the batch mostly deletes is rewritten instead (copying its few
   survivors costs less than keeping a mostly deleted file), one whose rows it all deletes removed;
4. commits all of it with the stream's position records (``txn``) in one commit (sinks/delta/log.py):
   the batch lands whole, exactly once, or not at all, and then its files are deleted.

Columns the table has and the changes lack (the source dropped them) keep the row's value in an
update and are NULL in an insert, as in the copy-on-write MERGE.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, TableFeatures
from deltalake.schema import Field as DeltaField
from pyroaring import BitMap64

from airflow_provider_mysqlcdc.cdc.errors import ConcurrentCommit
from airflow_provider_mysqlcdc.cdc.model.schema import TableSchema
from airflow_provider_mysqlcdc.sinks.arrow_rows import CHUNK_COLUMN, conform_to, row_key_columns, zero_date_columns
from airflow_provider_mysqlcdc.sinks.data_files import (
    DataFile,
    delete_data_file,
    rows_outside,
    write_data_file,
)
from airflow_provider_mysqlcdc.sinks.delta.data_files import add_json
from airflow_provider_mysqlcdc.sinks.delta.deletion_vectors import DeletionVector, kept_mask, read_vector, write_vectors
from airflow_provider_mysqlcdc.sinks.delta.log import DeltaLog, LiveFile, checkpoint_due
from airflow_provider_mysqlcdc.sinks.delta.predicates import file_placement
from airflow_provider_mysqlcdc.sinks.key_index import KeyIndex
from airflow_provider_mysqlcdc.sinks.merge_on_read import (
    VERSION_COLUMN,
    Decision,
    carried_columns,
    decide,
    holding,
    rewrites,
)
from airflow_provider_mysqlcdc.sinks.routing import shard_bounds

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class MergeResult:
    """What one merge-on-read commit did."""

    version: int
    rows_deleted: int  # rows marked deleted by vectors
    files_with_vectors: int
    files_rewritten: int  # rewritten or removed whole
    rows_written: int  # new row images, and the survivors of rewritten files
    files_read: int  # files whose key columns were read to find the rows


def merge_into(uri: str, storage_options: dict[str, str] | None, delta_log: DeltaLog, key_index: KeyIndex,
               schema: TableSchema, changes: pa.Table, *, shard: str,
               transactions: Sequence[tuple[str, int]], table: DeltaTable | None = None) -> MergeResult:
    """Merge ``changes`` of ``schema``'s table into the Delta table at ``uri`` (of ``shard`` only in a
    routed table) by deletion vectors: a table made before merge-on-read gets the ``deletionVectors``
    feature first, and columns the changes add are added first, each in a commit of its own; a
    checkpoint follows where delta-rs's own commits would write one. One attempt: the caller retries
    on a conflicting commit. ``table``: the table as ``delta_log`` loaded it last (None: loaded now)."""
    table = table or delta_log.latest(storage_options)
    if with_vectors(table, uri, storage_options) is not table:
        table = delta_log.latest(storage_options)
    current = pa.schema(table.schema().to_arrow())
    added = [f.with_nullable(True) for f in changes.schema if f.name not in current.names]
    if added:
        table.alter.add_columns([DeltaField.from_arrow(f) for f in added])
        table = delta_log.latest(storage_options)
        current = pa.schema(table.schema().to_arrow())
    zeros = zero_date_columns(schema)
    result = merge_by_vectors(table, uri, delta_log, key_index, changes, key_columns=row_key_columns(schema),
                              nullable_keys=set(zeros) | set(zeros.values()),
                              shard_range=shard_bounds(shard) if shard else None, file_schema=current,
                              transactions=transactions)
    if checkpoint_due(table, result.version):
        DeltaTable(uri, storage_options=storage_options).create_checkpoint()
    return result


def with_vectors(table: DeltaTable, uri: str, storage_options: dict[str, str] | None) -> DeltaTable:
    """``table``, given the ``deletionVectors`` reader and writer feature first, in a commit of its own
    (loaded again then), when it lacks it."""
    if "deletionVectors" in (table.protocol().writer_features or ()):
        return table
    table.alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    return DeltaTable(uri, storage_options=storage_options)


def commit_range_by_log(table: DeltaTable, uri: str, delta_log: DeltaLog, start: str | None, end: str | None,
                        files: Sequence[DataFile], *, file_schema: pa.Schema) -> None:
    """``DeltaSink.commit_range`` on a table with deletion vectors: the files that held the range
    leave with their vectors' descriptors, and the rows a file partly in the range keeps outside it
    are its live rows (its vector applied). Lands beside other writers' commits that did not touch
    the files it removes (``DeltaLog.commit``); done at once when ``files`` are in the table already."""
    held = delta_log.files(table)
    ours = {f.path for f in files}
    if ours and ours <= {live.relative_path for live in held.values()}:
        return
    now = int(time.time() * 1000)
    actions = [add_json(f) for f in files]
    removed = set()
    for live in held.values():
        placement = file_placement(live.chunk_bounds, start, end)
        if live.relative_path in ours or placement == "outside":
            continue
        if placement == "partial":
            kept = rows_outside(read_live(uri, live), start, end)
            if kept.num_rows:
                actions.append(add_json(write_data_file(uri, kept, file_schema, prefix="rewritten")))
        actions.append(live.removal(now))
        removed.add(live.path)
    delta_log.commit(table.version(), actions, operation="WRITE", parameters={"range": f"[{start}, {end})"},
                     rebase_over=removed)


def read_live(uri: str, live: LiveFile, columns: Sequence[str] | None = None) -> pa.Table:
    """The rows of a data file the table holds (of ``columns`` that the file has), without those its
    deletion vector deletes."""
    rows = live.read(uri, columns)
    if live.vector is None:
        return rows
    return rows.filter(pa.array(kept_mask(read_vector(uri, live.vector), rows.num_rows)))


def merge_by_vectors(table: DeltaTable, uri: str, delta_log: DeltaLog, key_index: KeyIndex, changes: pa.Table, *,
                     key_columns: Sequence[str], nullable_keys: set[str], shard_range: tuple[str | None, str | None] | None,
                     file_schema: pa.Schema, transactions: Sequence[tuple[str, int]]) -> MergeResult:
    """Merge ``changes`` (the last change per key, with their change columns) into ``table`` (as
    loaded, at the folder ``uri``) in one commit carrying ``transactions`` (app id, version), finding
    the rows it replaces through ``key_index`` and telling it what the commit did. Raises
    ``ConcurrentCommit`` when another writer committed first, after deleting what it wrote."""
    files = delta_log.files(table)
    key_index.retain(uri, files)
    candidates = holding(files.values(), lambda live: live.chunk_bounds, changes.column(CHUNK_COLUMN))
    matches = key_index.locate(uri, [_Indexed(uri, live) for live in candidates], changes, key_columns, nullable_keys,
                               shard_range)
    decision = decide(changes, matches)
    images = _images(uri, files, changes, decision, file_schema)

    now = int(time.time() * 1000)
    vectors: dict[str, BitMap64] = {}
    actions: list[dict] = []
    survivors: list[pa.Table] = []
    rewritten = 0
    for path, positions in decision.deleted.items():
        live = files[path]
        old = key_index.deleted(uri, _Indexed(uri, live))
        now_deleted = old | BitMap64(positions)
        physical = live.rows if live.rows is not None else live.read(uri, [VERSION_COLUMN]).num_rows
        if rewrites(physical, len(old), len(now_deleted)):
            rows = live.read(uri)
            kept = rows.filter(pa.array(kept_mask(now_deleted, rows.num_rows)))
            if kept.num_rows:
                survivors.append(conform_to(kept, file_schema)[0])
            actions.append(live.removal(now))
            rewritten += 1
        else:
            vectors[path] = now_deleted
    written: list[str] = []
    descriptors: dict[str, DeletionVector] = {}
    data_file: DataFile | None = None
    try:
        new_rows = pa.concat_tables([images, *survivors]) if survivors else images
        if new_rows.num_rows:
            new_rows = new_rows.take(pc.sort_indices(new_rows, sort_keys=[(CHUNK_COLUMN, "ascending")]))
            data_file = write_data_file(uri, new_rows, file_schema, prefix="merged")
            written.append(data_file.path)
            actions.append(add_json(data_file))
        if vectors:
            vector_file, descriptors = write_vectors(uri, vectors)
            written.append(vector_file)
            for path, descriptor in descriptors.items():
                actions += [files[path].removal(now), files[path].with_vector(descriptor, now)]
        actions += [{"txn": {"appId": app_id, "version": version, "lastUpdated": now}}
                    for app_id, version in transactions]
        deleted_rows = sum(len(v) - files[p].deleted for p, v in vectors.items())
        metrics = {"num_source_rows": changes.num_rows, "num_target_files_scanned": len(candidates),
                   "num_target_files_added": 1 if new_rows.num_rows else 0, "num_target_files_removed": rewritten,
                   "num_target_files_with_deletion_vectors": len(vectors),
                   "num_target_rows_deleted_by_vectors": deleted_rows, "num_output_rows": new_rows.num_rows}
        version = delta_log.commit(table.version(), actions, operation="MERGE",
                                   parameters={"mode": "merge-on-read"}, info={"operationMetrics": metrics})
    except ConcurrentCommit:  # nothing of it is in the table
        for path in written:
            delete_data_file(uri, path)
        raise
    except BaseException:
        log.warning("merge into %s failed before its commit was known to land; its files stay until vacuum", uri)
        raise
    key_index.committed(uri, added=None if data_file is None else (data_file.path, new_rows),
                        deletes={p: (d.unique_id, vectors[p]) for p, d in descriptors.items()},
                        removed=[a["remove"]["path"] for a in actions if "remove" in a and a["remove"]["path"] not in vectors],
                        key_columns=key_columns, nullable_keys=nullable_keys)
    return MergeResult(version, deleted_rows, len(vectors), rewritten, new_rows.num_rows, len(candidates))


@dataclass(frozen=True)
class _Indexed:
    """A data file of the table at ``uri`` as the key index reads it (sinks/key_index.py): its deletes
    are its deletion vector, named by the vector's identity."""

    uri: str
    live: LiveFile

    @property
    def path(self) -> str:
        return self.live.path

    @property
    def deletes_id(self) -> str | None:
        vector = self.live.vector
        return None if vector is None else vector.unique_id

    def read_columns(self, columns: Sequence[str]) -> pa.Table:
        return self.live.read(self.uri, columns)

    def read_deleted(self) -> BitMap64:
        vector = self.live.vector
        return BitMap64() if vector is None else read_vector(self.uri, vector)


def _images(uri: str, files: dict[str, LiveFile], changes: pa.Table, decision: Decision,
            file_schema: pa.Schema) -> pa.Table:
    """The batch's new row images as rows of the table: the table's columns the changes lack carry,
    in an update of a row the table held, that row's value (``carried_columns``)."""
    images = changes.take(pa.array(decision.image_rows, pa.int64()))
    absent = [f.with_nullable(True) for f in file_schema if f.name not in images.column_names]
    if absent and images.num_rows:
        carried = carried_columns(changes, decision, absent, lambda path, positions: files[path].read(
            uri, [f.name for f in absent]).take(pa.array(positions, pa.int64())))
        for field in absent:
            images = images.append_column(field, carried[field.name])
    return conform_to(images, file_schema)[0]
