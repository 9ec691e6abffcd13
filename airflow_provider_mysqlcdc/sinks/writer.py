"""Turning split results and change batches into sink writes (one table at a time).

Both paths stamp every row with the metadata columns (arrow_rows.py); ``_cdc_chunk`` comes from
the chunk key's database order (records/ordering.py), so a split's rows are exactly the string
range ``[encode(start), encode(end))``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pyarrow as pa

from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering, encode_int_sort_keys, encode_sort_key
from airflow_provider_mysqlcdc.cdc.source.schema import TableSchema
from airflow_provider_mysqlcdc.sinks.arrow_rows import data_schema, python_values, rows_to_data_table, with_metadata
from airflow_provider_mysqlcdc.sinks.base import Sink
from airflow_provider_mysqlcdc.sinks.changelog import changelog_table


def last_change_per_key(schema: TableSchema, records: Sequence[ChangeRecord]) -> list[ChangeRecord]:
    """Within one batch only the last change of each key matters (records are in binlog order)."""
    last: dict[tuple, ChangeRecord] = {}
    for record in records:
        last[schema.key_of(record.image)] = record
    return list(last.values())

class SinkWriter:
    def __init__(self, sink: Sink, schema: TableSchema, chunk_key: str, ordering: KeyOrdering):
        self.sink = sink
        self.schema = schema
        self.chunk_key = chunk_key
        self.ordering = ordering

    def _chunks(self, data: pa.Table) -> pa.Array | list[str]:
        """``_cdc_chunk`` for every row of ``data`` (vectorised for integer chunk keys)."""
        column = data.column(self.chunk_key)
        if pa.types.is_integer(column.type) and not self.ordering.needs_database:
            return encode_int_sort_keys(column.combine_chunks())  # integers (and TIME as microseconds)
        keys = python_values(self.schema.column(self.chunk_key), column)
        return [encode_sort_key(k) for k in self.ordering.sort_keys(keys)]

    def split_range(self, finished: FinishedSplit) -> tuple[str | None, str | None]:
        start, end = self.ordering.sort_keys([finished.split.start, finished.split.end])
        return (None if start is None else encode_sort_key(start), None if end is None else encode_sort_key(end))

    def write_split(self, finished: FinishedSplit, rows: Sequence[dict]) -> None:
        """Replace exactly the split's key range by its rows as of the high watermark (idempotent)."""
        self.write_split_table(finished, rows_to_data_table(self.schema, rows))

    def write_split_table(self, finished: FinishedSplit, data: pa.Table, *, app_id: str | None = None,
                          batch_id: int | None = None) -> bool:
        """The same, for rows already in Arrow (the source columns only); with ``(app_id, batch_id)``
        at most once per pair (False: already committed)."""
        table = with_metadata(data, self.schema, ops="r", offsets=finished.high_watermark,
                              event_ts_ms=int(time.time() * 1000), chunks=self._chunks(data))
        start, end = self.split_range(finished)
        return self.sink.replace_range(self.schema.table_id, start, end, table, app_id=app_id, batch_id=batch_id)

    @property
    def data_schema(self) -> pa.Schema:
        return data_schema(self.schema)

    def changes_table(self, records: Sequence[ChangeRecord]) -> pa.Table:
        latest = last_change_per_key(self.schema, records)
        data = rows_to_data_table(self.schema, [r.image for r in latest])
        return with_metadata(data, self.schema, ops=[r.op.value for r in latest], offsets=[r.offset for r in latest],
                             event_ts_ms=[r.timestamp_ms for r in latest], chunks=self._chunks(data))

    def apply_changes(self, records: Sequence[ChangeRecord], *, app_id: str, batch_id: int) -> bool:
        """Merge one batch; returns False when this batch id was already applied to this table."""
        if not records:
            return False
        return self.sink.merge_changes(self.schema, self.changes_table(records), app_id=app_id, batch_id=batch_id)


def apply_change_batch(writers: dict, records: Sequence[ChangeRecord], *, app_id: str, batch_id: int,
                       changelog: bool = False) -> dict:
    """Apply one batch of filtered changes, table by table; returns rows merged per table.

    Each table's merge is recorded under ``(app_id, batch_id)``: a batch replayed after a crash
    skips the tables it already reached and completes the others. With ``changelog``, every change
    is also appended to the table's changelog, idempotent the same way.
    """
    by_table: dict = {}
    for record in records:
        by_table.setdefault(record.table_id, []).append(record)
    merged = {}
    for table_id, table_records in by_table.items():
        writer = writers[table_id]
        if changelog:
            writer.sink.append_changelog(table_id, changelog_table(table_records), app_id=app_id, batch_id=batch_id)
        if writer.apply_changes(table_records, app_id=app_id, batch_id=batch_id):
            merged[table_id] = len(table_records)
    return merged
