"""Drift: events after which a captured table's sink can no longer follow the binlog exactly by itself.

The stream records each such event here with its binlog offset and what it was
(``TableEventKind``), and goes on:

- ``altered``: a column was dropped or renamed. Rows the stream does not touch again keep the old
  column in the sink, and changes read after the new schema was loaded but written before the DDL
  carry names that schema lacks.
- ``rows-changed``: rows were removed or swapped without row events (``ALTER TABLE ... TRUNCATE |
  DROP | EXCHANGE PARTITION``, ``DISCARD | IMPORT TABLESPACE``): the sink still has them.
- ``dropped``, ``renamed``, ``replaced``: the name no longer holds the table the sink mirrors
  (``DROP TABLE``, ``RENAME TABLE``, ``CREATE OR REPLACE TABLE``, a table renamed onto the name).
  From that offset on the stream applies none of the table's changes: the sink keeps the table's
  last state ("frozen").
- ``created``: a table was created again under a frozen name (noted, for ``bin/status``).
- ``binlog-purged``: binlog the stream needed for the table was purged (with the stream's
  ``on_binlog_purged="resnapshot"``): changes are lost, so the table is frozen as well.
- ``key-changed``, ``type-changed``: a DDL changed the key, or a type the sink cannot take: frozen.
- ``failed``: a change of the table could not be decoded, typed or written (its data or schema:
  the error is the reason): frozen from that change, the other tables go on.

A frozen table's changes from the event's offset on are not applied (``changes_before``): the sink
keeps the changes of the events before it.

One thing repairs all of them exactly while streaming: a staged whole-table re-snapshot, which the
next plan does for every table with an event after its splits were read (``operators/plan.py``),
when the table exists on the server; a table that is gone keeps its sink as it was, and the plan and
``bin/status`` say so. Once the re-snapshot's generation is active, its splits are newer than the
events, so nothing is pending or frozen any more.

The file is ``progress/schema-drift.json``, a ``DriftLog`` record (protocol/registry.py).
"""

from __future__ import annotations

import time

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import TableEventKind
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, DriftEvent, DriftLog
from airflow_provider_mysqlcdc.state.generations import first_high_watermark
from airflow_provider_mysqlcdc.state.registry import PipelineState

DRIFT = "schema-drift.json"
#: events kept per table (the oldest go first; only those after the table's splits matter)
MAX_EVENTS = 20


Drift = dict[TableId, list[DriftEvent]]


def read_drift(state: PipelineState) -> Drift:
    """Every table's drift events (read once, then ask ``pending_drift`` / ``frozen_since`` per table)."""
    log = state.read_progress(DriftLog, DRIFT)
    return log.tables if log else {}


def record_drift(state: PipelineState, drift: Drift, table_id: TableId, kind: TableEventKind, offset: BinlogOffset,
                 reason: str) -> bool:
    """Add an event to ``drift`` (as read by ``read_drift``) and write it; False when it was known
    already (a batch replayed after a restart records the same events again)."""
    events = drift.setdefault(table_id, [])
    if any(e.kind is kind and e.offset == offset for e in events):
        return False
    events.append(DriftEvent(kind, offset, reason, time.time()))
    events.sort(key=lambda e: e.offset)
    del events[:-MAX_EVENTS]
    state.write_progress(DRIFT, DriftLog(drift))
    return True


def pending_drift(drift: Drift, table_id: TableId, captured: CapturedTable | None) -> list[DriftEvent]:
    """The table's events after some of its splits were read: a re-snapshot is due when any."""
    if captured is None or not captured.splits:
        return []
    return [e for e in drift.get(table_id, []) if e.offset > first_high_watermark(captured)]


def frozen_since(drift: Drift, table_id: TableId, captured: CapturedTable | None) -> BinlogOffset | None:
    """Where the stream stopped applying the table's changes (its name stopped holding the table), if it did."""
    ends = [e.offset for e in pending_drift(drift, table_id, captured) if e.kind.freezes]
    return min(ends, default=None)

