"""A batch of changes merged into a Delta table by delta-rs's MERGE (copy-on-write): every data file
holding a changed key is rewritten whole, with the batch's rows in it. The other merge mode is
sinks/delta/merge_on_read.py; the sink chooses (sinks/delta/sink.py)."""

from __future__ import annotations

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable
from deltalake.schema import Field as DeltaField

from airflow_provider_mysqlcdc.cdc.model.schema import TableSchema
from airflow_provider_mysqlcdc.sinks.arrow_rows import CHUNK_COLUMN, row_key_columns, zero_date_columns
from airflow_provider_mysqlcdc.sinks.delta.predicates import chunk_range_predicate, files_holding, sql_identifier
from airflow_provider_mysqlcdc.sinks.routing import shard_bounds


def merge_by_rewrite(uri: str, storage_options: dict[str, str] | None, schema: TableSchema, changes: pa.Table, *,
                     shard: str, commit_properties: CommitProperties | None) -> None:
    """Merge ``changes`` (the last change per key, with their change columns) into the table at
    ``uri``, matching the rows of ``shard`` only in a routed table, in one commit (two when columns
    are added first); the caller retries on a conflicting commit."""
    zeros = zero_date_columns(schema)
    nullable = set(zeros) | set(zeros.values())
    # a temporal key column is NULL where its companion holds a ZeroDate's text (arrow_rows.py): both
    # match NULL-safely; every other key column is never NULL
    keys = " AND ".join(f"(t.{sql_identifier(k)} IS NOT DISTINCT FROM s.{sql_identifier(k)})" if k in nullable
                        else f"t.{sql_identifier(k)} = s.{sql_identifier(k)}" for k in row_key_columns(schema))
    if shard:  # a shard's key matches only its own rows: another shard may hold the same key
        keys += " AND " + str(chunk_range_predicate(*shard_bounds(shard), alias="t"))
    integer_keys = all(pa.types.is_integer(changes.schema.field(k).type) for k in schema.key_columns)
    # every column by name, quoted here: delta-rs's update_all/insert_all wrap names in backticks
    # without escaping them, which a column named with a backtick breaks
    assignments = {sql_identifier(n): f"s.{sql_identifier(n)}" for n in changes.column_names}
    table = DeltaTable(uri, storage_options=storage_options)
    # only the files whose chunk range holds a changed key are read and rewritten: a merge's
    # cost follows the changes, not the table (every target row of a changed key lies in them)
    files = files_holding(table, changes.column(CHUNK_COLUMN))  # None: every file
    # columns the source dropped since the table took them: an update keeps a row's value there,
    # an insert of a key the table holds (deleted and inserted again in this batch) holds NULL
    # there, as any insert. delta-rs assigns no column the source lacks while it merges schemas,
    # so then the changes' new columns are added first, in a commit of their own
    current = pa.schema(table.schema().to_arrow())
    absent = [n for n in current.names if n not in changes.column_names]
    added = [f.with_nullable(True) for f in changes.schema if f.name not in current.names]
    if absent and added:
        table.alter.add_columns([DeltaField.from_arrow(f) for f in added])
        table = DeltaTable(uri, storage_options=storage_options)
    merger = table.merge(changes, predicate=f"{keys} AND ({files})" if files else keys, source_alias="s",
                         target_alias="t", merge_schema=not absent, streamed_exec=not integer_keys,
                         commit_properties=commit_properties)
    if absent:
        merger = merger.when_matched_update(
            {**assignments, **{sql_identifier(n): "NULL" for n in absent}},
            predicate="s._cdc_op = 'c' AND s._cdc_version > t._cdc_version")
    (
        # the changes are a bounded in-memory table (the stream merges at most max_apply_changes at
        # once), so delta-rs may derive a pruning predicate from their key ranges and skip the
        # target files outside them, which keeps a merge's memory from growing with the table
        # (its streamed execution gives that up, and the files predicate above stands in). Only for
        # integer keys: with a DECIMAL(20,0) key (BIGINT UNSIGNED) the pruned merge inserted rows it
        # should have updated (deltalake 1.6.6)
        merger
        .when_matched_delete(predicate="s._cdc_op = 'd' AND s._cdc_version > t._cdc_version")
        .when_matched_update(assignments, predicate="s._cdc_op <> 'd' AND s._cdc_version > t._cdc_version")
        .when_not_matched_insert(assignments, predicate="s._cdc_op <> 'd'")
        .execute()
    )
