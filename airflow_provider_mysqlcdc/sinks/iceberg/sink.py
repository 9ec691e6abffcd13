"""The Apache Iceberg sink: one Iceberg table per source table, written with pyiceberg (Arrow in, no
JVM, no Spark jars), named in a catalog (sinks/iceberg/catalog.py).

Every write is one Iceberg transaction, one catalog commit: the rows it replaces are deleted (data
files inside the replaced rows dropped, a file partly inside rewritten from its live rows) and its
rows appended. A stream commit records its position (sinks/base.py) in the same commit twice: in
the table's properties (``mysqlcdc.position``, per shard in a routed table), where
``applied_position`` reads it back whatever snapshots expired since, and in the summary of the
commit's snapshot, for anyone reading the table's history.

A commit is made on the snapshot its rows were computed from, or not at all: pyiceberg's own retry,
which rebases a commit onto a newer snapshot, is off for our tables (``commit.retry.num-retries``
0), so a merge never lands beside a concurrent commit to the rows it read. On a conflict the whole
operation runs again from a fresh load (``retry_conflicts``), as Delta's writes do.

A merge touches only the files whose ``_cdc_chunk`` bounds (manifest statistics, kept in full) hold
a changed key, a change applying where it is newer than the row (``_cdc_version``): by ``merge_mode``
it names the rows it replaces in position-delete files and appends their new images (merge-on-read,
the default: sinks/iceberg/merge_on_read.py) or rewrites those files (copy-on-write). A write that
drops a data file drops the delete files naming it in the same commit.

A chunk's partitions are written as data files by the Spark executors into the table's ``data`` folder
and committed by the chunk job's driver with ``add_files`` (``commit_range``). Clustering and maintenance:
sinks/iceberg/maintenance.py (pyiceberg has no ``replace`` snapshot: a clustering shows as an overwrite).
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.expressions import AlwaysTrue, BooleanExpression

from airflow_provider_mysqlcdc.cdc.errors import SchemaChangedError
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.protocol.maintenance import DEFAULT_FOLD_SHARE, DEFAULT_TARGET_FILE_BYTES
from airflow_provider_mysqlcdc.protocol.sinks import DEFAULT_NAMESPACE, MERGE_MODES, check_table_merge_modes
from airflow_provider_mysqlcdc.sinks.arrow_rows import CHUNK_COLUMN, arrow_schema, row_key_columns
from airflow_provider_mysqlcdc.sinks.base import (
    Position,
    Sink,
    StreamCommit,
    refuse_reserved_names,
    refuse_shard_schema,
    retry_conflicts,
)
from airflow_provider_mysqlcdc.sinks.changelog import CHANGELOG_SUFFIX
from airflow_provider_mysqlcdc.sinks.clustering import compact_by_clustering
from airflow_provider_mysqlcdc.sinks.iceberg.catalog import (
    busy_as_conflict,
    catalog_places_tables,
    catalog_properties,
    open_catalog,
    table_identifier,
)
from airflow_provider_mysqlcdc.sinks.iceberg.commits import commit_rows, landed, recorded
from airflow_provider_mysqlcdc.sinks.iceberg.maintenance import (
    CONFLICTS,
    OPERATION_SUMMARY,
    REWRITE_ATTEMPTS,
    cluster_table,
    compact_changelog,
    maintain_table,
)
from airflow_provider_mysqlcdc.sinks.iceberg.merge_on_read import merge_batch, table_files, with_position_deletes
from airflow_provider_mysqlcdc.sinks.iceberg.row_deltas import drop_dangling_deletes
from airflow_provider_mysqlcdc.sinks.iceberg.rows import chunk_filter, merged, older_than, range_filter
from airflow_provider_mysqlcdc.sinks.iceberg.schema import (
    arrow_schema_of,
    as_table_rows,
    evolution,
    file_schema_of,
    holds,
    promotable,
)
from airflow_provider_mysqlcdc.sinks.key_index import KeyIndex
from airflow_provider_mysqlcdc.sinks.routing import sink_target

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy, TableMaintenance
    from airflow_provider_mysqlcdc.sinks.clustering import ClusteringResult
    from airflow_provider_mysqlcdc.sinks.data_files import DataFile

log = logging.getLogger(__name__)

_MAX_ATTEMPTS = 50
#: Iceberg's table property naming each column's field id for files written without ids
NAME_MAPPING = "schema.name-mapping.default"
#: the properties of every table the sink creates
TABLE_PROPERTIES = {
    # a commit is made on the snapshot it read, or fails and is redone from a fresh load (module doc)
    "commit.retry.num-retries": "0",
    # old metadata files go as new ones are written (metadata.json of each commit)
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
    # exact bounds of _cdc_chunk in the manifests (by default strings are truncated to 16 characters),
    # so a range's files and a merge's files are found by their statistics alone
    f"write.metadata.metrics.column.{CHUNK_COLUMN}": "full",
}


#: how a batch of changes reaches a table's files (``IcebergSink.merge_mode``)
MERGE_ON_READ, COPY_ON_WRITE = MERGE_MODES
DEFAULT_MERGE_MODE = MERGE_ON_READ


class IcebergSink(Sink):
    def __init__(self, root: str, storage_options: dict[str, str] | None = None, *,
                 catalog_properties: dict[str, str] | None = None, namespace: str = DEFAULT_NAMESPACE,
                 merge_mode: str = DEFAULT_MERGE_MODE, table_merge_modes: tuple[tuple[str, str], ...] = ()):
        """:param merge_mode: ``merge-on-read``: a batch names the rows it replaces in position-delete
            files and appends their new images (sinks/iceberg/merge_on_read.py); ``copy-on-write``:
            it rewrites every data file holding a changed chunk key. ``table_merge_modes``: the sink
            tables (names or patterns) merged otherwise (``DeltaSink``'s)."""
        if merge_mode not in MERGE_MODES:
            raise ValueError(f"merge_mode {merge_mode!r} is not one of {', '.join(MERGE_MODES)}")
        self.merge_mode, self.table_merge_modes = merge_mode, check_table_merge_modes(table_merge_modes)
        self.root = root.rstrip("/")
        self.storage_options = storage_options
        self.namespace = namespace
        self._catalog_properties = catalog_properties

    @functools.cached_property
    def catalog(self) -> Catalog:
        return open_catalog(self.root, self._catalog_properties)

    @functools.cached_property
    def key_index(self) -> KeyIndex:
        """Where each key's row lives in the tables' files, kept between batches (sinks/key_index.py)."""
        return KeyIndex()

    def __getstate__(self) -> dict[str, object]:
        """Pickled (a stream's ``foreachBatch`` function travels to a Spark Connect server) without its
        opened catalog, which may hold a connection pool, or its key index: the copy makes its own."""
        return {k: v for k, v in self.__dict__.items() if k not in ("catalog", "key_index")}

    @functools.cached_property
    def catalog_places_tables(self) -> bool:
        """Whether new tables go where the catalog places them rather than under the lake's root."""
        return catalog_places_tables(catalog_properties(self.root, self._catalog_properties))

    def table_uri(self, table_id: TableId) -> str:
        return "/".join([self.root, *table_id.path_segments])

    def placed_location(self, table_id: TableId) -> str | None:
        """Where the catalog placed the table, when it places tables and holds this one."""
        table = self.open_table(table_id) if self.catalog_places_tables else None
        return None if table is None else table.location()

    def identifier(self, table_id: TableId, *, changelog: bool = False) -> tuple[str, str]:
        """The table's name in the catalog (``changelog``: its changelog's)."""
        return table_identifier(self.namespace, table_id, CHANGELOG_SUFFIX if changelog else "")

    def open_table(self, table_id: TableId, *, changelog: bool = False) -> Table | None:
        """The Iceberg table of ``table_id`` (or its changelog) as committed last, None when there is none."""
        try:
            return self.catalog.load_table(self.identifier(table_id, changelog=changelog))
        except NoSuchTableError:
            return None

    def _table(self, table_id: TableId) -> Table:
        table = self.open_table(table_id)
        if table is None:
            raise NoSuchTableError(f"{'.'.join(self.identifier(table_id))}: the sink table of {table_id} does not exist "
                                   "(prepare creates it)")
        return table

    def _create(self, table_id: TableId, schema: pa.Schema, *, changelog: bool = False) -> None:
        """Create the table (of ``schema``) with its name mapping, which data files added as they are
        (``commit_range``) are read by, in the creating commit: one set later by pyiceberg from a
        transaction's schema could miss a column added meanwhile. A table or namespace another writer
        created meanwhile is taken as it is. The table lives under the lake's root, or where the catalog
        places it (``catalog_places_tables``)."""
        namespace, _ = identifier = self.identifier(table_id, changelog=changelog)
        try:
            self.catalog.create_namespace_if_not_exists(namespace)
        except Exception:  # a concurrent creation: the SQL catalog checks, then inserts
            if not self.catalog.namespace_exists(namespace):
                raise
        location = None if self.catalog_places_tables else (
            self.table_uri(table_id) + (CHANGELOG_SUFFIX if changelog else ""))
        try:
            with busy_as_conflict():
                tx = self.catalog.create_table_transaction(identifier, schema=schema, location=location,
                                                           properties=TABLE_PROPERTIES)
                tx.set_properties({NAME_MAPPING: tx.table_metadata.schema().name_mapping.model_dump_json()})
                tx.commit_transaction()
        except (TableAlreadyExistsError, CommitFailedException):
            if self.open_table(table_id, changelog=changelog) is None:
                raise

    # --- schema ----------------------------------------------------------------------------------
    def prepare(self, schema: TableSchema) -> None:
        """Create the table, or evolve it: columns added, a column widened as Iceberg allows (int to
        long, float to double, a decimal's precision), a key column let hold NULL; any other change of a
        column's type is a ``SchemaChangedError`` (the stream freezes the table and re-snapshots it)."""
        refuse_reserved_names(schema)
        table_id = sink_target(schema).table_id
        target = arrow_schema(schema)
        table = self.open_table(table_id)
        if table is None:
            self._create(table_id, target)
            return
        current = arrow_schema_of(table)
        for field in target:
            if field.name in current.names and not holds(current.field(field.name).type, field.type):
                old = current.field(field.name).type
                if not promotable(old, field.type):
                    raise SchemaChangedError(
                        f"Column {field.name!r} of {schema.table_id} changed from {old} to {field.type} in the source; "
                        "an Iceberg table widens only int to long, float to double and a decimal's precision. "
                        "Re-snapshot the table (the stream does when it follows schema changes) to pick up the new type.")
        self._evolve(table_id, target)

    def _evolve(self, table_id: TableId, target: pa.Schema) -> None:
        """Give the table ``target``'s columns it lacks, its wider types and its NULLs, in a commit of
        their own when anything changes."""
        def evolve() -> None:
            table = self._table(table_id)
            changes = evolution(table, target)
            if changes:
                with busy_as_conflict(), table.update_schema() as update:
                    update.union_by_name(changes)

        retry_conflicts(evolve, f"evolve the columns of {table_id}", conflicts=CONFLICTS, attempts=_MAX_ATTEMPTS)

    def replace_schema(self, schema: TableSchema) -> None:
        """Empty the table and give it ``schema`` in one commit: each column whose type changed is
        dropped and added again (a new column to Iceberg), every row deleted."""
        refuse_reserved_names(schema)
        target = sink_target(schema)
        refuse_shard_schema(schema, target.table_id, target.shard)
        wanted = arrow_schema(schema)

        def replace() -> None:
            table = self._table(target.table_id)
            current = arrow_schema_of(table)
            changed = [f for f in wanted if f.name in current.names and not holds(current.field(f.name).type, f.type)]
            with busy_as_conflict(), table.transaction() as tx:
                tx.delete(AlwaysTrue())
                drop_dangling_deletes(tx, table.io, {OPERATION_SUMMARY: "replace-schema"})
                if changed:
                    with tx.update_schema() as update:
                        for field in changed:
                            update.delete_column(field.name)
                    with tx.update_schema() as update:
                        update.union_by_name(pa.schema([f.with_nullable(True) for f in changed]))

        retry_conflicts(replace, f"replace the columns of {target.table_id}", conflicts=CONFLICTS, attempts=_MAX_ATTEMPTS)
        self._evolve(target.table_id, wanted)

    # --- writes ----------------------------------------------------------------------------------
    def replace_range(self, table_id: TableId, start: str | None, end: str | None, rows: pa.Table, *,
                      commit: StreamCommit | None = None) -> None:
        self._replace("replace", table_id, range_filter(start, end), lambda table, _: rows, commit,
                      f"replace {table_id} [{start}, {end})", columns=rows.schema)

    def data_folder(self, table_id: TableId) -> str:
        """The ``data`` folder of the table's location as the catalog holds it (``table_uri`` for a table
        not created yet)."""
        table = self.open_table(table_id)
        return (self.table_uri(table_id) if table is None else table.location()).rstrip("/") + "/data"

    def file_schema(self, schema: TableSchema) -> pa.Schema | None:
        """The columns the executors' data files take for ``schema``'s rows: the table's, once it has
        every column of the source and the wider types Iceberg promotes to (in a commit of their own),
        without Iceberg's field ids (``add_files`` maps the files' columns by name); None while a
        column's type is one the table cannot hold (a change only ``replace_schema`` carries out)."""
        table_id = sink_target(schema).table_id
        table = self.open_table(table_id)
        if table is None:
            return None
        target = arrow_schema(schema)
        if evolution(table, target) is not None:
            self._evolve(table_id, target)
            table = self._table(table_id)
        current = arrow_schema_of(table)
        if any(f.name in current.names and not holds(current.field(f.name).type, f.type) for f in target):
            return None
        return file_schema_of(table)

    def commit_range(self, table_id: TableId, start: str | None, end: str | None, files: Sequence[DataFile], *,
                     file_schema: pa.Schema) -> None:
        """Replace the rows of the key range ``[start, end)`` by the executors' data ``files`` (in
        ``data_folder``) in one commit: the range's rows deleted (files inside it dropped, a file
        partly inside rewritten without them) and the files added as they are. Done at once when the
        files are in the table already (a commit that landed before its caller heard of it)."""
        folder = self.data_folder(table_id)
        paths = [f"{folder}/{f.path}" for f in files]

        def commit() -> None:
            table = self._table(table_id)
            if paths and set(paths) <= set(table.inspect.data_files().column("file_path").to_pylist()):
                return
            with busy_as_conflict(), table.transaction() as tx, warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Delete operation did not match any records")
                tx.delete(range_filter(start, end))
                drop_dangling_deletes(tx, table.io, {OPERATION_SUMMARY: "replace"})
                if paths:
                    tx.add_files(paths, snapshot_properties={OPERATION_SUMMARY: "replace"})

        retry_conflicts(commit, f"commit {len(files)} data files into {table_id} [{start}, {end})", conflicts=CONFLICTS,
                        attempts=_MAX_ATTEMPTS)

    def merge_changes(self, schema: TableSchema, changes: pa.Table, *, commit: StreamCommit) -> None:
        """Apply last-change-per-key rows (module doc) in one commit. The chunk keys carry the shard's
        tag in a routed table, so the rows read are the shard's own."""
        keys = row_key_columns(schema)
        if self.merge_mode_of(sink_target(schema).table_id) == MERGE_ON_READ:
            return self._merge_on_read(schema, changes, commit)
        chunks = sorted({c for c in changes.column(CHUNK_COLUMN).to_pylist() if c is not None})
        self._replace("merge", sink_target(schema).table_id, chunk_filter(chunks),
                      lambda table, existing: merged(as_table_rows(existing, table), as_table_rows(changes, table), keys,
                                                     [n for n in arrow_schema_of(table).names if n not in changes.column_names]),
                      commit, f"merge batch {commit.batch_id} into {schema.table_id}", read=True, columns=changes.schema)

    def _merge_on_read(self, schema: TableSchema, changes: pa.Table, commit: StreamCommit) -> None:
        """``merge_changes`` by position deletes (sinks/iceberg/merge_on_read.py), made again from a
        fresh load after a concurrent commit; a v1 table is upgraded to v2 first."""
        table_id = sink_target(schema).table_id

        def merge() -> None:
            table = self._table(table_id)
            if landed(table, commit):  # an attempt whose outcome was unknown did commit
                return
            if evolution(table, changes.schema):
                self._evolve(table_id, changes.schema)
                table = self._table(table_id)
            merge_batch(with_position_deletes(table), self.key_index, schema, changes, commit)

        retry_conflicts(merge, f"merge batch {commit.batch_id} into {schema.table_id}", conflicts=CONFLICTS,
                        attempts=_MAX_ATTEMPTS)

    def truncate_before(self, table_id: TableId, version: int, *, commit: StreamCommit) -> None:
        """Delete every row older than ``version`` (of the commit's shard in a routed table)."""
        self._replace("truncate", table_id, older_than(version, commit), lambda table, _: None, commit,
                      f"truncate {table_id} before version {version}")

    def fill_before(self, table_id: TableId, values: dict[str, pa.Scalar], version: int, *,
                    commit: StreamCommit) -> None:
        """Set each column of ``values`` in every row older than ``version``: those rows are read,
        given the values and written again, in one commit (after one adding the columns)."""
        def filled(table: Table, existing: pa.Table | None) -> pa.Table | None:
            assert existing is not None
            existing = as_table_rows(existing, table)
            for name, value in values.items():
                existing = existing.set_column(existing.schema.get_field_index(name), name,
                                               pa.array([value.as_py()] * existing.num_rows, value.type))
            return existing

        self._replace("fill", table_id, older_than(version, commit), filled, commit,
                      f"fill {', '.join(values)} of {table_id} before version {version}", read=True,
                      columns=pa.schema([pa.field(name, value.type) for name, value in values.items()]))

    def append_changelog(self, table_id: TableId, changes: pa.Table, *, commit: StreamCommit) -> None:
        """Append change rows to the table's changelog table (``<table>__changelog``)."""
        if self.open_table(table_id, changelog=True) is None:
            self._create(table_id, changes.schema, changelog=True)

        def append() -> None:
            table = self.open_table(table_id, changelog=True)
            assert table is not None
            if landed(table, commit):  # an attempt whose outcome was unknown did commit
                return
            with busy_as_conflict(), table.transaction() as tx:
                commit_rows(tx, table, changes, commit, "changelog")

        retry_conflicts(append, f"changelog batch {commit.batch_id} of {table_id}", conflicts=CONFLICTS,
                        attempts=_MAX_ATTEMPTS)

    def _replace(self, operation: str, table_id: TableId, rows_filter: BooleanExpression,
                 compute: Callable[[Table, pa.Table | None], pa.Table | None], commit: StreamCommit | None,
                 what: str, *, read: bool = False, columns: pa.Schema | None = None) -> None:
        """One commit replacing the rows ``rows_filter`` matches by ``compute(table, old rows)`` (the old
        rows read first when ``read``; None: deleted), carrying ``commit``'s position and ``operation``
        in its summary; the table given ``columns`` first (``_evolve``) where it lacks them."""
        def replace() -> None:
            table = self._table(table_id)
            if commit is not None and landed(table, commit):  # an attempt whose outcome was unknown did commit
                return
            if columns is not None and evolution(table, columns):
                self._evolve(table_id, columns)
                table = self._table(table_id)
            existing = table.scan(row_filter=rows_filter).to_arrow() if read else None
            rows = compute(table, existing)
            with busy_as_conflict(), table.transaction() as tx, warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Delete operation did not match any records")
                if existing is None or existing.num_rows:
                    tx.delete(rows_filter)
                commit_rows(tx, table, rows, commit, operation)

        retry_conflicts(replace, what, conflicts=CONFLICTS, attempts=_MAX_ATTEMPTS)

    # --- reads -----------------------------------------------------------------------------------
    def applied_position(self, table_id: TableId, *, changelog: bool = False, shard: str = "") -> Position | None:
        table = self.open_table(table_id, changelog=changelog)
        return None if table is None else recorded(table, shard)

    def column_names(self, table_id: TableId) -> list[str]:
        table = self.open_table(table_id)
        return [] if table is None else arrow_schema_of(table).names

    def read(self, table_id: TableId) -> pa.Table:
        return self._table(table_id).scan().to_arrow()

    def refuses(self, table_id: TableId, exc: BaseException) -> bool:
        """Besides the table's own faults: a value its column cannot hold (Arrow refusing the cast to
        the table's type: an integer out of range, a decimal beyond its precision, a NULL in a key
        column), which is this table's data and not the storage or the catalog failing."""
        return super().refuses(table_id, exc) or isinstance(exc, (pa.ArrowInvalid, pa.ArrowTypeError))

    # --- upkeep (sinks/iceberg/maintenance.py) --------------------------------------------------
    def cluster(self, table_id: TableId, *, min_files: int = 2, target_bytes: int = DEFAULT_TARGET_FILE_BYTES,
                fold_share: float = DEFAULT_FOLD_SHARE, large_apart: bool = False) -> ClusteringResult | None:
        """Rewrite the data files that spread the table's chunk key ranges in key order, in one commit that
        changes no row; planned from the files as this sink's last merge left them (read again if the
        table moved on), again after a concurrent commit, a few times, then left for the next run (None)."""
        def run() -> ClusteringResult | None:
            table = self._table(table_id)
            return cluster_table(table, tasks=table_files(table, self.key_index), min_files=min_files,
                                 target_bytes=target_bytes, fold_share=fold_share, large_apart=large_apart)

        try:
            return retry_conflicts(run, f"cluster {table_id}", conflicts=CONFLICTS, attempts=REWRITE_ATTEMPTS)
        except CONFLICTS as exc:
            log.warning("clustering %s gave way to %d concurrent commits and is left for its next run (%s)",
                        table_id, REWRITE_ATTEMPTS, exc)
            return None

    def maintain(self, table_id: TableId, policy: MaintenancePolicy) -> list[TableMaintenance]:
        """Cluster the table, then (with a retention) expire its old snapshots and delete its orphan
        files; its changelog's snapshots and orphans too."""
        done = []
        for changelog in (False, True):
            table = self.open_table(table_id, changelog=changelog)
            if table is not None:
                compact = (functools.partial(compact_changelog, table, target_bytes=policy.target_file_bytes)
                           if changelog else functools.partial(compact_by_clustering, self, table_id, policy))
                done.append(maintain_table(table, policy, compact=compact))
        for report in done:
            log.info("maintenance of %s", report)
        return done
