"""Keep a sink table's data files clustered by the chunk key, so that a merge reads few of them.

A merge reads and rewrites only the files whose ``_cdc_chunk`` range holds a changed key. That prunes
well while the files' ranges are narrow and apart, as the snapshot writes them. The stream's merges
spoil it over time: a merge's rewritten rows and its inserts land together, so one new file can span
the ranges of several old ones, and every batch adds a few small files. Clustering rewrites exactly
those files, in key order:

- files whose ranges overlap, transitively, form one group and are rewritten together, sorted by
  ``_cdc_chunk`` and cut into files of about ``target_bytes`` with ranges apart again;
- runs of small neighbours (each under ``target_bytes / 32``) are joined up to that size;
- every other file stays as it is, and a run rewrites at most ``max_rewrite_bytes`` (the rest waits
  for the next run), so a clustering run costs what the stream spoilt, never the whole table.

This module plans and rewrites, whatever the table format; committing the rewrite is the format's
(sinks/delta/clustering.py, sinks/iceberg/maintenance.py).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_mysqlcdc.protocol.maintenance import DEFAULT_FOLD_SHARE, DEFAULT_TARGET_FILE_BYTES
from airflow_provider_mysqlcdc.sinks.arrow_rows import CHUNK_COLUMN, conform_to
from airflow_provider_mysqlcdc.sinks.data_files import (
    DataFile,
    read_data_file,
    write_data_file,
)

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.cdc.model.schema import TableId
    from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy

log = logging.getLogger(__name__)

#: files of about this size come out of a clustering run (delta-rs's own default target is 100 MiB)
TARGET_BYTES = DEFAULT_TARGET_FILE_BYTES
#: a run never rewrites files whose rows take more than this in memory (Arrow), where they are sorted,
#: which holds about twice that at the peak; a larger group of overlapping files is left, and logged
MAX_REWRITE_BYTES = 128 << 20
#: clustering runs per table and maintenance run (each rewrites at most MAX_REWRITE_BYTES)
COMPACT_ROUNDS = 8
#: a file whose deletion vector deletes this share of its rows is rewritten without them (folded)
FOLD_SHARE = DEFAULT_FOLD_SHARE


@dataclass(frozen=True)
class HeldFile:
    """A data file the table holds, as far as clustering cares."""

    path: str
    size: int
    rows: int  # live rows (those a deletion vector deletes left out)
    low: str
    high: str  # the file's smallest and largest _cdc_chunk
    deleted: int = 0  # rows of the file a deletion vector deletes

    @property
    def deleted_share(self) -> float:
        return self.deleted / max(1, self.rows + self.deleted)


@dataclass(frozen=True)
class ClusteringResult:
    """What one clustering run did."""

    files_read: int
    files_written: int
    rows: int
    groups_left: int  # overlapping groups too large to rewrite at once
    files_folded: int = 0  # of files_read, those rewritten alone to drop their deleted rows

    def __str__(self) -> str:
        left = f", {self.groups_left} group(s) left as too large" if self.groups_left else ""
        folded = f", {self.files_folded} to drop deleted rows" if self.files_folded else ""
        return f"{self.files_read} file(s) rewritten as {self.files_written} ({self.rows:,} rows{folded}){left}"


@dataclass(frozen=True)
class Compaction:
    """What compacting one table did: files rewritten (of them, folded: rewritten alone to drop the
    rows merge-on-read deleted), and what was left for the next run."""

    rewritten: int = 0
    note: str = ""
    folded: int = 0


def candidate_groups(files: list[HeldFile], *, target_bytes: int = TARGET_BYTES, fold_share: float = FOLD_SHARE,
                     large_apart: bool = False) -> tuple[list[list[HeldFile]], list[list[HeldFile]]]:
    """The groups of files whose ranges overlap, and the runs of small neighbours, in key order: what
    clustering would rewrite, before any bound (nothing is read). A file is small under
    ``target_bytes / 32`` (4 MiB by default): the snapshot's files, one per partition, are larger and
    already apart. A file whose deletion vector deletes at least ``fold_share`` of its rows, and that
    is in no group or run, is a group of its own: rewriting it folds its vector in.

    ``large_apart`` (a merge-on-read table between two stream batches): files of the small size or
    more join no group, so that the small files each batch adds are packed together (in key order)
    without rewriting the large files they overlap (random keys overlap every file: each batch's
    file spans the table's key range), and a large file is rewritten only alone, to fold its
    deleted rows; the key order of the large files is left to maintenance."""
    small = target_bytes // 32

    def folds(held: HeldFile) -> bool:
        return bool(held.deleted) and held.deleted_share >= fold_share

    if large_apart:
        alone = [[f] for f in files if f.size >= small and folds(f)]
        return alone, _packed(sorted((f for f in files if f.size < small), key=lambda f: (f.low, f.high)),
                              target_bytes)
    overlapping: list[list[HeldFile]] = []
    reach = ""
    for held in sorted(files, key=lambda f: (f.low, f.high)):
        if overlapping and held.low <= reach:
            overlapping[-1].append(held)
            reach = max(reach, held.high)
        else:
            overlapping.append([held])
            reach = held.high
    groups: list[list[HeldFile]] = []
    runs: list[list[HeldFile]] = []
    neighbours: list[HeldFile] = []  # small files next to each other in key order, none overlapping
    for group in overlapping:
        if len(group) == 1 and group[0].size < small and not folds(group[0]):
            neighbours.append(group[0])
            continue
        runs += _packed(neighbours, target_bytes)
        neighbours = []
        if len(group) > 1 or folds(group[0]):
            groups.append(group)
    return groups, runs + _packed(neighbours, target_bytes)


def _packed(files: list[HeldFile], target_bytes: int) -> list[list[HeldFile]]:
    """``files`` in runs of two or more whose sizes add up to ``target_bytes`` at most."""
    runs: list[list[HeldFile]] = [[]]
    for held in files:
        if runs[-1] and sum(f.size for f in runs[-1]) + held.size > target_bytes:
            runs.append([])
        runs[-1].append(held)
    return [run for run in runs if len(run) > 1]


def clustering_plan(files: list[HeldFile], *, target_bytes: int = TARGET_BYTES,
                    max_rewrite_bytes: int = MAX_REWRITE_BYTES, fold_share: float = FOLD_SHARE, large_apart: bool = False,
                    memory_of: Callable[[HeldFile], int] = lambda held: held.size) -> tuple[list[list[HeldFile]], int]:
    """The groups of files one run rewrites, and the overlapping groups left: ``bounded`` over the
    ``candidate_groups`` of ``files``."""
    groups, runs = candidate_groups(files, target_bytes=target_bytes, fold_share=fold_share, large_apart=large_apart)
    return bounded(groups, runs, max_rewrite_bytes=max_rewrite_bytes, memory_of=memory_of)


def bounded(groups: list[list[HeldFile]], runs: list[list[HeldFile]], *, max_rewrite_bytes: int = MAX_REWRITE_BYTES,
            memory_of: Callable[[HeldFile], int] = lambda held: held.size) -> tuple[list[list[HeldFile]], int]:
    """The groups of files to rewrite together (each of two files or more) in one run, and how many
    overlapping groups are left because one alone needs more than ``max_rewrite_bytes`` of memory
    (``memory_of`` a file: its rows in memory, ``FileRows``; by default its size).

    Overlapping groups come first (they are what makes a merge read more files than its keys need),
    then runs of small neighbours (what each batch's inserts add), in key order, as long as the run's
    memory stays within ``max_rewrite_bytes`` (of a run of small files, as many as fit): the rest
    waits for the next run, so a run's cost is bounded however much the merges left."""
    plan: list[list[HeldFile]] = []
    budget, left = max_rewrite_bytes, 0
    for group in groups:  # whole, or not at all
        memory = 0
        if sum(f.size for f in group) <= max_rewrite_bytes:  # rows never take less than their Parquet
            for held in group:  # stops once the group cannot fit any run
                memory += memory_of(held)
                if memory > max_rewrite_bytes:
                    break
        if not memory or memory > max_rewrite_bytes:
            left += 1
        elif memory <= budget:
            plan.append(group)
            budget -= memory
    for run in runs:  # as many of its files as fit: joining neighbours is right for any prefix of them
        taken, memory = [], 0
        for held in run:
            size = memory_of(held)
            if memory + size > budget:
                break
            taken.append(held)
            memory += size
        if len(taken) > 1:
            plan.append(taken)
            budget -= memory
    return sorted(plan, key=lambda g: g[0].low), left


class FileRows:
    """Data files' rows, read once, conformed to the table's columns, with what they take in memory:
    the plan reads a file to know that, and the rewrite uses what the plan read."""

    def __init__(self, uri: str, file_schema: pa.Schema, read: Callable[[HeldFile], pa.Table] | None = None):
        """:param read: a file's rows (by default its Parquet rows: a format whose files hold rows a
            deletion vector deletes passes its own reader)."""
        self.uri, self.file_schema = uri, file_schema
        self._read_file = read or (lambda held: read_data_file(uri, held.path))
        self.read: dict[str, pa.Table] = {}

    def memory_of(self, held: HeldFile) -> int:
        return self.rows_of(held).nbytes

    def rows_of(self, held: HeldFile) -> pa.Table:
        if held.path not in self.read:
            self.read[held.path] = conform_to(self._read_file(held), self.file_schema)[0]
        return self.read[held.path]

    def keep_only(self, plan: list[list[HeldFile]]) -> None:
        planned = {held.path for group in plan for held in group}
        self.read = {path: rows for path, rows in self.read.items() if path in planned}

    def take(self, group: list[HeldFile]) -> pa.Table:
        """The group's rows, released from here (the caller holds them while it needs them)."""
        rows = pa.concat_tables([self.rows_of(held) for held in group])
        for held in group:
            self.read.pop(held.path, None)
        return rows


def rewrite_in_key_order(uri: str, group: list[HeldFile], file_schema: pa.Schema, *,
                         target_bytes: int = TARGET_BYTES, read: FileRows | None = None) -> list[DataFile]:
    """The rows of ``group``'s files, in the table folder ``uri``, as new data files there (not
    committed yet), sorted by ``_cdc_chunk`` and cut into files of about ``target_bytes``. A cut falls
    only where ``_cdc_chunk`` changes: rows of a composite key share their chunk key's value, and two
    files holding the same value would overlap, and be rewritten again and again. ``read``: the rows
    the plan read already."""
    rows = (read or FileRows(uri, file_schema)).take(group)
    rows = rows.take(pc.sort_indices(rows, sort_keys=[(CHUNK_COLUMN, "ascending")]))
    pieces = max(1, math.ceil(sum(f.size for f in group) / target_bytes))
    per_piece = max(1, math.ceil(rows.num_rows / pieces))
    chunks = rows.column(CHUNK_COLUMN)
    cuts = [0]
    for nominal in range(per_piece, rows.num_rows, per_piece):
        cut = max(nominal, cuts[-1] + 1)
        while cut < rows.num_rows and chunks[cut].as_py() == chunks[cut - 1].as_py():
            cut += 1
        if cut < rows.num_rows:
            cuts.append(cut)
    cuts.append(rows.num_rows)
    return [write_data_file(uri, rows.slice(start, end - start), file_schema, prefix="clustered")
            for start, end in zip(cuts, cuts[1:]) if end > start]


class Clusters(Protocol):
    """A sink, as far as compacting by clustering needs it (``Sink.cluster``)."""

    def cluster(self, table_id: TableId, *, min_files: int = 2, target_bytes: int = TARGET_BYTES,
                fold_share: float = FOLD_SHARE, large_apart: bool = False) -> ClusteringResult | None: ...


def compact_by_clustering(sink: Clusters, table_id: TableId, policy: MaintenancePolicy) -> Compaction:
    """Cluster a mirror table (of any format) until nothing is left to rewrite (or ``COMPACT_ROUNDS``
    runs), folding files whose deleted share reaches the policy's ``fold_share``."""
    rewritten = folded = 0
    for _ in range(COMPACT_ROUNDS):
        result = sink.cluster(table_id, min_files=2, target_bytes=policy.target_file_bytes, fold_share=policy.fold_share)
        if result is None:
            return Compaction(rewritten, "", folded)
        rewritten, folded = rewritten + result.files_read, folded + result.files_folded
    return Compaction(rewritten, f"more to compact after {COMPACT_ROUNDS} clustering runs: the next run goes on", folded)
