"""The sink interface: what the chunk job and the stream job need from a lakehouse table format.

Rows arrive as Arrow tables built by ``arrow_rows.with_metadata`` (source columns plus the metadata
columns). A sink must make these operations atomic:

- ``replace_range``: replace every row whose ``_cdc_chunk`` lies in ``[start, end)`` by the given
  rows in one commit (a split, read again, replaces itself exactly);
- ``merge_changes``: apply one batch of last-change-per-key rows (``_cdc_op`` 'd' deletes) in one commit;
- ``truncate_before``: delete the rows older than a TRUNCATE in one commit;
- ``fill_before``: give the rows older than an ``ADD COLUMN ... DEFAULT`` that default, in one commit.

Every commit the stream makes carries a ``StreamCommit``: the binlog position of the last change it
holds, recorded *in the same commit* as its data, and ``applied_position`` reads it back. The
stream applies to a table only what comes after that position, so replaying a batch, restarting
from a checkpoint that was deleted, replaced by an older copy, or started afresh, never applies a
change twice and never skips one (sinks/writer.py): idempotence belongs to the sink's own state,
not to the numbering of a checkpoint's batches.

A sink table may hold several source tables, its shards (sinks/routing.py): ``table_id`` names the
sink table, the ranges given are the shard's, and a ``StreamCommit`` names its shard, whose position
is kept apart from the others'.

Two formats implement it: Delta Lake (sinks/delta/sink.py, the default) and Apache Iceberg
(sinks/iceberg/sink.py). Each format is a ``SinkFormat`` in its own package, named in the factory's
registry (sinks/factory.py); callers open a sink with ``factory.open_sink`` from the pipeline's
``SinkSpec`` and use only the methods below.
"""

from __future__ import annotations

import logging
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa

from airflow_provider_mysqlcdc.cdc.errors import SchemaChangedError, is_table_fault
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.protocol.maintenance import DEFAULT_FOLD_SHARE, DEFAULT_TARGET_FILE_BYTES
from airflow_provider_mysqlcdc.protocol.sinks import merge_mode_for

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy, TableMaintenance
    from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
    from airflow_provider_mysqlcdc.sinks.clustering import ClusteringResult
    from airflow_provider_mysqlcdc.sinks.data_files import DataFile

log = logging.getLogger(__name__)

T = TypeVar("T")

#: a point in binlog order at row granularity: (binlog file number, position, row, part), as
#: ``ChangeRecord.order_key``; a DDL is (file, position, 0, 0), the k-th staged split applied at the
#: start S of a micro-batch (S.file, S.position, -1, k)
Position = tuple[int, int, int, int]


@dataclass(frozen=True)
class StreamCommit:
    """What a stream records with the data of one commit: who wrote it (``app_id``, the stream
    checkpoint's identity, and ``batch_id``) and the position of the last change it holds, the
    position of ``shard`` when the table is routed (sinks/routing.py: then the commit acts on that
    shard's rows only)."""

    app_id: str
    batch_id: int
    position: Position
    shard: str = ""


class SinkFormat(ABC):
    """A table format as the rest of the package knows it without opening a sink: its name in the
    factory's registry, how to open its sink, and how its tables and types are named to readers
    (OpenLineage). Importing a format's module must not import another format's library."""

    name: str
    #: the merge modes its sinks take (protocol/sinks.py ``MERGE_MODES``)
    merge_modes: tuple[str, ...] = ("copy-on-write",)

    @abstractmethod
    def open(self, spec: SinkSpec, storage_options: dict[str, str] | None = None, *,
             catalog_properties: dict[str, str] | None = None) -> Sink:
        """The sink of ``spec``; ``catalog_properties``: a catalog's, where the format has one (None: those
        installed in this process, state/credentials.py)."""

    @abstractmethod
    def column_types(self, schema: pa.Schema) -> list[tuple[str, str]]:
        """Each column of a sink table of ``schema`` (Arrow) with the format's name of its type."""

    def catalog_name(self, spec: SinkSpec, table_id: TableId) -> str | None:
        """The name a catalog knows the sink table ``table_id`` by (``namespace.table``); None for a
        format whose tables are known by their location only."""
        return None


