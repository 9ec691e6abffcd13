"""Records kept in a pipeline's state location (``state/`` reads and writes them).

- ``generations/NNNNNN.json``: ``Generation`` (the registry; ``state/registry.py``)
- ``progress/schema-drift.json``: ``DriftLog`` (``state/drift.py``)
- ``progress/stream-offset.json``: ``StreamOffsetProgress``, the end of the last batch committed
- ``progress/stream.json``: ``StreamBatchProgress``, the stream's last micro-batch
- ``progress/staged-released.json``: ``StagedRelease`` (``state/cleanup.py``)
- ``lease/stream-NNNNNN.json``, ``.heartbeat.json``, ``.stop.json``: ``StreamLease``, ``LeaseHeartbeat``
  and ``StopRequest``, the one stream allowed to run on the pipeline (``state/lease.py``)
- ``progress/runs/<run>/plan-<task>.json`` and ``chunk-<task>-<i>.json``: ``RunPlanProgress`` and
  ``ChunkProgress``, for "chunks done of planned" in the task log and ``bin/status``
- ``<checkpoint>/mysqlcdc-stream.json``: ``CheckpointIdentity`` (``spark/stream_job.py``)
- ``schemas/<table>.json``: ``RememberedSchema``, the last schema seen of a table (``state/schemas.py``)
- ``servers.json``: ``ServerHistory``, the servers the pipeline followed through failovers
  (``state/servers.py``)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import TableEventKind
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.source.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.source.server import gtid_sequences
from airflow_provider_mysqlcdc.protocol.envelope import (
    ProtocolError,
    RecordFormat,
)
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset


def _offset(data: dict[str, Any] | None) -> BinlogOffset | None:
    return BinlogOffset.from_dict(data) if data else None


def _table_event_kind(value: str) -> TableEventKind:
    try:
        return TableEventKind(value)
    except ValueError:
        raise ProtocolError(f"unknown table event kind {value!r} (known: {', '.join(k.value for k in TableEventKind)})"
                            ) from None


# --- the registry ----------------------------------------------------------------------------------

def split_identity(finished: FinishedSplit) -> str:
    return json.dumps(finished.to_dict(), sort_keys=True)


def stream_only_split(table_id: TableId, chunk_key: str, offset: BinlogOffset) -> FinishedSplit:
    """The whole key space 'finished' at ``offset`` with no rows: stream the table from there."""
    return FinishedSplit(SnapshotSplit(table_id, 0, chunk_key), offset, stream_only=True)


@dataclass
class CapturedTable:
    chunk_key: str
    splits: list[FinishedSplit]

    @property
    def first_high_watermark(self) -> BinlogOffset:
        """The earliest point any of its splits was read at: events after it may be missing from the sink."""
        return min(f.high_watermark for f in self.splits)

    @property
    def stream_only(self) -> bool:
        return any(f.stream_only for f in self.splits)

    def with_splits(self, change: Callable[[FinishedSplit], FinishedSplit]) -> "CapturedTable":
        """This table with ``change`` applied to every finished split."""
        return CapturedTable(self.chunk_key, [change(f) for f in self.splits])

    def to_dict(self) -> dict[str, Any]:
        return {"chunk_key": self.chunk_key, "splits": [f.to_dict() for f in self.splits]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CapturedTable":
        return cls(data["chunk_key"], [FinishedSplit.from_dict(f) for f in data["splits"]])


@dataclass
class Generation:
    """Generation N of the registry: every captured table with its chunk key and finished splits."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("registry-generation", 1)

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

    def initial_offset(self) -> BinlogOffset | None:
        """Where a stream without a checkpoint starts: the smallest high watermark."""
        return min((f.high_watermark for f in self.finished_splits), default=None)

    def with_splits(self, change: Callable[[FinishedSplit], FinishedSplit]) -> "Generation":
        """This generation with ``change`` applied to every finished split."""
        return dataclasses.replace(self, tables={t: c.with_splits(change) for t, c in self.tables.items()})

    def added_since(self, older: "Generation") -> list[FinishedSplit]:
        """Splits of this generation that ``older`` did not have (new tables, re-snapshots)."""
        added: list[FinishedSplit] = []
        for table_id, captured in sorted(self.tables.items()):
            before = older.tables.get(table_id)
            known = {split_identity(f) for f in before.splits} if before else set()
            added.extend(f for f in captured.splits if split_identity(f) not in known)
        return added

    def to_body(self) -> dict[str, Any]:
        return {"number": self.number, "created": self.created, "landed_by": self.landed_by,
                "tables": {t.quoted: c.to_dict() for t, c in sorted(self.tables.items())},
                "history": sorted(t.quoted for t in self.history)}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "Generation":
        tables = {TableId.parse(t): CapturedTable.from_dict(c) for t, c in body["tables"].items()}
        return cls(int(body["number"]), tables, {TableId.parse(t) for t in body.get("history", [])},
                   body.get("created", ""), body.get("landed_by", ""))


# --- drift -----------------------------------------------------------------------------------------

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


# --- the stream's progress -------------------------------------------------------------------------

