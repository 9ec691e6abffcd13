"""What activating a newer registry generation does, apart from Spark and the server.

When a micro-batch ``(start, end]`` carries a newer generation than its start, the splits that
generation adds are activated before the batch's changes (spark/binlog_source.py reads what these
rules ask for and emits what they decide):

- ``plan_activation``: the splits added, the tables announced (``TablesActivated``; *whole* where
  every split of the table is new), which added splits are staged, and which are *behind* the
  batch's start (their high watermark ``h < start``): the binlog ``(h, start]`` of their key ranges
  must be read again, from ``replay_from``.
- ``ActivationPlan.lost_to``: when part of that re-read was purged, the tables whose splits needed it
  (``BinlogPurged``): nothing of them is applied now, the next run re-snapshots them
  (``without``).
- ``Replay``: where each re-read change goes. A change of a direct split after its high watermark is
  applied like any other (it is older than every change of the batch); one of a staged split joins
  that split's ``StagedSplitReady``, so the driver merges it into the staged rows before replacing the
  range; the table's other splits count as finished at ``start`` (the stream already applied their
  changes). A ``TRUNCATE`` of a staged split's table joins its changes; the DDL of other tables
  travels as in any batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from airflow_provider_mysqlcdc.cdc.binlog.split_filter import FinishedSplitFilter
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import (
    BinlogPurged,
    ChangeRecord,
    SchemaChangeEvent,
    TableEventKind,
    TableTruncated,
    WindowChange,
)
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.protocol.registry import Generation
from airflow_provider_mysqlcdc.state.generations import added_since
from airflow_provider_mysqlcdc.stream.events import StagedSplitReady, TablesActivated
from airflow_provider_mysqlcdc.stream.positions import Watermarks, with_watermarks


@dataclass(frozen=True)
class ActivationPlan:
    """The splits ``generation`` adds, activated at ``start`` (see the module doc)."""

    generation: Generation  # with the high watermarks the batch places
    start: BinlogOffset
    added: tuple[FinishedSplit, ...]
    activated: TablesActivated

    @property
    def staged(self) -> dict[str, FinishedSplit]:
        """The added splits whose rows were staged, by split id."""
        return {f.split.split_id: f for f in self.added if f.staged}

    @property
    def behind(self) -> list[FinishedSplit]:
        """The added splits read before ``start``: their binlog up to ``start`` is read again."""
        return [f for f in self.added if f.high_watermark < self.start]

    @property
    def replay_from(self) -> BinlogOffset | None:
        """Where the re-read starts (None: nothing to re-read)."""
        return min((f.high_watermark for f in self.behind), default=None)

    def lost_to(self, gap: BinlogPurged) -> BinlogPurged:
        """The re-read's binlog up to ``gap.resumed_at`` is gone: the tables whose splits needed it."""
        tables = tuple(sorted({f.split.table_id for f in self.behind if f.high_watermark < gap.resumed_at}))
        return BinlogPurged(gap.lost_from, gap.resumed_at, tables)

    def without(self, tables: tuple[TableId, ...] | None) -> ActivationPlan:
        """The plan with nothing of ``tables`` left to apply (announced all the same)."""
        gone = set(tables or ())
        return dataclasses.replace(self, added=tuple(f for f in self.added if f.split.table_id not in gone))


def plan_activation(new: Generation, old: Generation, start: BinlogOffset, watermarks: Watermarks) -> ActivationPlan:
    """Activating ``new`` (whose high watermarks the batch places by ``watermarks``) over ``old`` at ``start``."""
    added_ids = {f.split.split_id for f in added_since(new, old)}
    new = with_watermarks(new, watermarks)
    added = tuple(f for f in new.finished_splits if f.split.split_id in added_ids)
    tables = sorted({f.split.table_id for f in added})
    whole = tuple(t for t in tables if all(f.split.split_id in added_ids for f in new.tables[t].splits))
    return ActivationPlan(new, start, added, TablesActivated({t: new.tables[t].chunk_key for t in tables}, whole))


@dataclass
class Replay:
    """Where the changes of the re-read ``(replay_from, start]`` go (see the module doc)."""

    plan: ActivationPlan
    #: the database's order of each re-read table's chunk key (a table without one is not placed)
    orderings: Mapping[TableId, KeyOrdering]
    #: each staged split's changes, by split id, as the re-read collects them
    staged_changes: dict[str, list[WindowChange]] = field(init=False)
    split_filter: FinishedSplitFilter = field(init=False)
    _added_ids: set[str] = field(init=False)
    _staged_tables: dict[TableId, list[str]] = field(init=False)

    def __post_init__(self) -> None:
        plan = self.plan
        self.staged_changes = {split_id: [] for split_id in plan.staged}
        self._added_ids = {f.split.split_id for f in plan.added}
        self._staged_tables = {}
        for f in plan.added:
            if f.split.split_id in self.staged_changes:
                self._staged_tables.setdefault(f.split.table_id, []).append(f.split.split_id)
        tables = sorted({f.split.table_id for f in plan.behind})
        splits = [f if f.split.split_id in self._added_ids
                  else dataclasses.replace(f, high_watermark=max(f.high_watermark, plan.start))
                  for t in tables for f in plan.generation.tables[t].splits]
        self.split_filter = FinishedSplitFilter([f for f in splits if f.split.table_id in self.orderings],
                                                self.orderings)

    def changes(self, records: list[ChangeRecord]) -> list[bool]:
        """Which of ``records`` are applied with the batch; those of staged splits are kept for them."""
        decisions = []
        for record, split in zip(records, self.split_filter.locate(records)):
            keep = split is not None and record.offset > split.high_watermark
            if keep and split is not None and split.split.split_id in self.staged_changes:
                self.staged_changes[split.split.split_id].append(record)
                keep = False
            decisions.append(keep)
        return decisions

    def schema_change(self, event: SchemaChangeEvent) -> SchemaChangeEvent | None:
        """What of a re-read DDL statement travels with the batch (None: nothing): a ``TRUNCATE`` of a
        staged split's table joins that split's changes instead."""
        for change in event.changes:
            if change.table in self._staged_tables and change.kind is TableEventKind.TRUNCATED:
                for split_id in self._staged_tables[change.table]:
                    self.staged_changes[split_id].append(TableTruncated(change.table, event.offset))
        direct = tuple(c for c in event.changes if c.table not in self._staged_tables)
        return dataclasses.replace(event, changes=direct) if direct else None

    def staged_ready(self) -> list[StagedSplitReady]:
        """Every staged split of the plan, with its changes up to ``start``, by split id."""
        return [StagedSplitReady(split, self.plan.start, self.staged_changes[split_id])
                for split_id, split in sorted(self.plan.staged.items())]
