"""The optional changelog: an append-only Delta table per source table, for users who want the
change stream rather than the mirror. One row per change, in binlog order: operation, before and
after images as JSON text, and the change's binlog coordinates. A ``TRUNCATE`` is one row of
operation ``t`` with no images. Appends happen exactly once, by position, like the mirror's
merges (sinks/writer.py). The changelog of a routed sink table (sinks/routing.py) also has
``source_database`` and ``source_table``: which shard each change comes from.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from typing import Any

import pyarrow as pa

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.records.values import decimal_text
from airflow_provider_mysqlcdc.sinks.arrow_rows import event_timestamps

CHANGELOG_SUFFIX = "__changelog"

CHANGELOG_SCHEMA = pa.schema([
    pa.field("op", pa.string()),
    pa.field("before", pa.string()),
    pa.field("after", pa.string()),
    pa.field("binlog_file", pa.string()),
    pa.field("binlog_pos", pa.int64()),
    pa.field("row_in_event", pa.int32()),
    pa.field("part", pa.int32()),
    pa.field("version", pa.int64()),
    pa.field("gtid", pa.string()),
    pa.field("event_ts", pa.timestamp("us", tz="UTC")),
])


def _json_value(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return decimal_text(value)
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value // dt.timedelta(microseconds=1)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def image_json(image: dict[str, Any] | None) -> str | None:
    """A row image as JSON: DECIMAL as text, temporal values ISO 8601, TIME in microseconds, bytes base64."""
    return None if image is None else json.dumps(image, default=_json_value, ensure_ascii=False)


def changelog_rows(changes: pa.Table) -> pa.Table:
    """The changelog rows of change columns built with their images as JSON (sinks/change_columns.py)."""
    column = changes.column
    return pa.Table.from_arrays([column("_cdc_op"), column("_cdc_before"), column("_cdc_after"),
                                 column("_cdc_binlog_file"), column("_cdc_binlog_pos"), column("_cdc_row"),
                                 column("_cdc_part"), column("_cdc_version"), column("_cdc_gtid"),
                                 event_timestamps(column("_cdc_event_ms"))],
                                schema=CHANGELOG_SCHEMA)


def truncation_changelog(offset: BinlogOffset, timestamp_ms: int) -> pa.Table:
    """The changelog row of a TRUNCATE at ``offset``."""
    return pa.Table.from_pylist([{"op": "t", "before": None, "after": None, "binlog_file": offset.file,
                                  "binlog_pos": offset.position, "row_in_event": 0, "part": 0, "version": offset.version,
                                  "gtid": None, "event_ts": dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.timezone.utc)}],
                                schema=CHANGELOG_SCHEMA)


def with_source(rows: pa.Table, source: TableId) -> pa.Table:
    """Changelog rows of a shard of a routed table, with the names of its source table."""
    for name, value in (("source_database", source.database), ("source_table", source.table)):
        rows = rows.append_column(pa.field(name, pa.string(), nullable=False), pa.repeat(pa.scalar(value), rows.num_rows))
    return rows
