"""What a chunk job hands back: from the Spark job to its task, and through XCom to collect.

The chunk task returns the record (with its chunk's label) as its XCom value; the collect task
reads every chunk's record and lands their finished splits in the next registry generation. A
cleared collect may read XCom written by an older version: values from before the envelope read
as version 0 (the same fields).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
from airflow_provider_mysqlcdc.protocol.envelope import RecordFormat


@dataclass(frozen=True)
class ChunkResult:
    FORMAT: ClassVar[RecordFormat] = RecordFormat("chunk-result", 1)

    table: str  # db.table
    finished_splits: list[FinishedSplit]
    rows: int
    binlog_events_merged: int
    seconds: float
    label: str = ""  # the chunk task's label (set by the task)

    @property
    def high_watermark(self) -> BinlogOffset:
        return max(f.high_watermark for f in self.finished_splits)

    def to_body(self) -> dict[str, Any]:
        return {"label": self.label, "table": self.table, "finished_splits": [f.to_dict() for f in self.finished_splits],
                "high_watermark": self.high_watermark.to_dict(), "rows": self.rows,
                "binlog_events_merged": self.binlog_events_merged, "seconds": self.seconds}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "ChunkResult":
        return cls(body["table"], [FinishedSplit.from_dict(f) for f in body["finished_splits"]], int(body["rows"]),
                   int(body.get("binlog_events_merged", 0)), float(body.get("seconds", 0.0)), body.get("label", ""))
