"""Schema drift: a captured table whose sink can no longer follow the binlog exactly by itself.

The stream writes changes with the table's current columns. After a DDL that drops or renames a
column, rows the stream does not touch again keep the old column in the sink (a renamed column's
values stay under the old name), and changes read after the new schema was loaded but written
before the DDL carry names that schema lacks. Both are repaired by one thing the pipeline does
exactly while streaming: a staged whole-table re-snapshot. So the stream records the table here
with the binlog offset of the drift, and the next plan re-snapshots every table whose splits were
read before that offset (``operators/plan.py``); ``bin/status`` shows it meanwhile.
"""

from __future__ import annotations

import time
from typing import Any

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.source.schema import TableId
from airflow_provider_mysqlcdc.state.registry import CapturedTable, PipelineState

DRIFT = "schema-drift.json"


def record_drift(state: PipelineState, table_id: TableId, offset: BinlogOffset, reason: str) -> None:
    """Note that ``table_id`` drifted at ``offset`` (the latest drift of a table is kept)."""
    drift = read_drift(state)
    known = drift.get(str(table_id))
    if known and BinlogOffset.from_dict(known["offset"]) >= offset:
        return
    drift[str(table_id)] = {"offset": offset.to_dict(), "reason": reason, "noted_at": time.time()}
    state.write_progress(DRIFT, drift)


def read_drift(state: PipelineState) -> dict[str, dict[str, Any]]:
    """Every table's latest drift, by table name (read once, then ask ``pending_drift`` per table)."""
    return state.read_progress(DRIFT) or {}


def pending_drift(drift: dict[str, dict[str, Any]], table_id: TableId,
                  captured: CapturedTable | None) -> dict[str, Any] | None:
    """The table's drift when some of its splits were read before it, i.e. a re-snapshot is due."""
    entry = drift.get(str(table_id))
    if entry is None or captured is None or not captured.splits:
        return None
    at = BinlogOffset.from_dict(entry["offset"])
    return entry if min(f.high_watermark for f in captured.splits) < at else None
