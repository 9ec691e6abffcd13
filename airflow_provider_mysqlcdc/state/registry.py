"""The registry of captured tables, as a sequence of immutable numbered generations.

Generation N names every captured table with its chunk key and its finished splits, whose key
ranges cover the whole table. The stream's offsets carry the generation they were planned with, so
a micro-batch replayed after a crash sees exactly the tables and splits it saw the first time; a
newer generation is picked up at the next micro-batch boundary, where the splits it adds are
*activated* (spark/binlog_source.py).

A finished split's rows reach the sink in one of two ways:

- **direct**: the chunk job replaces the split's key range itself. Only for a table that no
  generation has ever held: no stream writes it, so nothing can interleave with the replace.
- **staged**: for a table a stream already writes (re-snapshot, cleared chunk, table added back),
  the chunk job writes the rows as Parquet under ``staged/`` and records the file in
  ``extra["staged"]``; the stream replaces the range itself, after merging the binlog between the
  split's high watermark and its own position into those rows, so the sink never goes back in time.

A split with ``extra["stream_only"]`` has no rows: the table is streamed from that split's high
watermark without a snapshot (startup modes ``latest`` and ``offset``).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import CdcError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.source.schema import TableId
from airflow_provider_mysqlcdc.state.storage import StateStorage

GENERATIONS = "generations"
#: progress file: the end offset of the last micro-batch a stream of the pipeline committed
STREAM_OFFSET = "stream-offset.json"


class ConcurrentStateChange(CdcError):
    """Two writers raced for the same generation number."""


def split_identity(finished: FinishedSplit) -> str:
    return json.dumps(finished.to_dict(), sort_keys=True)


def stream_only_split(table_id: TableId, chunk_key: str, offset: BinlogOffset) -> FinishedSplit:
    """The whole key space 'finished' at ``offset`` with no rows: stream the table from there."""
    return FinishedSplit(SnapshotSplit(table_id, 0, chunk_key), offset, extra={"stream_only": True})


@dataclass
class CapturedTable:
    chunk_key: str
    splits: list[FinishedSplit]

    @property
    def first_high_watermark(self) -> BinlogOffset:
        """The earliest point any of its splits was read at: events after it may be missing from the sink."""
        return min(f.high_watermark for f in self.splits)

    def to_dict(self) -> dict[str, Any]:
        return {"chunk_key": self.chunk_key, "splits": [f.to_dict() for f in self.splits]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CapturedTable":
        return cls(data["chunk_key"], [FinishedSplit.from_dict(f) for f in data["splits"]])


@dataclass
class Generation:
    number: int
    tables: dict[TableId, CapturedTable] = field(default_factory=dict)
    #: every table any generation up to this one captured (a table added back must be staged)
    history: set[TableId] = field(default_factory=set)
    created: str = ""

    @property
    def finished_splits(self) -> list[FinishedSplit]:
        return [f for t in sorted(self.tables) for f in self.tables[t].splits]

    @property
    def chunk_keys(self) -> dict[TableId, str]:
        return {t: c.chunk_key for t, c in self.tables.items()}

    def initial_offset(self) -> BinlogOffset | None:
        """Where a stream without a checkpoint starts: the smallest high watermark."""
        return min((f.high_watermark for f in self.finished_splits), default=None)

    def added_since(self, older: "Generation") -> list[FinishedSplit]:
        """Splits of this generation that ``older`` did not have (new tables, re-snapshots)."""
        added = []
        for table_id, captured in sorted(self.tables.items()):
            before = older.tables.get(table_id)
            known = {split_identity(f) for f in before.splits} if before else set()
            added.extend(f for f in captured.splits if split_identity(f) not in known)
        return added

    def to_dict(self) -> dict[str, Any]:
        return {"number": self.number, "created": self.created,
                "tables": {t.quoted: c.to_dict() for t, c in sorted(self.tables.items())},
                "history": sorted(t.quoted for t in self.history)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Generation":
        return cls(int(data["number"]), {TableId.parse(t): CapturedTable.from_dict(c) for t, c in data["tables"].items()},
                   {TableId.parse(t) for t in data.get("history", [])}, data.get("created", ""))


class PipelineState:
    """One pipeline's state location: ``generations/``, ``staged/``, ``checkpoint/``, ``progress/``."""

    def __init__(self, location: str, storage_options: dict[str, Any] | None = None):
        self.location = location.rstrip("/")
        self.storage = StateStorage(self.location, storage_options)

    @property
    def checkpoint(self) -> str:
        """Spark's checkpoint of the stream (any location Spark can write)."""
        return self.storage.url("checkpoint")

    def latest_number(self) -> int:
        numbers = [int(n.split(".")[0]) for n in self.storage.list_names(GENERATIONS) if n.endswith(".json")]
        return max(numbers, default=0)

    def load(self, number: int) -> Generation:
        if number == 0:
            return Generation(0)
        return Generation.from_dict(json.loads(self.storage.read_text(GENERATIONS, f"{number:06d}.json")))

    def latest(self) -> Generation:
        return self.load(self.latest_number())

    def commit(self, tables: dict[TableId, CapturedTable]) -> Generation:
        """Write the next generation, unless ``tables`` equals the latest one; returns the latest."""
        latest = self.latest()
        if {t: c.to_dict() for t, c in tables.items()} == {t: c.to_dict() for t, c in latest.tables.items()}:
            return latest
        number = latest.number + 1
        if self.storage.exists(GENERATIONS, f"{number:06d}.json"):
            raise ConcurrentStateChange(f"Generation {number} of {self.location} appeared while this one was written: "
                                        "run one DAG run of a pipeline at a time (max_active_runs=1).")
        generation = Generation(number, dict(tables), latest.history | set(tables),
                                dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
        self.storage.write_text(json.dumps(generation.to_dict(), indent=1), GENERATIONS, f"{number:06d}.json")
        return generation

    def needs_staging(self, table_id: TableId) -> bool:
        """True once any generation captured the table: a stream may be writing it."""
        return table_id in self.latest().history

    def staging_url(self, table_id: TableId) -> str:
        """A fresh directory for one chunk job's staged splits of ``table_id``."""
        return self.storage.url("staged", table_id.database, table_id.table, uuid.uuid4().hex[:12])

    def write_progress(self, name: str, data: dict[str, Any]) -> None:
        self.storage.write_text(json.dumps(data, default=str), "progress", name)

    def read_progress(self, name: str) -> dict[str, Any] | None:
        return json.loads(self.storage.read_text("progress", name)) if self.storage.exists("progress", name) else None


def captured_tables(finished: list[FinishedSplit]) -> dict[TableId, CapturedTable]:
    """Tables from complete sets of finished splits (tools and tests registering a snapshot)."""
    tables: dict[TableId, CapturedTable] = {}
    for f in sorted(finished, key=lambda f: (f.split.table_id, f.split.index)):
        tables.setdefault(f.split.table_id, CapturedTable(f.split.chunk_key, [])).splits.append(f)
    return tables
