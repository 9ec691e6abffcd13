"""What a plan task decided, handed through XCom.

- ``ChunkPlan``: the plan task's return value is a list of them, one per mapped snapshot task (a
  chunk: a group of one table's splits that one Spark application reads).
- ``TablePlans``: one per plan task, to the collect task (and read by ``bin/status``): per table its
  ``PlanAction``, the splits it reads and, for a stream-only table, where the stream starts;
  ``exact``: the task names every table of the pipeline (tables it does not name are removed from
  the registry).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.rules import TableRule, rule_from, rule_to
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import SnapshotSplit
from airflow_provider_mysqlcdc.protocol.actions import PlanAction
from airflow_provider_mysqlcdc.protocol.envelope import RecordFormat


@dataclass
class TablePlan:
    table_id: TableId
    chunk_key: str
    action: PlanAction
    splits: list[SnapshotSplit] = field(default_factory=list)
    stream_from: BinlogOffset | None = None
    #: the table's column rule (cdc/source/rules.py), registered with it; None: every column as it is
    table_rule: TableRule | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table_id.quoted, "chunk_key": self.chunk_key, "action": PlanAction(self.action).value,
                "splits": [s.to_dict() for s in self.splits],
                "stream_from": self.stream_from.to_dict() if self.stream_from else None,
                "table_rule": rule_to(self.table_rule)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TablePlan":
        return cls(TableId.parse(data["table"]), data["chunk_key"], PlanAction.parse(data["action"]),
                   [SnapshotSplit.from_dict(s) for s in data["splits"]],
                   BinlogOffset.from_dict(data["stream_from"]) if data.get("stream_from") else None,
                   rule_from(data.get("table_rule")))


@dataclass(frozen=True)
class TablePlans:
    FORMAT: ClassVar[RecordFormat] = RecordFormat("table-plans", 3)  # 2: TablePlan.table_rule; 3: TableRule.route

    exact: bool
    plans: list[TablePlan] = field(default_factory=list)
    #: the registry generation the plans were made against (None: not known, an older record)
    planned_on: int | None = None

    def to_body(self) -> dict[str, Any]:
        return {"exact": self.exact, "plans": [p.to_dict() for p in self.plans], "planned_on": self.planned_on}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "TablePlans":
        planned_on = body.get("planned_on")
        return cls(bool(body["exact"]), [TablePlan.from_dict(p) for p in body["plans"]],
                   None if planned_on is None else int(planned_on))


@dataclass(frozen=True)
class ChunkPlan:
    """One snapshot task's work: ``splits`` of one table, read by one Spark application. ``label``
    names the task in the UI (its map index) and in logs."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("chunk-plan", 3)  # 2: table_rule; 3: TableRule.route

    label: str
    table_id: TableId
    splits: tuple[SnapshotSplit, ...]
    #: the table's column rule (cdc/source/rules.py); None: every column as it is
    table_rule: TableRule | None = None

    @property
    def chunk_key(self) -> str | None:
        return self.splits[0].chunk_key if self.splits else None

    def to_body(self) -> dict[str, Any]:
        return {"label": self.label, "table": self.table_id.quoted, "splits": [s.to_dict() for s in self.splits],
                "table_rule": rule_to(self.table_rule)}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "ChunkPlan":
        return cls(str(body["label"]), TableId.parse(body["table"]),
                   tuple(SnapshotSplit.from_dict(s) for s in body["splits"]), rule_from(body.get("table_rule")))
