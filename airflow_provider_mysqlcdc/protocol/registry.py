"""The registry's records, kept in a pipeline's state location (``state/`` reads and writes them).

- ``generations/NNNNNN.json``: ``Generation``, the captured tables and their finished splits
  (``state/registry.py``)
- ``progress/schema-drift.json``: ``DriftLog``, the events the stream could not follow (``state/drift.py``)
- ``schemas/<table>.json``: ``RememberedSchema``, the last schema seen of a table (``state/schemas.py``)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import TableEventKind
from airflow_provider_mysqlcdc.cdc.model.rules import TableRule, rule_from, rule_to
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.protocol.envelope import ProtocolError, RecordFormat


def _table_event_kind(value: str) -> TableEventKind:
    try:
        return TableEventKind(value)
    except ValueError:
        raise ProtocolError(f"unknown table event kind {value!r} (known: {', '.join(k.value for k in TableEventKind)})"
                            ) from None


def split_identity(finished: FinishedSplit) -> str:
    return json.dumps(finished.to_dict(), sort_keys=True)


def stream_only_split(table_id: TableId, chunk_key: str, offset: BinlogOffset) -> FinishedSplit:
    """The whole key space 'finished' at ``offset`` with no rows: stream the table from there."""
    return FinishedSplit(SnapshotSplit(table_id, 0, chunk_key), offset, stream_only=True)


@dataclass
class CapturedTable:
    chunk_key: str
    splits: list[FinishedSplit]
    #: which columns reach the sink and how they are masked (cdc/source/rules.py); None: all, as they are
    table_rule: TableRule | None = None

    @property
    def stream_only(self) -> bool:
        return any(f.stream_only for f in self.splits)

    def to_dict(self) -> dict[str, Any]:
        data = {"chunk_key": self.chunk_key, "splits": [f.to_dict() for f in self.splits]}
        return data if self.table_rule is None else {**data, "table_rule": rule_to(self.table_rule)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CapturedTable":
        return cls(data["chunk_key"], [FinishedSplit.from_dict(f) for f in data["splits"]],
                   rule_from(data.get("table_rule")))


@dataclass
class Generation:
    """Generation N of the registry: every captured table with its chunk key and finished splits."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("registry-generation", 3)  # 2: table_rule; 3: TableRule.route

    number: int
    tables: dict[TableId, CapturedTable] = field(default_factory=dict)
    #: every table any generation up to this one captured (a table added back must be staged)
    history: set[TableId] = field(default_factory=set)
    created: str = ""
    #: the DAG run whose collect landed it ("" for generations written outside Airflow, or before this was kept)
    landed_by: str = ""

    @property
    def finished_splits(self) -> list[FinishedSplit]:
        return [f for t in sorted(self.tables) for f in self.tables[t].splits]

    @property
    def chunk_keys(self) -> dict[TableId, str]:
        return {t: c.chunk_key for t, c in self.tables.items()}

    def table_rule(self, table_id: TableId) -> TableRule | None:
        captured = self.tables.get(table_id)
        return captured.table_rule if captured is not None else None

    def to_body(self) -> dict[str, Any]:
        return {"number": self.number, "created": self.created, "landed_by": self.landed_by,
                "tables": {t.quoted: c.to_dict() for t, c in sorted(self.tables.items())},
                "history": sorted(t.quoted for t in self.history)}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "Generation":
        tables = {TableId.parse(t): CapturedTable.from_dict(c) for t, c in body["tables"].items()}
        return cls(int(body["number"]), tables, {TableId.parse(t) for t in body.get("history", [])},
                   body.get("created", ""), body.get("landed_by", ""))


@dataclass(frozen=True)
class DriftEvent:
    kind: TableEventKind
    offset: BinlogOffset
    reason: str
    noted_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "offset": self.offset.to_dict(), "reason": self.reason,
                "noted_at": self.noted_at}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DriftEvent":
        return cls(_table_event_kind(data.get("kind", TableEventKind.ALTERED.value)),
                   BinlogOffset.from_dict(data["offset"]), data["reason"], float(data.get("noted_at", 0.0)))


@dataclass
class DriftLog:
    """Per table, the events after which its sink cannot follow the binlog by itself (state/drift.py)."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("schema-drift", 3)

    tables: dict[TableId, list[DriftEvent]] = field(default_factory=dict)

    def to_body(self) -> dict[str, Any]:
        return {"tables": {t.quoted: [e.to_dict() for e in events] for t, events in sorted(self.tables.items())}}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "DriftLog":
        if version == 0 and "format" not in body:  # the first layout: the latest event per table, keyed db.table
            return cls({TableId.parse(name): [DriftEvent.from_dict(entry)] for name, entry in body.items()})
        if version == 0 and body["format"] != 2:  # before the envelope, the file said {"format": 2, ...}
            raise ProtocolError(f"unknown drift file format {body['format']!r}")
        return cls({TableId.parse(name): [DriftEvent.from_dict(e) for e in events]
                    for name, events in body["tables"].items()})


@dataclass(frozen=True)
class RememberedSchema:
    FORMAT: ClassVar[RecordFormat] = RecordFormat("table-schema", 3)  # 2: table_rule, Column.mask; 3: TableRule.route

    schema: TableSchema

    def to_body(self) -> dict[str, Any]:
        return self.schema.to_dict()

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "RememberedSchema":
        return cls(TableSchema.from_dict(body))
