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
  the chunk job writes the rows as Parquet under ``staged/`` and records the file in the split's
  ``staged`` field; the stream replaces the range itself, after merging the binlog between the
  split's high watermark and its own position into those rows, so the sink never goes back in time.

A split marked ``stream_only`` has no rows: the table is streamed from that split's high
watermark without a snapshot (startup modes ``latest`` and ``offset``).

High watermarks are read by tasks that do not know which of the pipeline's servers they talked to;
``load`` places each among them (``servers.json``: state/servers.py), so after a failover they
compare correctly with the stream's offsets.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import uuid
from typing import Any, TypeVar

from airflow_provider_mysqlcdc.cdc.errors import ConcurrentStateChange
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
from airflow_provider_mysqlcdc.protocol.envelope import Record
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, Generation
from airflow_provider_mysqlcdc.protocol.servers import ServerHistory
from airflow_provider_mysqlcdc.state.epochs import place_split
from airflow_provider_mysqlcdc.state.generations import table_with_splits, with_splits
from airflow_provider_mysqlcdc.state.storage import StateStorage

GENERATIONS = "generations"
R = TypeVar("R")
#: progress file: the end offset of the last micro-batch a stream of the pipeline committed
STREAM_OFFSET = "stream-offset.json"
#: progress file: the stream's last micro-batch (its heartbeat)
STREAM_PROGRESS = "stream.json"
#: the stream's latest batches' lag and distance to the head (protocol/progress.py StreamHistory)
STREAM_HISTORY = "stream-history.json"
#: the servers the pipeline followed through failovers (state/servers.py)
SERVERS = "servers.json"


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
        generation = self.storage.read_record(Generation, GENERATIONS, f"{number:06d}.json")
        if generation is None:
            raise FileNotFoundError(self.storage.url(GENERATIONS, f"{number:06d}.json"))
        return with_splits(generation, functools.partial(place_split, self.servers()))

    def servers(self) -> ServerHistory:
        """The servers the pipeline has read from (empty until its first plan or stream)."""
        return self.storage.read_record(ServerHistory, SERVERS) or ServerHistory()

    def latest(self) -> Generation:
        return self.load(self.latest_number())

    def refuse_stale_plans(self, planned_on: int, run_id: str) -> None:
        """A run's plans were made against generation ``planned_on``; only generations its own collect
        landed may have come since (the collect run again). Plans made before another run landed a
        generation would undo that run's changes (bring back a table it removed, put back splits it
        re-snapshotted), so they are refused."""
        for number in range(planned_on + 1, self.latest_number() + 1):
            landed_by = self.load(number).landed_by
            if landed_by != run_id:
                raise ConcurrentStateChange(
                    f"This run planned against registry generation {planned_on} of {self.location}, and generation "
                    f"{number} has landed since, by {f'run {landed_by!r}' if landed_by else 'another writer'}: "
                    "landing this run's results would undo that one's changes. Trigger a new run (or clear this "
                    "run's plan tasks, so that it plans again against the latest generation).")

    def commit(self, tables: dict[TableId, CapturedTable], *, landed_by: str = "") -> Generation:
        """Write the next generation, unless ``tables`` equals the latest one; returns the latest.
        ``landed_by``: the DAG run whose collect lands it."""
        servers = self.servers()
        tables = {t: table_with_splits(c, functools.partial(place_split, servers)) for t, c in tables.items()}
        latest = self.latest()
        if {t: c.to_dict() for t, c in tables.items()} == {t: c.to_dict() for t, c in latest.tables.items()}:
            return latest
        number = latest.number + 1
        generation = Generation(number, dict(tables), latest.history | set(tables),
                                dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), landed_by)
        # compare-and-swap: the generation lands only where none stands yet (put-if-absent)
        if not self.storage.create_record(generation, GENERATIONS, f"{number:06d}.json", indent=1):
            raise ConcurrentStateChange(f"Generation {number} of {self.location} appeared while this one was written: "
                                        "run one DAG run of a pipeline at a time (max_active_runs=1).")
        return generation

    def needs_staging(self, table_id: TableId) -> bool:
        """True once any generation captured the table: a stream may be writing it."""
        return table_id in self.latest().history

    def staging_url(self, table_id: TableId) -> str:
        """A fresh directory for one chunk job's staged splits of ``table_id``."""
        return self.storage.url("staged", *table_id.path_segments, uuid.uuid4().hex[:12])

    def write_progress(self, name: str, record: Record) -> None:
        """Write one of the records of protocol/progress.py under ``progress/``."""
        self.storage.write_record(record, "progress", name)

    def read_progress(self, cls: type[R], name: str) -> R | None:
        """The ``cls`` record at ``progress/<name>``, None when there is none."""
        return self.storage.read_record(cls, "progress", name)

    def job_report_url(self, run_id: str, name: str) -> str:
        """The report folder of one Spark program a task runs (spark/report.py); removed after it."""
        return self.storage.url(run_folder(run_id), "spark", safe_name(name))


def safe_name(name: str) -> str:
    """``name`` as one path segment of any file system or object store."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def run_folder(run_id: str) -> str:
    """The folder of one DAG run's files (its progress, its jobs' reports)."""
    return "runs/" + safe_name(run_id)


def captured_tables(finished: list[FinishedSplit]) -> dict[TableId, CapturedTable]:
    """Tables from complete sets of finished splits (tools and tests registering a snapshot)."""
    tables: dict[TableId, CapturedTable] = {}
    for f in sorted(finished, key=lambda f: (f.split.table_id, f.split.index)):
        tables.setdefault(f.split.table_id, CapturedTable(f.split.chunk_key, [])).splits.append(f)
    return tables
