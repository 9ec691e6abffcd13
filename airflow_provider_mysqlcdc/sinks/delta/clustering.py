"""Keep a Delta table's data files clustered by the chunk key, so that a merge reads few of them.

What clustering is and how a run is planned and rewritten: sinks/clustering.py, whatever the format.
This is its Delta side: the files a table's log holds, and the commit of a run.

The rewrite changes no row: its commit adds and removes files with ``dataChange = false``, as Delta's
OPTIMIZE does, so a streaming reader of the table sees nothing new. A file's rows are its live rows,
so rewriting a file folds its deletion vector in (and a file whose vector deletes much of it is
rewritten for that alone). The commit is written into the log (sinks/delta/log.py) with the removed
files' vector descriptors; it lands beside other writers' commits that did not touch its files, and
when another writer removed or re-vectored one of them meanwhile (a merge, a chunk commit), it fails,
the new files are deleted, and the caller plans again.
"""

from __future__ import annotations

import logging
import time

import pyarrow as pa
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.errors import ConcurrentCommit
from airflow_provider_mysqlcdc.sinks.clustering import (
    FOLD_SHARE,
    MAX_REWRITE_BYTES,
    TARGET_BYTES,
    ClusteringResult,
    FileRows,
    HeldFile,
    bounded,
    candidate_groups,
    rewrite_in_key_order,
)
from airflow_provider_mysqlcdc.sinks.data_files import DataFile, delete_data_file
from airflow_provider_mysqlcdc.sinks.delta.data_files import add_json
from airflow_provider_mysqlcdc.sinks.delta.log import DeltaLog, LiveFile, unkept_features
from airflow_provider_mysqlcdc.sinks.delta.merge_on_read import read_live

log = logging.getLogger(__name__)

#: the key of a clustering commit's metadata in the table's history (what it did)
CLUSTERING_COMMIT = "mysqlcdc.clustering"


def held_files(table: DeltaTable, uri: str) -> list[HeldFile]:
    """The data files of ``table`` (at the folder ``uri``) with their chunk ranges and the rows their
    deletion vectors delete, from its log. A file without statistics of ``_cdc_chunk`` (written
    before the table kept them) is left out: reading it to place it would cost every check, and
    leaving it where it is only costs the merges that read it."""
    return [held for held, _ in _held(table, DeltaLog(uri))]


def _held(table: DeltaTable, delta_log: DeltaLog) -> list[tuple[HeldFile, LiveFile]]:
    held = []
    for live in delta_log.files(table).values():
        low, high = live.chunk_bounds
        rows = live.rows
        if low is not None and high is not None and rows is not None:
            held.append((HeldFile(live.relative_path, int(live.action["size"]), rows - live.deleted, low, high,
                                  live.deleted), live))
    return held


#: tables whose overlapping groups too large to rewrite were logged already (once per table and count)
_WARNED: set[tuple[str, int]] = set()


def cluster_table(table: DeltaTable, uri: str, *, min_files: int = 2, target_bytes: int = TARGET_BYTES,
                  max_rewrite_bytes: int = MAX_REWRITE_BYTES, delta_log: DeltaLog | None = None,
                  fold_share: float = FOLD_SHARE, large_apart: bool = False) -> ClusteringResult | None:
    """One clustering run on ``table`` as loaded (its version is the one the commit is planned on),
    whose folder is ``uri`` (the sink's form: delta-rs's ``table_uri`` escapes characters a file system
    path keeps), its log as ``delta_log`` replayed it. None when fewer than ``min_files`` files need
    it (however many one run may take; a file whose deletion vector deletes ``fold_share`` of its rows
    needs it alone), when nothing fits a run, or when the table has a writer feature or column mapping
    its commit would not keep right (``unkept_features``). A file's rows are its live rows: rewriting it folds
    its vector in. Raises ``ConcurrentCommit`` when another writer removed one of its files meanwhile,
    after deleting the files it wrote; after any other failure of the commit itself they stay (it may
    have landed), invisible if it did not, until ``vacuum`` removes them."""
    unkept = unkept_features(table)
    if unkept:  # its commit would not keep the table right, or its files' rows are not the table's rows
        log.info("%s has %s: not clustered", table.table_uri, unkept)
        return None
    delta_log = delta_log or DeltaLog(uri)
    held = _held(table, delta_log)
    live_of = {h.path: live for h, live in held}
    groups, runs = candidate_groups([h for h, _ in held], target_bytes=target_bytes, fold_share=fold_share,
                                    large_apart=large_apart)
    folds = any(len(group) == 1 for group in groups)
    if sum(len(group) for group in groups + runs) < max(min_files, 2) and not folds:
        return None
    file_schema = pa.schema(table.schema().to_arrow())
    rows = FileRows(uri, file_schema, read=lambda h: read_live(uri, live_of[h.path]))
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
    removed = [live_of[f.path] for group in plan for f in group]
    actions = [add_json(f, data_change=False) for f in written] + [f.removal(now, data_change=False) for f in removed]
    result = ClusteringResult(len(removed), len(written), sum(f.rows for group in plan for f in group), left,
                              sum(1 for group in plan if len(group) == 1))
    try:
        delta_log.commit(table.version(), actions, operation="OPTIMIZE", info={CLUSTERING_COMMIT: str(result)},
                         rebase_over={f.path for f in removed})
    except ConcurrentCommit:  # refused: nothing of it is in the table
        _delete(uri, written)
        raise
    return result


def _delete(uri: str, files: list[DataFile]) -> None:
    for data_file in files:
        delete_data_file(uri, data_file.path)