@dataclass(frozen=True)
class StreamOffsetProgress:
    """The end of the last micro-batch a stream of the pipeline committed into ``sink_root``."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("stream-offset-progress", 1)

    offset: StreamOffset
    committed_at: float
    sink_root: str
    app_id: str
    #: the server's binlog head when it was recorded, and the binlog bytes from the batch's end to it
    #: (None: not measured, or the head lies on another server than the batch's end)
    head: BinlogOffset | None = None
    bytes_behind: int | None = None

    def to_body(self) -> dict[str, Any]:
        return {"offset": self.offset.to_spark(), "committed_at": self.committed_at, "sink_root": self.sink_root,
                "app_id": self.app_id, "head": self.head.to_dict() if self.head else None,
                "bytes_behind": self.bytes_behind}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "StreamOffsetProgress":
        return cls(StreamOffset.from_spark(body["offset"], "its offset"), float(body["committed_at"]),
                   body["sink_root"], body.get("app_id", ""), _offset(body.get("head")), body.get("bytes_behind"))


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
                   int(body["changes_in_batch"]), int(body["changes_total"]), _offset(body.get("last_change_offset")),
                   body.get("last_change_time_ms"), _offset(body.get("head_at_batch_end")),
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


# --- the stream's lease ----------------------------------------------------------------------------

@dataclass(frozen=True)
class StreamLease:
    """Lease number ``number`` of the pipeline's stream: who holds it (state/lease.py). Written once."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("stream-lease", 1)

    number: int
    token: str  # unique per holder: only the holder renews or releases it
    holder: str  # who started the stream, for people ("airflow task dag.task run ... try 2")
    host: str  # where its driver runs
    pid: int
    acquired_at: float
    ttl_s: float  # without a heartbeat for this long, the lease may be taken over
    report: str = ""  # the stream's report folder (spark/report.py), when a task started it

    def to_body(self) -> dict[str, Any]:
        return {"number": self.number, "token": self.token, "holder": self.holder, "host": self.host, "pid": self.pid,
                "acquired_at": self.acquired_at, "ttl_s": self.ttl_s, "report": self.report}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "StreamLease":
        return cls(int(body["number"]), body["token"], body["holder"], body["host"], int(body["pid"]),
                   float(body["acquired_at"]), float(body["ttl_s"]), body.get("report", ""))


@dataclass(frozen=True)
class LeaseHeartbeat:
    """The holder of a lease is alive (renewed), or let it go (released)."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("stream-lease-heartbeat", 1)

    token: str
    renewed_at: float
    released: bool = False
    app_id: str = ""  # the stream's Spark application, once it runs
    ui_url: str = ""

    def to_body(self) -> dict[str, Any]:
        return {"token": self.token, "renewed_at": self.renewed_at, "released": self.released, "app_id": self.app_id,
                "ui_url": self.ui_url}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "LeaseHeartbeat":
        return cls(body["token"], float(body["renewed_at"]), bool(body.get("released", False)),
                   body.get("app_id", ""), body.get("ui_url", ""))


@dataclass(frozen=True)
class StopRequest:
    """Someone asked the stream holding a lease to stop (state/lease.py)."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("stream-stop-request", 1)

    reason: str
    requested_at: float

    def to_body(self) -> dict[str, Any]:
        return {"reason": self.reason, "requested_at": self.requested_at}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "StopRequest":
        return cls(body["reason"], float(body["requested_at"]))


# --- a DAG run's progress --------------------------------------------------------------------------

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
        return cls(body["label"], body["table"], int(body["rows"]), _offset(body.get("high_watermark")))



# --- schemas ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RememberedSchema:
    FORMAT: ClassVar[RecordFormat] = RecordFormat("table-schema", 1)

    schema: TableSchema

    def to_body(self) -> dict[str, Any]:
        return self.schema.to_dict()

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "RememberedSchema":
        return cls(TableSchema.from_dict(body))


@dataclass(frozen=True)
class ServerEpoch:
    """A server the pipeline reads from, from the moment it followed it (state/servers.py)."""

    epoch: int
    server_id: int
    #: the GTID position the pipeline had read up to when it moved to this server (None: the first)
    since: str | None
    followed_at: str = ""


@dataclass(frozen=True)
class ServerHistory:
    """Every server of the pipeline, oldest first: its offsets are numbered by their epoch."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("server-history", 1)

    epochs: tuple[ServerEpoch, ...] = ()

    def epoch_of(self, offset: BinlogOffset) -> int:
        """The epoch of the server ``offset`` was read from, by its server id and GTID position: a
        server followed twice by the stint whose starting GTID position the offset has passed, a
        server not followed yet by the next epoch (the one it gets when the stream follows it)."""
        if offset.server_id is None or not self.epochs:
            return offset.epoch
        same = [e for e in self.epochs if e.server_id == offset.server_id]
        if not same:
            return self.epochs[-1].epoch + 1
        have = gtid_sequences(offset.gtid_set)
        passed = [e for e in same if all(have.get(d, 0) >= n for d, n in gtid_sequences(e.since).items())]
        return max(e.epoch for e in passed or same)

    def place(self, offset: BinlogOffset) -> BinlogOffset:
        epoch = self.epoch_of(offset)
        return offset if epoch == offset.epoch else offset.in_epoch(epoch)

    def place_split(self, finished: FinishedSplit) -> FinishedSplit:
        placed = self.place(finished.high_watermark)
        return finished if placed.epoch == finished.high_watermark.epoch else \
            dataclasses.replace(finished, high_watermark=placed)

    def to_body(self) -> dict[str, Any]:
        return {"epochs": [{"epoch": e.epoch, "server_id": e.server_id, "since": e.since, "followed_at": e.followed_at}
                           for e in self.epochs]}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "ServerHistory":
        return cls(tuple(ServerEpoch(int(e["epoch"]), int(e["server_id"]), e.get("since"), e.get("followed_at", ""))
                         for e in body["epochs"]))
