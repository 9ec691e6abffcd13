"""Delta table maintenance: compaction, checkpoints and vacuum of a sink table and its changelog.

- **Compaction.** A mirror table is compacted by clustering (sinks/clustering.py): its small and
  overlapping files are rewritten in chunk-key order, which is what Z-ordering by the chunk key
  would give, but incremental, and it keeps every file's ``_cdc_chunk`` range narrow, which a
  merge prunes by. delta-rs's ``optimize.compact`` would bin-pack files of unrelated key ranges
  into one and make every later merge read it. A changelog table is append-only and never merged
  into: ``optimize.compact`` bin-packs its small files.
- **Checkpoints.** A Delta checkpoint of the current version, then the log files older than the
  table's ``delta.logRetentionDuration`` (30 days by default) are dropped.
- **Vacuum.** The retention the user sets becomes the table's ``delta.deletedFileRetentionDuration``
  (so every engine's vacuum keeps it too), then vacuum deletes the data files that left the table
  longer ago than that, and the files no commit ever named (a chunk or a merge killed between
  writing its files and its commit) once older than the retention and ``ORPHAN_MIN_AGE_S`` (three
  days, as Iceberg's orphan removal waits): the files a chunk's executors have written and its
  driver is about to commit are far younger.
  The files deleted are found in the table's log here (``DeltaLog.unreferenced``), not by delta-rs's
  vacuum: a data file re-added under a new deletion vector has several removals in the log, and
  delta-rs deletes it once any of them expired, while a version within the retention still reads
  it; and delta-rs never deletes a deletion vector file. The retention is set by a commit of the
  table's metadata (delta-rs's ``set_table_properties`` would add the reader feature
  ``variantType`` to a table with deletion vectors).

Every commit here may meet a concurrent one (the stream's merge, a chunk's commit): compaction's
commit then fails, deletes what it wrote and plans again, a few times at most
(``DeltaSink.cluster``), and leaves the rest for the next run; the other writer's commit is unaffected
or retries by itself, bounded and logged (``retry_conflicts``). Vacuum only ever deletes files no
version within the retention needs: a reader of such a version (time travel, a merge that started
before a compaction's commit) is safe as long as it is younger than the retention.
"""

from __future__ import annotations

import logging
import math
import time

from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy, TableMaintenance
from airflow_provider_mysqlcdc.sinks.changelog import CHANGELOG_SUFFIX
from airflow_provider_mysqlcdc.sinks.clustering import Compaction, compact_by_clustering
from airflow_provider_mysqlcdc.sinks.data_files import ORPHAN_MIN_AGE_S, delete_data_file, orphans
from airflow_provider_mysqlcdc.sinks.delta.log import DeltaLog
from airflow_provider_mysqlcdc.sinks.delta.sink import DeltaSink, retry_conflicts

log = logging.getLogger(__name__)

#: the Delta setting vacuum reads its retention from
RETENTION = "delta.deletedFileRetentionDuration"
#: a compaction or vacuum that keeps meeting concurrent commits gives way after this many tries
_ATTEMPTS = 5


def maintain_table(sink: DeltaSink, table_id: TableId, policy: MaintenancePolicy) -> list[TableMaintenance]:
    """Maintain the table's Delta table and, when there is one, its changelog; what was done to each."""
    done = []
    mirror = sink.table_uri(table_id)
    changelog = mirror + CHANGELOG_SUFFIX
    for uri, compact in ((mirror, lambda: compact_by_clustering(sink, table_id, policy)),
                         (changelog, lambda: _bin_pack(sink, changelog, policy))):
        table = sink.open_table(uri)
        if table is not None:
            done.append(_maintain(sink, uri, len(table.file_uris()), policy, compact=compact))
    for report in done:
        log.info("maintenance of %s", report)
    return done


def _maintain(sink: DeltaSink, uri: str, before: int, policy: MaintenancePolicy, *, compact) -> TableMaintenance:
    """``before``: the table's data files when it was opened."""
    compaction = compact() if policy.compact else Compaction()
    checkpoint = None
    if policy.checkpoint:
        table = _load(sink, uri)
        table.create_checkpoint()
        table.cleanup_metadata()
        checkpoint = table.version()
    vacuumed = 0 if policy.vacuum_retention_s is None else _vacuum(sink, uri, policy.vacuum_retention_s)
    return TableMaintenance(uri, before, len(_load(sink, uri).file_uris()), compaction.rewritten, vacuumed, checkpoint,
                            compaction.note, compaction.folded)


def _load(sink: DeltaSink, uri: str) -> DeltaTable:
    return DeltaTable(uri, storage_options=sink.storage_options)


def _bin_pack(sink: DeltaSink, uri: str, policy: MaintenancePolicy) -> Compaction:
    metrics = retry_conflicts(lambda: _load(sink, uri).optimize.compact(target_size=policy.target_file_bytes),
                              f"compact {uri}", attempts=_ATTEMPTS)
    return Compaction(int(metrics["numFilesRemoved"]))


def _vacuum(sink: DeltaSink, uri: str, retention_s: float) -> int:
    """Make ``retention_s`` the table's retention (whole seconds, rounded up), then delete the data and
    deletion vector files no version within it names (``DeltaLog.unreferenced``), and the files no
    commit ever named once older than the retention and ``ORPHAN_MIN_AGE_S`` (a merge killed between
    writing its files and its commit; never a file a writer is about to commit), between the two
    commits Delta's vacuum logs (``VACUUM START``, ``VACUUM END``); files deleted."""
    setting = f"interval {math.ceil(retention_s)} seconds"
    delta_log = sink.delta_log(uri)
    if _load(sink, uri).metadata().configuration.get(RETENTION) != setting:
        retry_conflicts(lambda: delta_log.set_properties(_load(sink, uri), {RETENTION: setting}),
                        f"set the vacuum retention of {uri}", attempts=_ATTEMPTS)
    table = _load(sink, uri)
    retention_ms = math.ceil(retention_s) * 1000
    data, vectors = delta_log.unreferenced(table, int(time.time() * 1000) - retention_ms)
    never = orphans(uri, delta_log.named(table), older_than_s=max(retention_s, ORPHAN_MIN_AGE_S), skip="_delta_log")
    _log_vacuum(delta_log, sink, uri, "VACUUM START", {"retentionCheckEnabled": True,
                                                     "specifiedRetentionMillis": retention_ms,
                                                     "defaultRetentionMillis": retention_ms})
    deleted = data + vectors + never
    for path in deleted:
        delete_data_file(uri, path)
    _log_vacuum(delta_log, sink, uri, "VACUUM END", {"status": "COMPLETED"},
                {"numDeletedFiles": len(deleted), "numVacuumedDirectories": 1})
    return len(deleted)


def _log_vacuum(delta_log: DeltaLog, sink: DeltaSink, uri: str, operation: str, parameters: dict,
                metrics: dict | None = None) -> None:
    """A commit of Delta's vacuum history: its commitInfo only."""
    retry_conflicts(lambda: delta_log.commit(_load(sink, uri).version(), [], operation=operation, parameters=parameters,
                                             info={"operationMetrics": metrics} if metrics else None,
                                             rebase_over=()),
                    f"log {operation} of {uri}", attempts=_ATTEMPTS)
