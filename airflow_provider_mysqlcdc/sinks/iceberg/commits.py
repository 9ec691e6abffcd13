"""What a stream's commit records in an Iceberg table (sinks/iceberg/sink.py): the position of its last
change, in the table's properties (``mysqlcdc.position``, per shard ``mysqlcdc.position:<id>``), where
``applied_position`` reads it back whatever snapshots expired since, and in the summary of the
commit's snapshot, with the application and batch that made it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from airflow_provider_mysqlcdc.sinks.base import Position, StreamCommit
from airflow_provider_mysqlcdc.sinks.iceberg.maintenance import OPERATION_SUMMARY
from airflow_provider_mysqlcdc.sinks.iceberg.row_deltas import drop_dangling_deletes
from airflow_provider_mysqlcdc.sinks.iceberg.schema import arrow_schema_of, as_table_rows

if TYPE_CHECKING:
    from pyiceberg.table import Table, Transaction

#: the table property holding the position of the last change a stream committed (per shard: ":<id>")
POSITION_PROPERTY = "mysqlcdc.position"


def recorded(table: Table, shard: str) -> Position | None:
    """The position of the last change a stream committed to the table (to ``shard``'s rows)."""
    text = table.properties.get(_position_property(shard))
    if not text:
        return None
    file_number, position, row, part = (int(n) for n in text.split(","))
    return file_number, position, row, part


def landed(table: Table, commit: StreamCommit) -> bool:
    """Whether the table holds ``commit``'s position already: a retried write whose first attempt
    failed with an unknown outcome (a catalog connection lost during the commit) had landed."""
    position = recorded(table, commit.shard)
    return position is not None and position >= commit.position


def commit_rows(tx: Transaction, table: Table, rows: pa.Table | None, commit: StreamCommit | None,
                operation: str) -> None:
    """Append ``rows`` (typed as the table's columns) in ``tx``, with ``commit``'s position in the
    snapshot's summary and the table's properties; the summary names the ``operation`` too. Delete
    files whose data file the transaction dropped go first (``drop_dangling_deletes``), so the
    transaction's last snapshot is the one carrying the position."""
    summary = stream_summary(commit, operation)
    drop_dangling_deletes(tx, table.io, {OPERATION_SUMMARY: operation})
    if rows is not None and rows.num_rows:
        tx.append(as_table_rows(rows, table), snapshot_properties=summary)
    else:
        tx.append(arrow_schema_of(table).empty_table(), snapshot_properties=summary)
    record_position(tx, commit)


def stream_summary(commit: StreamCommit | None, operation: str) -> dict[str, str]:
    """What a write's snapshot summary says: the ``operation``, and ``commit``'s position, application
    and batch."""
    summary = {OPERATION_SUMMARY: operation}
    if commit is not None:
        summary.update({_position_property(commit.shard): _position_text(commit.position),
                        "mysqlcdc.app-id": commit.app_id, "mysqlcdc.batch-id": str(commit.batch_id)})
    return summary


def record_position(tx: Transaction, commit: StreamCommit | None) -> None:
    """Set ``commit``'s position in the table's properties, in ``tx`` (``landed`` reads it back)."""
    if commit is not None:
        tx.set_properties({_position_property(commit.shard): _position_text(commit.position)})


def _position_property(shard: str) -> str:
    return POSITION_PROPERTY if not shard else f"{POSITION_PROPERTY}:{shard}"


def _position_text(position: Position) -> str:
    return ",".join(str(n) for n in position)
