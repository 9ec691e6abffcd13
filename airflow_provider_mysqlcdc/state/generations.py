"""What follows from a registry generation's records (protocol/registry.py holds their format;
state/registry.py reads and writes them): where a stream without a checkpoint starts, which splits a
newer generation adds, where a table's snapshot was first read, and generations with their splits
changed (watermarks placed in their epochs or translated after a failover)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, Generation, split_identity

SplitChange = Callable[[FinishedSplit], FinishedSplit]


def start_offset(generation: Generation) -> BinlogOffset | None:
    """Where a stream without a checkpoint starts: the smallest high watermark (None: nothing captured)."""
    return min((f.high_watermark for f in generation.finished_splits), default=None)


def first_high_watermark(captured: CapturedTable) -> BinlogOffset:
    """The earliest point any of the table's splits was read at: events after it may be missing from the sink."""
    return min(f.high_watermark for f in captured.splits)


def added_since(newer: Generation, older: Generation) -> list[FinishedSplit]:
    """Splits of ``newer`` that ``older`` did not have (new tables, re-snapshots)."""
    added: list[FinishedSplit] = []
    for table_id, captured in sorted(newer.tables.items()):
        before = older.tables.get(table_id)
        known = {split_identity(f) for f in before.splits} if before else set()
        added.extend(f for f in captured.splits if split_identity(f) not in known)
    return added


def table_with_splits(captured: CapturedTable, change: SplitChange) -> CapturedTable:
    """The table with ``change`` applied to every finished split."""
    return dataclasses.replace(captured, splits=[change(f) for f in captured.splits])


def with_splits(generation: Generation, change: SplitChange) -> Generation:
    """The generation with ``change`` applied to every finished split."""
    return dataclasses.replace(generation, tables={t: table_with_splits(c, change)
                                                   for t, c in generation.tables.items()})