class Sink(ABC):
    #: where the tables live (a local path or an object store URL), and the object store's options
    root: str
    storage_options: dict[str, str] | None
    #: whether merges into different tables of this sink may run at once, each in a thread of the
    #: stream's driver (sinks/writer.py ``merge_outcomes``): only where a merge runs outside Python's
    #: lock and the sink holds no client shared between its tables' merges
    concurrent_tables: bool = False
    #: how a stream batch reaches a table's files (protocol/sinks.py ``MERGE_MODES``), and the tables
    #: (names or patterns of sink tables) merged otherwise
    merge_mode: str = "copy-on-write"
    table_merge_modes: tuple[tuple[str, str], ...] = ()

    def merge_mode_of(self, table_id: TableId) -> str:
        """The merge mode of the sink table ``table_id``."""
        return merge_mode_for(table_id, self.table_merge_modes, self.merge_mode)

    @abstractmethod
    def table_uri(self, table_id: TableId) -> str:
        """Where the table of ``table_id`` lives (its data files are written under it)."""

    def placed_location(self, table_id: TableId) -> str | None:
        """Where a catalog placed the table instead of ``table_uri`` (None: it lives at ``table_uri``)."""
        return None

    def data_folder(self, table_id: TableId) -> str:
        """Where data files the executors write for ``table_id`` go (``commit_range`` takes their paths
        relative to it)."""
        return self.table_uri(table_id)

    @abstractmethod
    def column_names(self, table_id: TableId) -> list[str]:
        """The table's column names (metadata columns included); none for a table not written yet."""

    @abstractmethod
    def prepare(self, schema: TableSchema) -> None:
        """Create the table for ``schema`` if missing; evolve it when columns were added."""

    @abstractmethod
    def replace_range(self, table_id: TableId, start: str | None, end: str | None, rows: pa.Table, *,
                      commit: StreamCommit | None = None) -> None:
        """Atomically replace the rows with ``start <= _cdc_chunk < end`` (None = open) by ``rows``."""

    @abstractmethod
    def file_schema(self, schema: TableSchema) -> pa.Schema | None:
        """The columns of data files the executors write for ``schema``'s rows (``commit_range``), or
        None when they cannot be written apart from the table (a column's type differs)."""

    @abstractmethod
    def commit_range(self, table_id: TableId, start: str | None, end: str | None, files: Sequence[DataFile], *,
                     file_schema: pa.Schema) -> None:
        """Replace the rows of the key range ``[start, end)`` by data ``files`` already written
        under ``data_folder`` (sinks/data_files.py), in one commit."""

    @abstractmethod
    def merge_changes(self, schema: TableSchema, changes: pa.Table, *, commit: StreamCommit) -> None:
        """Apply last-change-per-key rows in one commit (matching the rows of ``commit.shard`` only)."""

    @abstractmethod
    def truncate_before(self, table_id: TableId, version: int, *, commit: StreamCommit) -> None:
        """Remove every row with ``_cdc_version < version`` (the source table was truncated at that
        offset; rows a split read after it stay), of ``commit.shard`` only in a routed table."""

    @abstractmethod
    def replace_schema(self, schema: TableSchema) -> None:
        """Empty the table and give it ``schema`` (column types it cannot evolve) in one commit; a
        ``SchemaChangedError`` for a routed table, whose other shards' rows it would remove."""

    @abstractmethod
    def fill_before(self, table_id: TableId, values: dict[str, pa.Scalar], version: int, *,
                    commit: StreamCommit) -> None:
        """Set each column of ``values`` to its value in every row with ``_cdc_version < version``
        (columns an ALTER at that offset added, with the DEFAULT the source gave existing rows), of
        ``commit.shard`` only in a routed table."""

    @abstractmethod
    def append_changelog(self, table_id: TableId, changes: pa.Table, *, commit: StreamCommit) -> None:
        """Append rows of ``changelog.CHANGELOG_SCHEMA`` to the table's changelog (optional feature)."""

    @abstractmethod
    def applied_position(self, table_id: TableId, *, changelog: bool = False, shard: str = "") -> Position | None:
        """The position of the last change a stream committed to the table (or its changelog), if
        any; in a routed table, to the rows of ``shard``."""

    @abstractmethod
    def read(self, table_id: TableId) -> pa.Table:
        """The whole table (for verification and status)."""

    @abstractmethod
    def cluster(self, table_id: TableId, *, min_files: int = 2, target_bytes: int = DEFAULT_TARGET_FILE_BYTES,
                fold_share: float = DEFAULT_FOLD_SHARE, large_apart: bool = False) -> ClusteringResult | None:
        """Rewrite, in chunk-key order, the data files that spread the table's key ranges, into files of
        about ``target_bytes``, in one commit that changes no row, once ``min_files`` need it (a file
        whose rows merge-on-read deleted ``fold_share`` of needs it alone; ``large_apart``: large
        files only that way, small ones packed together); None when there was nothing to do
        (sinks/clustering.py ``candidate_groups``)."""

    @abstractmethod
    def maintain(self, table_id: TableId, policy: MaintenancePolicy) -> list[TableMaintenance]:
        """Maintain the table and its changelog as ``policy`` says (compaction, checkpoint, expiry
        of old files); what was done to each."""

    def refuses(self, table_id: TableId, exc: BaseException) -> bool:
        """Whether ``exc``, raised while writing the table, is the sink refusing this table's data or
        schema (a type, a constraint) rather than its storage or the pipeline failing: then the stream
        freezes this table and goes on with the others."""
        return is_table_fault(exc)


def retry_conflicts(operation: Callable[[], T], what: str, *, conflicts: tuple[type[BaseException], ...],
                    attempts: int) -> T:
    """Run ``operation`` (which loads the table afresh) again when a concurrent commit made its own
    fail (one of ``conflicts``: a failed commit wrote nothing), up to ``attempts`` times, each retry
    logged; the last failure is raised."""
    for attempt in range(1, attempts + 1):
        try:
            return operation()
        except conflicts as exc:
            if attempt == attempts:
                raise
            delay = min(2.0, 0.05 * attempt) * (0.5 + random.random())
            log.info("%s: concurrent commit (%s), retrying in %.2fs", what, exc, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def refuse_reserved_names(schema: TableSchema) -> None:
    """A source column named like a change column (an ALTER gave it the name after preflight) would
    clash with it: the stream freezes the table on this error."""
    reserved = schema.reserved_name_problem()
    if reserved:
        raise SchemaChangedError(reserved)


def refuse_shard_schema(schema: TableSchema, sink_table: TableId, shard: str) -> None:
    """``replace_schema`` of a shard (``shard`` not empty) would empty its routed table of the other
    shards' rows."""
    if shard:
        raise SchemaChangedError(
            f"{schema.table_id} is a shard of {sink_table}, whose columns it cannot change alone: only a "
            "new sink table takes the new types (route the shards into a new table).")
