"""Progress records, kept in a pipeline's state location (``state/`` reads and writes them).

- ``progress/stream-offset.json``: ``StreamOffsetProgress``, the end of the last batch committed
- ``progress/stream.json``: ``StreamBatchProgress``, the stream's last micro-batch; ``progress/
  stream-history.json``: ``StreamHistory``, its latest batches' lag
- ``progress/staged-released.json``: ``StagedRelease`` (``state/cleanup.py``)
- ``progress/runs/<run>/plan-<task>.json`` and ``chunk-<task>-<i>.json``: ``RunPlanProgress`` and
  ``ChunkProgress``, for "chunks done of planned" in the task log and ``bin/status``
- ``progress/new-tables.json``: ``NewTables``, tables a table pattern matches that the stream saw
  created or renamed into their names (``state/new_tables.py``)
- ``progress/ddl-log.json``: ``DdlLog``, the DDL the stream met of each captured table and what its
  ``schema_changes`` policy did with it (``state/ddl_log.py``)
- ``<checkpoint>/mysqlcdc-stream.json``: ``CheckpointIdentity`` (``spark/stream_job.py``)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.protocol.envelope import RecordFormat
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset, optional_offset


@dataclass(frozen=True)
class StreamOffsetProgress:
    """The end of the last micro-batch a stream of the pipeline committed into ``sink_root``."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("stream-offset-progress", 2)  # 2: lag_s

    offset: StreamOffset
    #: when it was recorded: at a batch's end, or by a heartbeat of a stream no batch finished for
    committed_at: float
    sink_root: str
    app_id: str
    #: the server's binlog head when it was recorded, and the binlog bytes from the batch's end to it
    #: (None: not measured, or the head lies on another server than the batch's end)
    head: BinlogOffset | None = None
    bytes_behind: int | None = None
    #: the event-time lag then (None: not known; 0 for a stream caught up with the head)
    lag_s: float | None = None

    def to_body(self) -> dict[str, Any]:
        return {"offset": self.offset.to_spark(), "committed_at": self.committed_at, "sink_root": self.sink_root,
                "app_id": self.app_id, "head": self.head.to_dict() if self.head else None,
                "bytes_behind": self.bytes_behind, "lag_s": self.lag_s}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "StreamOffsetProgress":
        lag = body.get("lag_s")
        return cls(StreamOffset.from_spark(body["offset"], "its offset"), float(body["committed_at"]),
                   body["sink_root"], body.get("app_id", ""), optional_offset(body.get("head")), body.get("bytes_behind"),
                   None if lag is None else float(lag))


@dataclass(frozen=True)
class StreamBatchProgress:
    """The stream's last micro-batch, as its heartbeat (``bin/status``)."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("stream-batch-progress", 1)

    app_id: str
    batch: int
    finished_at: float
    changes_in_batch: int
    changes_total: int
    last_change_offset: BinlogOffset | None
    last_change_time_ms: int | None
    head_at_batch_end: BinlogOffset | None
    tables: list[str]
    #: per table (quoted), what ``changes_total`` counts of it (tables only truncated or filled: 0)
    table_changes: dict[str, int] = field(default_factory=dict)
    #: when the stream process whose counts these are started (a restarted stream counts from 0)
    started_at: float = 0.0
    #: the registry generation the batch applied
    generation: int = 0
    #: how long the batch took, reading the binlog and applying its changes
    batch_seconds: float = 0.0
    #: seconds from the newest change the batch applied being written on the source to the batch's end
    lag_s: float = 0.0

    def to_body(self) -> dict[str, Any]:
        return {"app_id": self.app_id, "batch": self.batch, "finished_at": self.finished_at,
                "changes_in_batch": self.changes_in_batch, "changes_total": self.changes_total,
                "last_change_offset": self.last_change_offset.to_dict() if self.last_change_offset else None,
                "last_change_time_ms": self.last_change_time_ms,
                "head_at_batch_end": self.head_at_batch_end.to_dict() if self.head_at_batch_end else None,
                "tables": self.tables, "table_changes": self.table_changes, "started_at": self.started_at,
                "generation": self.generation, "batch_seconds": self.batch_seconds, "lag_s": self.lag_s}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "StreamBatchProgress":
        return cls(body.get("app_id", ""), int(body["batch"]), float(body["finished_at"]),
                   int(body["changes_in_batch"]), int(body["changes_total"]), optional_offset(body.get("last_change_offset")),
                   body.get("last_change_time_ms"), optional_offset(body.get("head_at_batch_end")),
                   list(body.get("tables", [])),
                   {str(t): int(n) for t, n in (body.get("table_changes") or {}).items()},
                   float(body.get("started_at", 0.0)), int(body.get("generation", 0)),
                   float(body.get("batch_seconds", 0.0)), float(body.get("lag_s", 0.0)))


@dataclass(frozen=True)
class HistoryPoint:
    """The stream's figures at the end of one of its batches (a point of the UI's lag chart)."""

    at: float
    lag_s: float
    bytes_behind: int | None
    changes: int

    def to_list(self) -> list[Any]:
        return [self.at, self.lag_s, self.bytes_behind, self.changes]


@dataclass(frozen=True)
class StreamHistory:
    """The stream's latest batches' figures, oldest first (at most ``MAX_POINTS``)."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("stream-history", 1)
    MAX_POINTS: ClassVar[int] = 360

    points: tuple[HistoryPoint, ...] = ()

    def with_point(self, point: HistoryPoint) -> "StreamHistory":
        return StreamHistory((*self.points, point)[-self.MAX_POINTS:])

    def to_body(self) -> dict[str, Any]:
        return {"points": [p.to_list() for p in self.points]}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "StreamHistory":
        return cls(tuple(HistoryPoint(float(at), float(lag), None if behind is None else int(behind), int(changes))
                         for at, lag, behind, changes in body["points"]))


