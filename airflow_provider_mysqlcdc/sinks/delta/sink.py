"""The default sink: one Delta Lake table per source table, through delta-rs (``deltalake``).

Embedded, no JVM jars, no server; the root is a local path or an object-store URI. Tables live at
``<root>/<database>/<table>``. Concurrent chunk writers conflict on unpartitioned tables, so every
commit that failed on a conflict is retried (a failed commit wrote nothing).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import pyarrow as pa
from deltalake import DeltaTable, TableFeatures, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, SchemaMismatchError, TableNotFoundError
from deltalake.schema import Field as DeltaField
from deltalake.transaction import AddAction, RemoveAction

from airflow_provider_mysqlcdc.cdc.errors import ConcurrentCommit, SchemaChangedError, is_table_fault
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy, TableMaintenance
from airflow_provider_mysqlcdc.protocol.sinks import MERGE_MODES, check_table_merge_modes
from airflow_provider_mysqlcdc.sinks.arrow_rows import CHUNK_COLUMN, arrow_schema
from airflow_provider_mysqlcdc.sinks.base import (
    Position,
    Sink,
    StreamCommit,
    refuse_reserved_names,
    refuse_shard_schema,
)
from airflow_provider_mysqlcdc.sinks.base import retry_conflicts as retry_commits
from airflow_provider_mysqlcdc.sinks.changelog import CHANGELOG_SUFFIX
from airflow_provider_mysqlcdc.sinks.clustering import FOLD_SHARE, MAX_REWRITE_BYTES, TARGET_BYTES, ClusteringResult
from airflow_provider_mysqlcdc.sinks.data_files import (
    DataFile,
    chunk_bounds,
    read_data_file,
    rows_outside,
    write_data_file,
)
from airflow_provider_mysqlcdc.sinks.delta.clustering import cluster_table
from airflow_provider_mysqlcdc.sinks.delta.commits import applied_position, commit_properties, transactions
from airflow_provider_mysqlcdc.sinks.delta.copy_on_write import merge_by_rewrite
from airflow_provider_mysqlcdc.sinks.delta.data_files import add_action
from airflow_provider_mysqlcdc.sinks.delta.log import DeltaLog, is_writable
from airflow_provider_mysqlcdc.sinks.delta.merge_on_read import commit_range_by_log, merge_into, with_vectors
from airflow_provider_mysqlcdc.sinks.delta.predicates import (
    chunk_range_predicate,
    file_placement,
    sql_identifier,
    sql_literal,
)
from airflow_provider_mysqlcdc.sinks.key_index import KeyIndex
from airflow_provider_mysqlcdc.sinks.routing import shard_bounds, sink_target

log = logging.getLogger(__name__)

T = TypeVar("T")

_MAX_ATTEMPTS = 50
_CLUSTER_ATTEMPTS = 5
#: the Delta setting naming the columns whose statistics a table keeps: by default only its first 32
#: columns', so a wide table would keep none of ``_cdc_chunk``, which every range commit reads
STATS_COLUMNS = "delta.dataSkippingStatsColumns"


#: how a batch of changes reaches a table's files (``DeltaSink.merge_mode``)
MERGE_ON_READ, COPY_ON_WRITE = MERGE_MODES
DEFAULT_MERGE_MODE = MERGE_ON_READ


class DeltaSink(Sink):
    #: delta-rs merges in Rust, without Python's lock, and every merge opens its own ``DeltaTable``
    concurrent_tables = True

    def __init__(self, root: str, storage_options: dict[str, str] | None = None, *,
                 merge_mode: str = DEFAULT_MERGE_MODE, table_merge_modes: tuple[tuple[str, str], ...] = ()):
        """:param merge_mode: ``merge-on-read``: a batch marks the rows it replaces deleted in deletion
            vectors and appends their new images (sinks/delta/merge_on_read.py), the table gets the
            ``deletionVectors`` feature; ``copy-on-write``: delta-rs's MERGE rewrites every file
            holding a changed key.
        :param table_merge_modes: (table name or pattern, merge mode) pairs: the sink tables merged
            otherwise than ``merge_mode`` (the first entry naming a table decides)."""
        if merge_mode not in MERGE_MODES:
            raise ValueError(f"merge_mode {merge_mode!r} is not one of {', '.join(MERGE_MODES)}")
        self.root = root.rstrip("/")
        self.storage_options = storage_options
        self.merge_mode = merge_mode
        self.table_merge_modes = check_table_merge_modes(table_merge_modes)
        #: each table's log as the merge-on-read writer replayed it, kept between batches
        self._logs: dict[str, DeltaLog] = {}
        self._logs_lock = threading.Lock()
        #: where each key's row lives in the tables' files, kept between batches (sinks/key_index.py)
        self.key_index = KeyIndex()
        #: tables whose merges fall back to copy-on-write, and why (logged once)
        self._copying: dict[str, str] = {}

    def __getstate__(self) -> dict[str, object]:
        """What a Spark Connect server unpickles: the settings, not the logs replayed here, the key
        index or their locks."""
        return {**self.__dict__, "_logs": {}, "_logs_lock": None, "key_index": None}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._logs_lock = threading.Lock()
        self.key_index = KeyIndex()

    def table_uri(self, table_id: TableId) -> str:
        return "/".join([self.root, *table_id.path_segments])

    # --- schema ----------------------------------------------------------------------------------
    def prepare(self, schema: TableSchema) -> None:
        refuse_reserved_names(schema)
        uri = self.table_uri(sink_target(schema).table_id)
        target = arrow_schema(schema)
        try:
            table = DeltaTable(uri, storage_options=self.storage_options)
        except TableNotFoundError:
            try:
                DeltaTable.create(uri, target, mode="ignore", storage_options=self.storage_options,
                                  configuration={"delta.appendOnly": "false", STATS_COLUMNS: _stats_columns(schema)})
            except CommitFailedError:
                pass  # created concurrently by another writer
            self._enable_vectors(uri, sink_target(schema).table_id)
            return
        current = pa.schema(table.schema().to_arrow())
        self._check_evolution(schema.table_id, current, target)
        self._enable_features(table, schema.table_id, target)
        self._enable_vectors(uri, sink_target(schema).table_id)
        self._relax_nullability(table, schema.table_id, current, target)
        if STATS_COLUMNS not in table.metadata().configuration:  # a table created before this setting
            retry_conflicts(lambda: self.delta_log(uri).set_properties(
                DeltaTable(uri, storage_options=self.storage_options), {STATS_COLUMNS: _stats_columns(schema)}),
                f"keep statistics of {schema.table_id}'s key columns")

    def replace_schema(self, schema: TableSchema) -> None:
        """Empty the table and give it ``schema`` in one commit (a whole-table re-snapshot of a table
        whose column types Delta cannot evolve fills it right after)."""
        refuse_reserved_names(schema)
        target = sink_target(schema)
        refuse_shard_schema(schema, target.table_id, target.shard)
        write_deltalake(self.table_uri(target.table_id), arrow_schema(schema).empty_table(), mode="overwrite",
                        schema_mode="overwrite", storage_options=self.storage_options)

    def _enable_features(self, table: DeltaTable, table_id: TableId, target: pa.Schema) -> None:
        """A DATETIME column added to the source needs the table feature of Delta's TIMESTAMP_NTZ (a
        table created with one has it already), before a write adds the column."""
        if not any(pa.types.is_timestamp(f.type) and f.type.tz is None for f in target):
            return
        if "timestampNtz" in (table.protocol().writer_features or []):
            return
        retry_conflicts(lambda: DeltaTable(table.table_uri, storage_options=self.storage_options).alter.add_feature(
            TableFeatures.TimestampWithoutTimezone, allow_protocol_versions_increase=True),
            f"enable TIMESTAMP_NTZ on {table_id}")

    def _enable_vectors(self, uri: str, table_id: TableId) -> None:
        """A table merged into by deletion vectors has the ``deletionVectors`` reader and writer
        feature: given in a commit of its own, right after the table is created, or when a table made
        copy-on-write is first prepared for merge-on-read (its readers must read deletion vectors from
        then on; a table that stays copy-on-write never gets it)."""
        if self.merge_mode_of(table_id) != MERGE_ON_READ:
            return

        def enable() -> None:
            table = DeltaTable(uri, storage_options=self.storage_options)
            if is_writable(table) is None:
                with_vectors(table, uri, self.storage_options)

        retry_conflicts(enable, f"enable deletion vectors on {table_id}")

    def _relax_nullability(self, table: DeltaTable, table_id: TableId, current: pa.Schema, target: pa.Schema) -> None:
        """A column the table has as NOT NULL that ``target`` lets be NULL (a temporal key column, which a
        table written before zero dates in keys were kept has as NOT NULL: arrow_rows.py) becomes
        nullable, with the columns ``target`` adds, in a commit of its own (an empty schema-merging
        append), before data files of the new schema are written."""
        relaxed = [f.name for f in target if f.nullable and f.name in current.names and not current.field(f.name).nullable]
        if not relaxed:
            return
        retry_conflicts(lambda: write_deltalake(table.table_uri, target.empty_table(), mode="append", schema_mode="merge",
                                                storage_options=self.storage_options),
                        f"let {', '.join(relaxed)} of {table_id} hold NULL")

    def _check_evolution(self, table_id: TableId, current: pa.Schema, target: pa.Schema) -> None:
        """Added columns are merged in on the next write; a changed type is refused clearly."""
        for field in target:
            if field.name in current.names and not current.field(field.name).type.equals(field.type):
                old = current.field(field.name).type
                if not _safe_widening(old, field.type):
                    raise SchemaChangedError(
                        f"Column {field.name!r} of {table_id} changed from {old} to {field.type} in the source; "
                        "the Delta table cannot follow that safely. Re-snapshot the table into a new sink "
                        "location (or drop its Delta table) to pick up the new type."
                    )

    # --- writes ----------------------------------------------------------------------------------
    def replace_range(self, table_id: TableId, start: str | None, end: str | None, rows: pa.Table, *,
                      commit: StreamCommit | None = None) -> None:
        uri = self.table_uri(table_id)
        predicate = chunk_range_predicate(start, end)

        def write() -> None:
            write_deltalake(uri, _with_dropped_columns(rows, self.open_table(uri)), mode="overwrite", predicate=predicate,
                            schema_mode="merge", storage_options=self.storage_options,
                            commit_properties=commit_properties(commit))

        retry_conflicts(write, f"replace {table_id} [{start}, {end})")

    def file_schema(self, schema: TableSchema) -> pa.Schema | None:
        """The columns data files of ``schema``'s rows take, once the table has every column of the
        source (added here, in a commit of their own); None while a column's type differs from the
        table's (a widening only a rewrite through ``replace_range`` carries out). Call after ``prepare``."""
        table = self.open_table(self.table_uri(sink_target(schema).table_id))
        if table is None:
            return None
        current, target = pa.schema(table.schema().to_arrow()), arrow_schema(schema)
        if any(f.name in current.names and not current.field(f.name).type.equals(f.type) for f in target):
            return None
        added = [f.with_nullable(True) for f in target if f.name not in current.names]
        if added:
            retry_conflicts(lambda: DeltaTable(table.table_uri, storage_options=self.storage_options).alter.add_columns(
                [DeltaField.from_arrow(f) for f in added]), f"add columns {[f.name for f in added]} to {schema.table_id}")
            current = pa.schema(DeltaTable(table.table_uri, storage_options=self.storage_options).schema().to_arrow())
        return current

    def commit_range(self, table_id: TableId, start: str | None, end: str | None, files: Sequence[DataFile], *,
                     file_schema: pa.Schema) -> None:
        """Replace the rows of the key range ``[start, end)`` by the data ``files`` already in the
        table's folder (``write_data_file``), in one commit: it adds them and removes every file the
        range held. A file that also holds rows outside the range is rewritten without the range's
        rows, in the same commit. Retried on a conflicting commit; done at once when ``files`` are in
        the table already (a commit that landed before its caller heard of it)."""
        uri = self.table_uri(table_id)
        ours = {f.path for f in files}

        def commit() -> None:
            table = DeltaTable(uri, storage_options=self.storage_options)
            if "deletionVectors" in (table.protocol().writer_features or ()):
                return commit_range_by_log(table, uri, self.delta_log(uri), start, end, files, file_schema=file_schema)
            existing = pa.table(table.get_add_actions(flatten=True)).to_pylist()
            if ours and ours <= {e["path"] for e in existing}:
                return None
            now = int(time.time() * 1000)
            actions: list[AddAction | RemoveAction] = [add_action(f) for f in files]
            for held in existing:
                placement = file_placement(chunk_bounds(held), start, end)
                if held["path"] in ours or placement == "outside":
                    continue
                if placement == "partial":
                    kept = rows_outside(read_data_file(uri, held["path"]), start, end)
                    if kept.num_rows:
                        actions.append(add_action(write_data_file(uri, kept, file_schema, prefix="rewritten")))
                actions.append(RemoveAction(held["path"], True, now, held["size_bytes"], {}))
            table.create_write_transaction(actions, "append", file_schema)
            return None

        retry_conflicts(commit, f"commit {len(files)} data files into {table_id} [{start}, {end})")

    def merge_changes(self, schema: TableSchema, changes: pa.Table, *, commit: StreamCommit) -> None:
        target = sink_target(schema).table_id
        uri = self.table_uri(target)
        table = self.delta_log(uri).latest(self.storage_options) if self.merge_mode_of(target) == MERGE_ON_READ else None
        if table is not None and self._writable(table, uri, schema.table_id):
            loaded = [table]  # the first attempt merges into the table as just loaded, a retry loads it again
            result = retry_conflicts(lambda: merge_into(uri, self.storage_options, self.delta_log(uri), self.key_index,
                                                        schema, changes, shard=commit.shard,
                                                        transactions=transactions(commit),
                                                        table=loaded.pop() if loaded else None),
                                     f"merge batch {commit.batch_id} into {schema.table_id}")
            log.debug("merge of batch %d into %s: %s", commit.batch_id, schema.table_id, result)
        else:
            self._merge_copying(uri, schema, changes, commit)

    def _writable(self, table: DeltaTable, uri: str, table_id: TableId) -> bool:
        """Whether merges into ``table`` may go by deletion vectors (else: copy-on-write, logged once)."""
        why = is_writable(table)
        if why and self._copying.get(uri) != why:
            log.warning("%s has %s, which deletion-vector commits would not keep: its merges copy on write",
                        table_id, why)
        if why:
            self._copying[uri] = why
        return why is None

    def delta_log(self, uri: str) -> DeltaLog:
        with self._logs_lock:
            if uri not in self._logs:
                self._logs[uri] = DeltaLog(uri)
            return self._logs[uri]

    def _merge_copying(self, uri: str, schema: TableSchema, changes: pa.Table, commit: StreamCommit) -> None:
        retry_conflicts(lambda: merge_by_rewrite(uri, self.storage_options, schema, changes, shard=commit.shard,
                                                 commit_properties=commit_properties(commit)),
                        f"merge batch {commit.batch_id} into {schema.table_id}")

    def cluster(self, table_id: TableId, *, min_files: int = 2, target_bytes: int = TARGET_BYTES,
                fold_share: float = FOLD_SHARE, large_apart: bool = False,
                max_rewrite_bytes: int = MAX_REWRITE_BYTES) -> ClusteringResult | None:
        """Rewrite, in key order, the data files that spread the table's chunk key ranges (files that
        overlap, runs of small ones: sinks/clustering.py), once ``min_files`` need it, in one commit
        that changes no row. A commit that removed one of its files meanwhile makes it plan again, a
        few times at most: clustering can wait for the next run, a chunk commit or a merge should not
        wait for it. None: nothing to do (or given up, logged)."""
        uri = self.table_uri(table_id)
        try:
            return retry_conflicts(lambda: cluster_table(self.delta_log(uri).latest(self.storage_options), uri,
                                                          min_files=min_files, target_bytes=target_bytes,
                                                          max_rewrite_bytes=max_rewrite_bytes, fold_share=fold_share,
                                                          large_apart=large_apart, delta_log=self.delta_log(uri)),
                                    f"cluster {table_id}", attempts=_CLUSTER_ATTEMPTS)
        except (CommitFailedError, ConcurrentCommit) as exc:
            log.warning("clustering %s gave way to %d concurrent commits and is left for its next run (%s)",
                        table_id, _CLUSTER_ATTEMPTS, exc)
            return None

    def truncate_before(self, table_id: TableId, version: int, *, commit: StreamCommit) -> None:
        """Delete every row older than ``version`` (a TRUNCATE at that offset)."""
        uri = self.table_uri(table_id)

        def delete_older() -> None:
            DeltaTable(uri, storage_options=self.storage_options).delete(
                _older_than(version, commit), commit_properties=commit_properties(commit))

        retry_conflicts(delete_older, f"truncate {table_id} before version {version}")

    def fill_before(self, table_id: TableId, values: dict[str, pa.Scalar], version: int, *,
                    commit: StreamCommit) -> None:
        """Set columns to constant values in every row older than ``version`` (columns an ALTER added,
        in the rows that existed then), in one commit (after one adding the columns the table lacks)."""
        literals = {name: sql_literal(value) for name, value in values.items()}
        unsupported = sorted(name for name, literal in literals.items() if literal is None)
        if unsupported:
            raise ValueError(f"no SQL literal for the type of column(s) {', '.join(unsupported)}")
        uri = self.table_uri(table_id)
        # the columns may not be in the table yet (they are merged in by the first write that holds
        # them), and an update of a column the table lacks sets nothing: add them first, empty
        present = set(DeltaTable(uri, storage_options=self.storage_options).schema().to_arrow().names)
        missing = [pa.field(name, value.type, nullable=True) for name, value in values.items() if name not in present]
        if missing:
            retry_conflicts(lambda: DeltaTable(uri, storage_options=self.storage_options).alter.add_columns(
                [DeltaField.from_arrow(f) for f in missing]), f"add columns {[f.name for f in missing]} to {table_id}")

        def update() -> None:
            DeltaTable(uri, storage_options=self.storage_options).update(
                updates={sql_identifier(n): u for n, u in literals.items() if u is not None},
                predicate=_older_than(version, commit),
                commit_properties=commit_properties(commit))

        retry_conflicts(update, f"fill {', '.join(values)} of {table_id} before version {version}")

    def append_changelog(self, table_id: TableId, changes: pa.Table, *, commit: StreamCommit) -> None:
        """Append change rows to ``<table>__changelog``."""
        uri = self.table_uri(table_id) + CHANGELOG_SUFFIX

        def append() -> None:
            write_deltalake(uri, changes, mode="append", storage_options=self.storage_options,
                            commit_properties=commit_properties(commit))

        retry_conflicts(append, f"changelog batch {commit.batch_id} of {table_id}")

    def applied_position(self, table_id: TableId, *, changelog: bool = False, shard: str = "") -> Position | None:
        table = self.open_table(self.table_uri(table_id) + (CHANGELOG_SUFFIX if changelog else ""))
        if table is None:
            return None
        return applied_position(table, shard)

    def open_table(self, uri: str) -> DeltaTable | None:
        """The Delta table at ``uri`` (one of ``table_uri``'s, or its changelog's), None when there is none."""
        try:
            return DeltaTable(uri, storage_options=self.storage_options)
        except TableNotFoundError:
            return None

    def column_names(self, table_id: TableId) -> list[str]:
        """The table's column names (metadata columns included); none for a table not written yet."""
        table = self.open_table(self.table_uri(table_id))
        return [] if table is None else [f.name for f in table.schema().fields]

    def read(self, table_id: TableId) -> pa.Table:
        """Through delta-rs's own engine, which applies deletion vectors (its pyarrow dataset refuses
        a table that has them), in the table's column types."""
        table = DeltaTable(self.table_uri(table_id), storage_options=self.storage_options)
        return pa.table(table.scan()).cast(pa.schema(table.schema().to_arrow()))

    def maintain(self, table_id: TableId, policy: MaintenancePolicy) -> list[TableMaintenance]:
        from airflow_provider_mysqlcdc.sinks.delta.maintenance import maintain_table

        return maintain_table(self, table_id, policy)

    def refuses(self, table_id: TableId, exc: BaseException) -> bool:
        """Besides the table's own faults: delta-rs refusing its rows, which is a ``SchemaMismatchError``
        or a ``DeltaError`` saying the data failed the table's CHECK constraints or invariants, or that
        a value does not fit its column (``_REFUSALS``). Any other
        ``DeltaError`` (delta-rs wraps the object store's failures in generic ones too), a conflict or
        a missing table is not the table's."""
        if is_table_fault(exc) or isinstance(exc, SchemaMismatchError):
            return True
        if type(exc) is not DeltaError:
            return False
        message = str(exc)
        return any(s in message for s in _REFUSALS) and not any(s in message for s in _STORAGE_FAILURES)


