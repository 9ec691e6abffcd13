"""Iceberg table maintenance: clustering, snapshot expiry and orphan files (sinks/iceberg/sink.py).

- **Clustering** (the stream's, between batches, and compaction): the same plan as for Delta
  (sinks/clustering.py), from the data files' ``_cdc_chunk`` bounds in the manifests, bounded by the
  rows a run holds in memory. The planned files are read one by one (their live rows: delete files
  applied), each group's rows are written as new files sorted by ``_cdc_chunk``, and one snapshot
  (``RowDelta``, sinks/iceberg/row_deltas.py) removes exactly the planned files and the delete files
  scoped to them and adds the new ones: clustering folds delete files in, a file whose delete files
  delete much of it (``FOLD_SHARE``) is rewritten for that alone, and no other file is touched (the
  large files a merge-on-read table's packed small files overlap stay as they are).
  A concurrent commit fails it, its files are deleted, and it plans again, a few times at most.
- **Snapshot expiry** (the retention of ``vacuum_retention_s``): snapshots that stopped being the
  current one longer ago than it leave the table's metadata (the current one always stays); time
  travel to any snapshot current within the retention keeps working.
- **Files**: the data files and delete files only the expired snapshots referenced go with them. Files under the
  table's ``data/`` folder that no snapshot ever referenced (a failed write's) are deleted once older
  than the retention and ``ORPHAN_MIN_AGE_S`` (three days): a file a writer wrote for a commit it has
  not made yet is referenced by nothing either, and must stay.

- **A changelog's files** (append-only, one file or more per stream batch) are bin-packed, whole
  files at a time: runs of neighbouring small files in binlog order (their ``version`` bounds) are
  read file by file and written again as one file per run, sorted by ``version``; one snapshot
  removes exactly those files and adds the new ones. A file is never read by a row filter, so a row
  is neither lost nor written twice, whatever the files' ``version`` ranges share. pyiceberg commits
  no ``replace`` snapshot, so the snapshot is an ``overwrite`` whose summary adds as many rows as it
  deletes and names the operation (``mysqlcdc.operation=compact``): readers that follow a table's
  appends (Spark's and Flink's incremental reads) pass over it, and Spark's streaming read stops at
  it unless told to skip overwrites (``streaming-skip-overwrite-snapshots``); none reads its rows
  again as new ones.

The table's old metadata files are pruned by Iceberg itself on each commit
(``write.metadata.delete-after-commit.enabled``, set when the sink creates a table).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pyiceberg.conversions import from_bytes
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, parquet_file_to_data_file
from pyiceberg.table import FileScanTask
from pyiceberg.types import StringType

from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy, TableMaintenance
from airflow_provider_mysqlcdc.sinks.arrow_rows import CHUNK_COLUMN
from airflow_provider_mysqlcdc.sinks.base import retry_conflicts
from airflow_provider_mysqlcdc.sinks.clustering import (
    FOLD_SHARE,
    MAX_REWRITE_BYTES,
    TARGET_BYTES,
    ClusteringResult,
    Compaction,
    FileRows,
    HeldFile,
    bounded,
    candidate_groups,
    rewrite_in_key_order,
)
from airflow_provider_mysqlcdc.sinks.data_files import ORPHAN_MIN_AGE_S, orphans, write_data_file
from airflow_provider_mysqlcdc.sinks.iceberg.catalog import busy_as_conflict
from airflow_provider_mysqlcdc.sinks.iceberg.row_deltas import MetadataOnce, RowDelta, referenced_path
from airflow_provider_mysqlcdc.sinks.iceberg.schema import file_schema_of

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

#: the key of a snapshot summary naming what the sink did (sinks/iceberg/sink.py)
OPERATION_SUMMARY = "mysqlcdc.operation"
#: a rewrite of files that changes no row (clustering, a changelog's compaction) plans again after
#: this many concurrent commits at most, then gives way until the next run
REWRITE_ATTEMPTS = 5
#: a changelog's column in binlog order (sinks/changelog.py), by which its files are bin-packed
CHANGELOG_ORDER = "version"
#: what makes a commit fail without landing: a concurrent commit to the table, or a catalog held by
#: another writer for longer than it waits (an embedded SQLite catalog's lock: ``busy_as_conflict``)
CONFLICTS: tuple[type[BaseException], ...] = (CommitFailedException, ValidationException)


def data_file_count(table: Table) -> int:
    return table.inspect.data_files().num_rows


def scan_tasks(table: Table) -> dict[str, FileScanTask]:
    """The current snapshot's data files by path, each with the delete files that may apply to it
    (every manifest read: callers that keep them between commits use the key index's copy)."""
    return {task.file.file_path: task for task in table.scan().plan_files()}


def chunk_bounds(task: FileScanTask, field_id: int) -> tuple[str | None, str | None]:
    """A data file's bounds of ``_cdc_chunk`` (its field id) from its manifest entry (None: unknown)."""
    low = (task.file.lower_bounds or {}).get(field_id)
    high = (task.file.upper_bounds or {}).get(field_id)
    if low is None or high is None:
        return None, None
    return from_bytes(StringType(), low), from_bytes(StringType(), high)


def scoped_deletes(task: FileScanTask) -> list[DataFile]:
    """The delete files of ``task`` scoped to its data file alone (sinks/iceberg/row_deltas.py)."""
    return [f for f in task.delete_files if referenced_path(f) == task.file.file_path]


def held_files(table: Table, tasks: Mapping[str, FileScanTask] | None = None) -> list[HeldFile]:
    """The table's data files (``tasks``: as the scan gives them, read afresh when None) with their
    ``_cdc_chunk`` bounds (a file without them is left out), and the rows of each that the delete
    files scoped to it delete (sinks/iceberg/row_deltas.py)."""
    field = next((f for f in table.schema().fields if f.name == CHUNK_COLUMN), None)
    if field is None:  # no bounds to plan by
        return []
    held = []
    for path, task in (scan_tasks(table) if tasks is None else tasks).items():
        low, high = chunk_bounds(task, field.field_id)
        rows = task.file.record_count
        deleted = min(rows, sum(f.record_count for f in scoped_deletes(task)))
        if low is not None and high is not None:
            held.append(HeldFile(path, task.file.file_size_in_bytes, rows - deleted, low, high, deleted))
    return held


def cluster_table(table: Table, *, tasks: Mapping[str, FileScanTask] | None = None, min_files: int = 2,
                  target_bytes: int = TARGET_BYTES, max_rewrite_bytes: int = MAX_REWRITE_BYTES,
                  fold_share: float = FOLD_SHARE, large_apart: bool = False) -> ClusteringResult | None:
    """One clustering run on ``table`` as loaded; None when fewer than ``min_files`` files need it (a
    file whose delete files delete ``fold_share`` of its rows needs it alone: rewriting its live rows
    folds them in), or when nothing fits a run. A run holds at most ``max_rewrite_bytes`` of rows in
    memory (as Arrow: Parquet's bytes say little of it), reads the planned files one by one (their
    delete files applied) and writes each group's rows as new files before its one commit, which
    removes exactly the planned files and the delete files scoped to them. ``tasks``: the table's files
    as the scan gives them, when the caller holds them (read afresh when None). Raises pyiceberg's
    CommitFailedException when another writer committed meanwhile, after deleting the files it wrote."""
    tasks = scan_tasks(table) if tasks is None else tasks
    held = held_files(table, tasks)
    groups, runs = candidate_groups(held, target_bytes=target_bytes, fold_share=fold_share, large_apart=large_apart)
    folds = any(len(group) == 1 for group in groups)
    if sum(len(group) for group in groups + runs) < max(min_files, 2) and not folds:
        return None
    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    folder = table.location().rstrip("/") + "/data"
    file_schema = file_schema_of(table)
    rows = FileRows(folder, file_schema, read=lambda h: scan.to_table([tasks[h.path]]))
    plan, left = bounded(groups, runs, max_rewrite_bytes=max_rewrite_bytes, memory_of=rows.memory_of)
    rows.keep_only(plan)
    if not plan:
        return None
    written: list[str] = []
    try:
        for group in plan:
            written += [f"{folder}/{f.path}" for f in rewrite_in_key_order(folder, group, file_schema,
                                                                            target_bytes=target_bytes, read=rows)]
        removed = {f.path for group in plan for f in group}
        with busy_as_conflict(), MetadataOnce(table) as tx:
            RowDelta(tx, table.io, data_files=[parquet_file_to_data_file(table.io, table.metadata, path)
                                               for path in written],
                     removed_data=removed,
                     removed_deletes={f.file_path for path in removed for f in scoped_deletes(tasks[path])},
                     summary={OPERATION_SUMMARY: "cluster"}).commit()
    except CONFLICTS:  # nothing of it is in the table
        for path in written:
            with contextlib.suppress(FileNotFoundError):
                table.io.delete(path)
        raise
    result = ClusteringResult(len(removed), len(written), sum(f.rows for group in plan for f in group), left,
                              sum(1 for group in plan if len(group) == 1))
    log.info("clustered %s: %s", table.name(), result)
    return result


def compact_changelog(table: Table, *, target_bytes: int = TARGET_BYTES,
                      max_rewrite_bytes: int = MAX_REWRITE_BYTES) -> Compaction:
    """Bin-pack a changelog table (module doc): files removed, and what was left for the next run.
    Planned again from a fresh load after a concurrent commit, a few times, then left for the next run."""
    try:
        removed, left = retry_conflicts(lambda: _bin_pack(table.refresh(), target_bytes, max_rewrite_bytes),
                                        f"compact {table.name()}", conflicts=CONFLICTS, attempts=REWRITE_ATTEMPTS)
        return Compaction(removed, left)
    except CONFLICTS:
        return Compaction(0, "gave way to concurrent commits: left for the next run")


def _bin_pack(table: Table, target_bytes: int, max_rewrite_bytes: int) -> tuple[int, str]:
    runs, left = changelog_runs(_version_bounds(table), target_bytes=target_bytes, max_rewrite_bytes=max_rewrite_bytes)
    if not runs:
        return 0, left
    tasks = {task.file.file_path: task for task in table.scan().plan_files()}
    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    file_schema = file_schema_of(table)
    folder = table.location().rstrip("/") + "/data"
    written = []
    try:
        for run in runs:
            rows = scan.to_table([tasks[path] for path in run]).sort_by([(CHANGELOG_ORDER, "ascending")])
            written.append(f"{folder}/{write_data_file(folder, rows, file_schema, prefix='compact').path}")
        with busy_as_conflict(), table.transaction() as tx:
            with tx.update_snapshot(snapshot_properties={OPERATION_SUMMARY: "compact"}).overwrite() as rewrite:
                for path in (path for run in runs for path in run):
                    rewrite.delete_data_file(tasks[path].file)
                for path in written:
                    rewrite.append_data_file(parquet_file_to_data_file(table.io, table.metadata, path))
    except CONFLICTS:
        for path in written:  # no commit references them
            with contextlib.suppress(FileNotFoundError):
                table.io.delete(path)
        raise
    removed = sum(len(run) for run in runs)
    log.info("compacted changelog %s: %d files into %d", table.name(), removed, len(runs))
    return removed, left


def changelog_runs(files: list[tuple[int, int, int, str]], *, target_bytes: int,
                   max_rewrite_bytes: int) -> tuple[list[list[str]], str]:
    """The runs to bin-pack among ``files`` (each one's lowest and highest ``version``, its size and
    path): neighbours in binlog order each at most half ``target_bytes``, together at most
    ``target_bytes``, two files or more, at most ``max_rewrite_bytes`` in all; each run as its files'
    paths, and a note when some were left for the next run."""
    runs: list[list[str]] = []
    current: list[tuple[int, str]] = []
    rewritten = 0

    def close() -> None:
        if len(current) >= 2:
            runs.append([path for _, path in current])
        current.clear()

    for _, _, size, path in sorted(files):
        small = size * 2 <= target_bytes
        if small and rewritten + size > max_rewrite_bytes:
            close()
            return runs, "more small files are left for the next run"
        if not small or sum(held for held, _ in current) + size > target_bytes:
            close()
        if small:
            current.append((size, path))
            rewritten += size
    close()
    return runs, ""


def _version_bounds(table: Table) -> list[tuple[int, int, int, str]]:
    """The changelog's data files: each one's lowest and highest ``version``, its size and path."""
    files = table.inspect.data_files()
    bounds = []
    for path, size, metric in zip(files.column("file_path").to_pylist(), files.column("file_size_in_bytes").to_pylist(),
                                  files.column("readable_metrics").to_pylist()):
        version = (metric or {}).get(CHANGELOG_ORDER) or {}
        if version.get("lower_bound") is not None and version.get("upper_bound") is not None:
            bounds.append((int(version["lower_bound"]), int(version["upper_bound"]), int(size), path))
    return bounds


def maintain_table(table: Table, policy: MaintenancePolicy, *, compact) -> TableMaintenance:
    """Maintain one table (a mirror, or its changelog) as ``policy`` says: ``compact()`` (files
    rewritten, what was left), then with a retention, snapshot expiry and orphan files."""
    before = data_file_count(table)
    compaction = compact() if policy.compact else Compaction()
    deleted = 0
    if policy.vacuum_retention_s is not None:
        deleted = expire_and_delete_orphans(table.refresh(), policy.vacuum_retention_s)
    return TableMaintenance(table.location(), before, data_file_count(table.refresh()), compaction.rewritten, deleted,
                            None, compaction.note, compaction.folded)


def expire_and_delete_orphans(table: Table, retention_s: float) -> int:
    """Expire the snapshots that stopped being the table's current one longer than ``retention_s``
    ago (a reader of a snapshot it was current in, within the retention, finds its files), delete
    the data files, manifests and manifest lists only they referenced, then the files under ``data/``
    no snapshot ever referenced once older than the retention and ``ORPHAN_MIN_AGE_S`` (a failed
    write's; never one a writer is about to commit); how many files were deleted."""
    current = table.current_snapshot()
    old = [] if current is None else expirable(
        [(e.snapshot_id, e.timestamp_ms) for e in table.metadata.snapshot_log],
        [(s.snapshot_id, s.timestamp_ms) for s in table.snapshots()], current.snapshot_id,
        (time.time() - retention_s) * 1000)
    before, manifests_before = _data_file_paths(table), _manifests_by_snapshot(table)
    if old:
        try:
            with busy_as_conflict():
                table.maintenance.expire_snapshots().by_ids(old).commit()
        except CONFLICTS as exc:  # the next run expires them
            log.info("expiring snapshots of %s gave way to a concurrent commit (%s)", table.name(), exc)
            return 0
        table = table.refresh()
    referenced = _data_file_paths(table)
    # files of the expired snapshots alone: their data files, manifests and manifest lists
    manifests_after = _manifests_by_snapshot(table, manifests_before)
    released = (before - referenced) | (set().union(*manifests_before.values()) - set().union(*manifests_after.values()))
    for path in released:  # through the table's own file IO: the catalog's storage credentials
        with contextlib.suppress(FileNotFoundError):  # deleted by an earlier run that stopped short
            table.io.delete(path)
    data = table.location().rstrip("/") + "/data"
    prefix = _plain(data) + "/"
    named = {path[len(prefix):] for path in before | referenced if path.startswith(prefix)}
    unnamed = orphans(data, named, older_than_s=max(retention_s, ORPHAN_MIN_AGE_S))
    for path in unnamed:
        table.io.delete(f"{data}/{path}")
    return len(released) + len(unnamed)


def expirable(snapshot_log: list[tuple[int, int]], snapshots: list[tuple[int, int]], current: int,
              cutoff_ms: float) -> list[int]:
    """The snapshots (id, created ms) to expire: every one but ``current`` that stopped being current
    before ``cutoff_ms``, which is when the next one in ``snapshot_log`` (id, became current ms)
    became current; a snapshot never current (a transaction's first of two) by its own time."""
    replaced_at = {entry[0]: after[1] for entry, after in zip(snapshot_log, snapshot_log[1:])}
    return [snapshot for snapshot, created in snapshots
            if snapshot != current and replaced_at.get(snapshot, created) < cutoff_ms]


def _data_file_paths(table: Table) -> set[str]:
    """The data files and delete files any snapshot of the table references, as plain paths
    (``_plain``): a delete file lives in the ``data`` folder too, and one taken for an orphan would
    bring its deleted rows back."""
    if not table.snapshots():
        return set()
    return {_plain(p) for p in table.inspect.all_files().column("file_path").to_pylist()}


def _manifests_by_snapshot(table: Table, known: dict[int, set[str]] | None = None) -> dict[int, set[str]]:
    """Each snapshot's manifest list and the manifests it holds, as plain paths; a snapshot in
    ``known`` (an earlier call's) is not read again: a snapshot's manifests never change."""
    known = known or {}
    return {snapshot.snapshot_id: known.get(snapshot.snapshot_id) or {
        _plain(snapshot.manifest_list), *(_plain(m.manifest_path) for m in snapshot.manifests(table.io))}
        for snapshot in table.snapshots()}


def _plain(path: str) -> str:
    """A local file's path without a ``file://`` scheme (the table may name it either way)."""
    return path[len("file://"):] if path.startswith("file://") else path
