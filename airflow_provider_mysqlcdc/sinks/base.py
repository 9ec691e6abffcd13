"""The sink interface: what the chunk job and the stream job need from a lakehouse table format.

Rows arrive as Arrow tables built by ``arrow_rows.with_metadata`` (source columns plus the metadata
columns). A sink must make two operations atomic and idempotent:

- ``replace_range``: replace every row whose ``_cdc_chunk`` lies in ``[start, end)`` by the given
  rows in one commit (a split, read again, replaces itself exactly); the stream passes
  ``(app_id, batch_id)`` too, so that a replayed batch never repeats a replace it already committed;
- ``merge_changes``: apply one batch of last-change-per-key rows (``_cdc_op`` 'd' deletes) in one
  commit, recorded under ``(app_id, batch_id)`` so that a replayed batch changes nothing twice.

Only ``DeltaSink`` exists and is tested; a user with Spark's own Delta or Iceberg can implement the
same seven methods.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import pyarrow as pa

from airflow_provider_mysqlcdc.cdc.source.schema import TableId, TableSchema


class Sink(ABC):
    @abstractmethod
    def prepare(self, schema: TableSchema) -> None:
        """Create the table for ``schema`` if missing; evolve it when columns were added."""

    @abstractmethod
    def replace_range(self, table_id: TableId, start: str | None, end: str | None, rows: pa.Table, *,
                      app_id: str | None = None, batch_id: int | None = None) -> bool:
        """Atomically replace the rows with ``start <= _cdc_chunk < end`` (None = open) by ``rows``."""

    @abstractmethod
    def merge_changes(self, schema: TableSchema, changes: pa.Table, *, app_id: str, batch_id: int) -> bool:
        """Apply last-change-per-key rows once per ``(app_id, batch_id)``; False if already applied."""

    @abstractmethod
    def truncate_before(self, table_id: TableId, version: int, *, app_id: str, batch_id: int) -> bool:
        """Remove every row with ``_cdc_version < version`` (the source table was truncated at that
        offset; rows a split read after it stay) once per ``(app_id, batch_id)``."""

    @abstractmethod
    def append_changelog(self, table_id: TableId, changes: pa.Table, *, app_id: str, batch_id: int) -> bool:
        """Append rows of ``changelog.CHANGELOG_SCHEMA`` once per ``(app_id, batch_id)`` (optional feature)."""

    @abstractmethod
    def applied_batch(self, table_id: TableId, app_id: str) -> int | None:
        """The last batch id of ``app_id`` committed to this table, if any."""

    @abstractmethod
    def read(self, table_id: TableId) -> pa.Table:
        """The whole table (for verification and status)."""
