"""Keep a Delta table's data files clustered by the chunk key, so that a merge reads few of them.

What clustering is and how a run is planned and rewritten: sinks/clustering.py, whatever the format.
This is its Delta side: the files a table's log holds, and the commit of a run.

The rewrite changes no row: its commit adds and removes files with ``dataChange = false``, as Delta's
OPTIMIZE does, so a streaming reader of the table sees nothing new. Its snapshot is the one it planned
from: when another writer removed one of its files meanwhile (a merge that rewrote it, a chunk
commit), the commit fails, the new files are deleted, and the caller plans again.
"""

from __future__ import annotations

import logging
import time

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction

from airflow_provider_mysqlcdc.sinks.clustering import (
    MAX_REWRITE_BYTES,
    TARGET_BYTES,
    ClusteringResult,
    FileRows,
    HeldFile,
    bounded,
    candidate_groups,
    rewrite_in_key_order,
)
from airflow_provider_mysqlcdc.sinks.data_files import DataFile, chunk_bounds, delete_data_file
from airflow_provider_mysqlcdc.sinks.delta.data_files import add_action

log = logging.getLogger(__name__)

#: the key of a clustering commit's metadata in the table's history (what it did)
CLUSTERING_COMMIT = "mysqlcdc.clustering"


def held_files(table: DeltaTable) -> list[HeldFile]:
    """The table's data files with their chunk ranges. A file without statistics of ``_cdc_chunk``
    (written before the table kept them) is left out: reading it to place it would cost every check,
    and leaving it where it is only costs the merges that read it."""
    held = []
    for action in pa.table(table.get_add_actions(flatten=True)).to_pylist():
        low, high = chunk_bounds(action)
        if low is not None and high is not None:
            held.append(HeldFile(action["path"], int(action["size_bytes"]), int(action["num_records"]), low, high))
    return held



#: tables whose overlapping groups too large to rewrite were logged already (once per table and count)
_WARNED: set[tuple[str, int]] = set()
#: table features under which a data file's Parquet rows are not the table's rows
_UNSUPPORTED_FEATURES = {"deletionVectors", "columnMapping"}


def cluster_table(table: DeltaTable, uri: str, *, min_files: int = 2, target_bytes: int = TARGET_BYTES,
                  max_rewrite_bytes: int = MAX_REWRITE_BYTES) -> ClusteringResult | None:
    """One clustering run on ``table`` as loaded (its version is the one the commit checks against),
    whose folder is ``uri`` (the sink's form: delta-rs's ``table_uri`` escapes characters a file system
    path keeps). None when fewer than ``min_files`` files need it (however many one run may take),
    when nothing fits a run, or when the table uses deletion vectors or column mapping (its files'
    rows are not its rows). Raises delta-rs's CommitFailedError
    when another writer removed one of its files meanwhile, after deleting the files it wrote; after
    any other failure of the commit itself they stay (it may have landed), invisible if it did not,
    until ``vacuum`` removes them."""
    protocol = table.protocol()
    features = set(protocol.reader_features or ()) | set(protocol.writer_features or ())
    if features & _UNSUPPORTED_FEATURES:
        log.info("%s uses %s: not clustered", table.table_uri, ", ".join(sorted(features & _UNSUPPORTED_FEATURES)))
        return None
    groups, runs = candidate_groups(held_files(table), target_bytes=target_bytes)
    if sum(len(group) for group in groups + runs) < max(min_files, 2):
        return None
    file_schema = pa.schema(table.schema().to_arrow())
    rows = FileRows(uri, file_schema)
    plan, left = bounded(groups, runs, max_rewrite_bytes=max_rewrite_bytes, memory_of=rows.memory_of)
    rows.keep_only(plan)
    if left and (uri, left) not in _WARNED:
        _WARNED.add((uri, left))
        log.warning("%s: %d group(s) of overlapping files exceed %d MiB and are left unclustered (their merges "
                    "read them all)", table.table_uri, left, max_rewrite_bytes >> 20)
    if not plan:
        return None
    written: list[DataFile] = []
    try:
        for group in plan:
            written += rewrite_in_key_order(uri, group, file_schema, target_bytes=target_bytes, read=rows)
    except BaseException:
        _delete(uri, written)
        raise
    now = int(time.time() * 1000)
    removed = [f for group in plan for f in group]
    actions: list[AddAction | RemoveAction] = [add_action(f, data_change=False) for f in written]
    actions += [RemoveAction(f.path, False, now, f.size, {}) for f in removed]
    result = ClusteringResult(len(removed), len(written), sum(f.rows for f in removed), left)
    try:
        table.create_write_transaction(actions, "append", file_schema, commit_properties=CommitProperties(
            custom_metadata={CLUSTERING_COMMIT: str(result)}))
    except CommitFailedError:  # refused: nothing of it is in the table
        _delete(uri, written)
        raise
    return result


def _delete(uri: str, files: list[DataFile]) -> None:
    for data_file in files:
        delete_data_file(uri, data_file.path)


