"""Iceberg table maintenance: clustering, snapshot expiry and orphan files (sinks/iceberg.py).

- **Clustering** (the stream's, between batches, and compaction): the same plan as for Delta
  (sinks/clustering.py), from the data files' ``_cdc_chunk`` bounds in the manifests. Each planned
  group's key range holds no other file's rows (a group is all the files whose ranges overlap, or a
  run of small neighbours), so one transaction deletes the groups' ranges, which drops their files
  whole, and appends each group's rows sorted by ``_cdc_chunk``: files with ranges apart again.
  A concurrent commit fails it, and it plans again, a few times at most.
- **Snapshot expiry** (the retention of ``vacuum_retention_s``): snapshots older than it leave the
  table's metadata (the current one always stays); time travel within the retention keeps working.
- **Orphan files**: data files under the table's ``data/`` folder that no remaining snapshot
  references (expired snapshots', failed or rewritten writes') are deleted once older than the
  retention, and never younger than ``ORPHAN_MIN_AGE_S``: a file a writer wrote for a commit it has
  not made yet is referenced by nothing, and must stay.

The table's old metadata files are pruned by Iceberg itself on each commit
(``write.metadata.delete-after-commit.enabled``, set when the sink creates a table). A changelog
table is append-only and its files are not compacted yet.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import time
from typing import TYPE_CHECKING

import fsspec
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import And, BooleanExpression, GreaterThanOrEqual, LessThanOrEqual, Or

from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy, TableMaintenance
from airflow_provider_mysqlcdc.sinks.clustering import (
    MAX_REWRITE_BYTES,
    TARGET_BYTES,
    ClusteringResult,
    HeldFile,
    clustering_plan,
)
from airflow_provider_mysqlcdc.sinks.data_files import CHUNK_COLUMN

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

#: an unreferenced data file younger than this is never deleted, whatever the retention: a writer may
#: be about to commit it
ORPHAN_MIN_AGE_S = 600.0
#: the key of a snapshot summary naming what the sink did (sinks/iceberg.py)
OPERATION_SUMMARY = "mysqlcdc.operation"


def data_file_count(table: Table) -> int:
    return table.inspect.data_files().num_rows


def held_files(table: Table) -> list[HeldFile]:
    """The table's data files with their ``_cdc_chunk`` bounds (a file without them is left out)."""
    files = table.inspect.data_files()
    if not files.num_rows:
        return []
    metrics = files.column("readable_metrics").to_pylist()
    held = []
    for path, size, rows, metric in zip(files.column("file_path").to_pylist(),
                                        files.column("file_size_in_bytes").to_pylist(),
                                        files.column("record_count").to_pylist(), metrics):
        chunk = (metric or {}).get(CHUNK_COLUMN) or {}
        low, high = chunk.get("lower_bound"), chunk.get("upper_bound")
        if low is not None and high is not None:
            held.append(HeldFile(path, int(size), int(rows), low, high))
    return held


def cluster_table(table: Table, *, min_files: int = 2, target_bytes: int = TARGET_BYTES,
                  max_rewrite_bytes: int = MAX_REWRITE_BYTES) -> ClusteringResult | None:
    """One clustering run on ``table`` as loaded; None when fewer than ``min_files`` files need it.
    Raises pyiceberg's CommitFailedException when another writer committed meanwhile (nothing of
    this run stays: pyiceberg deletes the files of a failed commit)."""
    plan, left = clustering_plan(held_files(table), target_bytes=target_bytes, max_rewrite_bytes=max_rewrite_bytes)
    planned = sum(len(group) for group in plan)
    if planned < max(2, min_files):
        return None
    ranges = [_range_of(group) for group in plan]
    groups = [table.scan(row_filter=r).to_arrow().sort_by(CHUNK_COLUMN) for r in ranges]
    before = data_file_count(table)
    with table.transaction() as tx:
        tx.delete(functools.reduce(Or, ranges))
        for rows in groups:
            tx.append(rows, snapshot_properties={OPERATION_SUMMARY: "cluster"})
    written = data_file_count(table.refresh()) - (before - planned)
    result = ClusteringResult(planned, written, sum(g.num_rows for g in groups), left)
    log.info("clustered %s: %s", table.name(), result)
    return result


def _range_of(group: list[HeldFile]) -> BooleanExpression:
    return And(GreaterThanOrEqual(CHUNK_COLUMN, min(f.low for f in group)),
               LessThanOrEqual(CHUNK_COLUMN, max(f.high for f in group)))


def maintain_table(table: Table, policy: MaintenancePolicy, *, compact) -> TableMaintenance:
    """Maintain one table (a mirror, or its changelog) as ``policy`` says: ``compact()`` (files
    rewritten, what was left), then with a retention, snapshot expiry and orphan files."""
    before = data_file_count(table)
    rewritten, note = compact() if policy.compact else (0, "")
    deleted = 0
    if policy.vacuum_retention_s is not None:
        deleted = expire_and_delete_orphans(table.refresh(), policy.vacuum_retention_s)
    return TableMaintenance(table.location(), before, data_file_count(table.refresh()), rewritten, deleted, None, note)


def expire_and_delete_orphans(table: Table, retention_s: float) -> int:
    """Expire the snapshots older than ``retention_s`` (the current one stays), then delete the data
    files no remaining snapshot references that are older than the retention (and than
    ``ORPHAN_MIN_AGE_S``); how many files were deleted."""
    cutoff = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=retention_s)
    current = table.current_snapshot()
    old = [s.snapshot_id for s in table.snapshots()
           if current is not None and s.snapshot_id != current.snapshot_id and s.timestamp_ms < cutoff.timestamp() * 1000]
    if old:
        try:
            table.maintenance.expire_snapshots().by_ids(old).commit()
        except (CommitFailedException, ValidationException) as exc:  # the next run expires them
            log.info("expiring snapshots of %s gave way to a concurrent commit (%s)", table.name(), exc)
            return 0
        table = table.refresh()
    referenced = set(table.inspect.all_data_files().column("file_path").to_pylist()) if table.snapshots() else set()
    fs, root = fsspec.core.url_to_fs(table.location())
    folder = f"{root.rstrip('/')}/data"
    if not fs.exists(folder):
        return 0
    oldest = time.time() - max(retention_s, ORPHAN_MIN_AGE_S)
    deleted = 0
    for path, info in fs.find(folder, detail=True).items():
        if _as_location(table.location(), root, path) in referenced or path in referenced:
            continue
        if _modified(info) < oldest:
            fs.rm_file(path)
            deleted += 1
    return deleted


def _as_location(location: str, root: str, path: str) -> str:
    """``path`` (as the file system lists it) as the table names its files (its location's form)."""
    return location.rstrip("/") + path[len(root.rstrip("/")):]


def _modified(info: dict) -> float:
    """A listed file's modification time in seconds (local files: ``mtime``; object stores: ``LastModified``)."""
    value = info.get("mtime", info.get("LastModified", info.get("last_modified", 0)))
    return value.timestamp() if isinstance(value, dt.datetime) else float(value)