@dataclass(frozen=True)
class StagedRelease:
    """Staged split files of generations up to ``through`` were deleted (state/cleanup.py)."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("staged-release", 1)

    through: int
    released_at: float

    def to_body(self) -> dict[str, Any]:
        return {"through": self.through, "released_at": self.released_at}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "StagedRelease":
        return cls(int(body["through"]), float(body.get("released_at", 0.0)))


@dataclass(frozen=True)
class CheckpointIdentity:
    """Kept inside the stream's Spark checkpoint: the app id of its Delta transactions, and where its
    batch 0 starts (the same if Spark runs batch 0 again)."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("checkpoint-identity", 1)

    app_id: str
    initial_offset: StreamOffset | None
    created: float

    def to_body(self) -> dict[str, Any]:
        initial = self.initial_offset.to_spark() if self.initial_offset else None
        return {"app_id": self.app_id, "initial_offset": initial, "created": self.created}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "CheckpointIdentity":
        initial = body.get("initial_offset")
        return cls(body["app_id"], StreamOffset.from_spark(initial, "its initial offset") if initial else None,
                   float(body.get("created", 0.0)))


@dataclass(frozen=True)
class RunPlanProgress:
    """What one plan task of a run decided: per table its action, and the tables of its chunks."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("run-plan", 1)

    chunks: int
    planned_at: float
    actions: dict[str, str]  # table (db.table) -> PlanAction value
    chunk_tables: list[str]

    def to_body(self) -> dict[str, Any]:
        return {"chunks": self.chunks, "planned_at": self.planned_at, "tables": self.actions,
                "chunk_tables": self.chunk_tables}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "RunPlanProgress":
        return cls(int(body["chunks"]), float(body.get("planned_at", 0.0)), dict(body.get("tables", {})),
                   list(body.get("chunk_tables", [])))


@dataclass(frozen=True)
class ChunkProgress:
    """One chunk task of a run is done."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("run-chunk", 1)

    label: str
    table: str
    rows: int
    high_watermark: BinlogOffset | None

    def to_body(self) -> dict[str, Any]:
        return {"label": self.label, "table": self.table, "rows": self.rows,
                "high_watermark": self.high_watermark.to_dict() if self.high_watermark else None}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "ChunkProgress":
        return cls(body["label"], body["table"], int(body["rows"]), optional_offset(body.get("high_watermark")))


@dataclass(frozen=True)
class NewTable:
    """A table that is not captured, seen by the stream taking a name a table pattern matches."""

    table: str  # quoted
    offset: BinlogOffset
    statement: str
    seen_at: float


@dataclass(frozen=True)
class NewTables:
    """The latest tables the stream saw start to match a pattern (state/new_tables.py), oldest first."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("new-tables", 1)

    tables: tuple[NewTable, ...] = ()

    def to_body(self) -> dict[str, Any]:
        return {"tables": [{"table": t.table, "offset": t.offset.to_dict(), "statement": t.statement,
                            "seen_at": t.seen_at} for t in self.tables]}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "NewTables":
        return cls(tuple(NewTable(t["table"], BinlogOffset.from_dict(t["offset"]), t["statement"], float(t["seen_at"]))
                         for t in body["tables"]))


@dataclass(frozen=True)
class DdlMet:
    """A DDL statement of a captured table the stream met, and what its policy did with it."""

    table: str  # quoted
    offset: BinlogOffset
    statement: str
    policy: str  # the stream's schema_changes
    outcome: str
    met_at: float


@dataclass(frozen=True)
class DdlLog:
    """The latest DDL statements the stream met of captured tables (state/ddl_log.py), oldest first."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("ddl-log", 1)

    entries: tuple[DdlMet, ...] = ()

    def to_body(self) -> dict[str, Any]:
        return {"entries": [{"table": e.table, "offset": e.offset.to_dict(), "statement": e.statement,
                             "policy": e.policy, "outcome": e.outcome, "met_at": e.met_at} for e in self.entries]}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "DdlLog":
        return cls(tuple(DdlMet(e["table"], BinlogOffset.from_dict(e["offset"]), e["statement"], e["policy"],
                                e["outcome"], float(e["met_at"])) for e in body["entries"]))