#: what delta-rs says when a table refuses rows: its constraints or invariants (``InvalidData``), or a
#: value its column cannot hold (Arrow: a NULL in a non-nullable column, a failed cast, a schema)
_REFUSALS = ("Invalid data found", "failed validation", "Invariant violations", "Arrow error", "Cast error",
             "Schema error")
#: what it says when storage failed, whatever the wrapping
_STORAGE_FAILURES = ("Object Store error", "os error", "Generic S3 error", "Io error", "I/O error")


def _stats_columns(schema: TableSchema) -> str:
    """The columns whose statistics the table keeps (``STATS_COLUMNS``): the chunk column, which range
    commits decide by, and the key columns that plain names allow in the setting's list."""
    plain = [k for k in schema.key_columns if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
    return ",".join([*plain, CHUNK_COLUMN])


def _with_dropped_columns(rows: pa.Table, table: DeltaTable | None) -> pa.Table:
    """``rows`` plus, as NULL, the table's columns they lack (columns the source dropped or renamed
    since they were added): a range overwrite must carry every column of the table."""
    if table is None:
        return rows
    missing = [f for f in pa.schema(table.schema().to_arrow()) if f.name not in rows.column_names]
    for field in missing:
        rows = rows.append_column(field.with_nullable(True), pa.nulls(rows.num_rows, field.type))
    return rows


def _older_than(version: int, commit: StreamCommit) -> str:
    """The rows older than ``version`` (of the commit's shard in a routed table)."""
    older = f"_cdc_version < {int(version)}"
    return older if not commit.shard else f"{older} AND {chunk_range_predicate(*shard_bounds(commit.shard))}"


def retry_conflicts(operation: Callable[[], T], what: str, *, attempts: int = _MAX_ATTEMPTS) -> T:
    """Run ``operation`` (which loads the table afresh) again when a concurrent Delta commit made its
    own fail, up to ``attempts`` times (sinks/base.py)."""
    return retry_commits(operation, what, conflicts=(CommitFailedError, ConcurrentCommit), attempts=attempts)


def _safe_widening(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether a table whose column is ``old`` takes values of ``new`` as they are. Only text to
    text: delta-rs casts every write to the table's column type and cannot widen a column in place
    (no type-widening table feature), so INT to BIGINT would fail the first value beyond INT."""
    return pa.types.is_string(old) and pa.types.is_string(new)
