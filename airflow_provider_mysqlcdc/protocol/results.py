"""What jobs and tasks hand back: a chunk job's result (from the Spark job to its task, and through
XCom to collect), what collect landed, and what a stream run did.

The chunk task returns the record (with its chunk's label) as its XCom value; the collect task
reads every chunk's record and lands their finished splits in the next registry generation. A
cleared collect may read XCom written by an older version: values from before the envelope read
as version 0 (the same fields).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
from airflow_provider_mysqlcdc.protocol.envelope import RecordFormat
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset


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
        return {"label": self.label, "table": self.table,
                "finished_splits": [f.to_dict() for f in self.finished_splits],
                "high_watermark": self.high_watermark.to_dict(), "rows": self.rows,
                "binlog_events_merged": self.binlog_events_merged, "seconds": self.seconds}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "ChunkResult":
        return cls(body["table"], [FinishedSplit.from_dict(f) for f in body["finished_splits"]], int(body["rows"]),
                   int(body.get("binlog_events_merged", 0)), float(body.get("seconds", 0.0)), body.get("label", ""))


@dataclass(frozen=True)
class CollectResult:
    """What the collect task landed: its XCom value, for the tasks and DAGs downstream."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("collect-result", 1)

    state: str  # the pipeline's state location
    generation: int  # the registry generation now latest
    tables: list[str]  # every captured table (db.table)
    splits: int
    changed_splits: int  # splits new or replaced by this run
    removed: list[str]  # tables this run stopped capturing
    start_offset: BinlogOffset | None  # where a stream without a checkpoint would start
    left_out: list[str] = field(default_factory=list)  # tables whose chunk tasks failed, left as registered

    def to_body(self) -> dict[str, Any]:
        return {"state": self.state, "generation": self.generation, "tables": self.tables, "splits": self.splits,
                "changed_splits": self.changed_splits, "removed": self.removed,
                "start_offset": self.start_offset.to_dict() if self.start_offset else None, "left_out": self.left_out}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "CollectResult":
        start = body.get("start_offset")
        return cls(body["state"], int(body["generation"]), list(body["tables"]), int(body["splits"]),
                   int(body["changed_splits"]), list(body["removed"]), BinlogOffset.from_dict(start) if start else None,
                   list(body.get("left_out", [])))


@dataclass(frozen=True)
class StreamResult:
    """What a stream job run did: the stream task's XCom value."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("stream-result", 1)

    mode: str  # StreamMode, or "skip" (the task ran no stream)
    changes_applied: int = 0
    app_id: str = ""
    streaming_seconds: float = 0.0
    last_batch: int | None = None
    end_offset: StreamOffset | None = None
    #: per table (db.table) it changed, the rows it merged or wrote (0: truncated or filled only)
    table_changes: dict[str, int] = field(default_factory=dict)

    def to_body(self) -> dict[str, Any]:
        return {"mode": self.mode, "changes_applied": self.changes_applied, "app_id": self.app_id,
                "streaming_seconds": self.streaming_seconds, "last_batch": self.last_batch,
                "end_offset": self.end_offset.to_spark() if self.end_offset else None,
                "table_changes": self.table_changes}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "StreamResult":
        end = body.get("end_offset")
        return cls(body["mode"], int(body.get("changes_applied", 0)), body.get("app_id", ""),
                   float(body.get("streaming_seconds", 0.0)), body.get("last_batch"),
                   StreamOffset.from_spark(end, "its end offset") if end else None,
                   {str(t): int(n) for t, n in (body.get("table_changes") or {}).items()})


@dataclass(frozen=True)
class DriverInfo:
    """Where a Spark job's driver runs: written to its report folder once its session is up."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("driver-info", 1)

    app_id: str
    ui_url: str  # "" when the Spark UI is off
    host: str
    pid: int  # the Python driver's process id on ``host``

    def to_body(self) -> dict[str, Any]:
        return {"app_id": self.app_id, "ui_url": self.ui_url, "host": self.host, "pid": self.pid}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "DriverInfo":
        return cls(body["app_id"], body.get("ui_url") or "", body["host"], int(body["pid"]))


@dataclass(frozen=True)
class DriverLog:
    """Log lines of a Spark job's driver, in order: one numbered file per flush of its report folder."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("driver-log", 1)

    lines: list[str]

    def to_body(self) -> dict[str, Any]:
        return {"lines": self.lines}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "DriverLog":
        return cls([str(line) for line in body["lines"]])


@dataclass(frozen=True)
class JobFailure:
    """Why a Spark job failed, in its own words (the caller raises it instead of a JVM log tail)."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("job-failure", 1)

    type: str
    message: str

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"

    def to_body(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "JobFailure":
        return cls(str(body["type"]), str(body["message"]))


class StreamPhase(str, Enum):
    """Where a detached stream is (launch/supervision.py)."""

    STARTING = "starting"  # submitted; its lease not taken yet
    RUNNING = "running"  # holds the pipeline's lease and sends heartbeats
    FINISHED = "finished"  # ended with a result (stopped on request, or an available-now run done)
    FAILED = "failed"  # ended with its own error
    LOST = "lost"  # gone without a word: no heartbeat, driver dead, or its lease taken over


@dataclass(frozen=True)
class StreamStatus:
    """A detached stream's state, as its trigger reports it to the task (``execute_complete``)."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("stream-status", 1)

    phase: StreamPhase
    message: str = ""
    result: dict[str, Any] | None = None  # the stream's StreamResult record once FINISHED

    def to_body(self) -> dict[str, Any]:
        return {"phase": self.phase.value, "message": self.message, "result": self.result}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "StreamStatus":
        return cls(StreamPhase(body["phase"]), body.get("message", ""), body.get("result"))


@dataclass(frozen=True)
class DetachedStreamRef:
    """A detached stream as its task keeps it (in the task state store, for a retry to reconnect):
    its report folder, and when it was submitted."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("detached-stream", 1)

    report: str
    submitted_at: float

    def to_body(self) -> dict[str, Any]:
        return {"report": self.report, "submitted_at": self.submitted_at}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "DetachedStreamRef":
        return cls(body["report"], float(body["submitted_at"]))
