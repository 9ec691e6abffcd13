"""What a task asks a Spark job to do: the job file a chunk task or the stream task writes, and the
Spark driver reads (``spark/jobs/``). No secret is ever in it: the source's credentials travel in a
private file of their own (cdc/source/connection.py).

A job file is read by the provider installed where the Spark driver runs, which may be another
version than the Airflow worker's (a cluster image): a newer job file is refused with the fix
rather than half understood.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.records import ON_BINLOG_PURGED
from airflow_provider_mysqlcdc.cdc.model.rules import TableRule, rule_from, rule_to
from airflow_provider_mysqlcdc.cdc.model.split import SnapshotSplit
from airflow_provider_mysqlcdc.cdc.source.connection import parse_server_id_range
from airflow_provider_mysqlcdc.cdc.source.selection import TableSelection
from airflow_provider_mysqlcdc.protocol.actions import StreamMode
from airflow_provider_mysqlcdc.protocol.envelope import RecordFormat, decode, encode
from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy
from airflow_provider_mysqlcdc.protocol.servers import ServerHistory
from airflow_provider_mysqlcdc.protocol.sinks import DEFAULT_FORMAT, DEFAULT_NAMESPACE, SinkSpec

#: ``StreamJob.schema_changes``, as Flink CDC's ``schema.change.behavior`` names them (its
#: ``exception`` is ``fail`` here): what the stream does with a captured table's DDL
#: (stream/schema_changes.py, docs/events-and-types.md)
SCHEMA_CHANGE_POLICIES = ("evolve", "lenient", "ignore", "fail")
#: the policies under which a column change the sink cannot follow exactly is drift (a re-snapshot)
FOLLOWS_COLUMNS = ("evolve", "fail")


#: ``ChunkJob.snapshot_consistency``: "exactly-once" replays each split's binlog window over its rows
#: (they are exact as of its high watermark); "at-least-once" skips that and leaves the split's
#: changes from its low watermark on to the stream (Flink CDC's ``scan.incremental.snapshot.backfill.skip``;
#: docs/cdc-semantics.md)
SNAPSHOT_CONSISTENCIES = ("exactly-once", "at-least-once")


def check_snapshot_consistency(consistency: str) -> str:
    if consistency not in SNAPSHOT_CONSISTENCIES:
        raise ConfigurationError(f"snapshot_consistency must be one of {', '.join(SNAPSHOT_CONSISTENCIES)}, got "
                                 f"{consistency!r} (docs/cdc-semantics.md says what each guarantees).")
    return consistency


def check_heartbeat(interval_s: float, query: str) -> None:
    """A heartbeat's settings, refused before anything runs when they cannot be right."""
    if interval_s < 0:
        raise ConfigurationError(f"heartbeat_interval_s must be 0 (no heartbeat) or a positive number of seconds, "
                                 f"got {interval_s}.")
    if query and not interval_s:
        raise ConfigurationError("heartbeat_query runs every heartbeat_interval_s, which is 0: give an interval, "
                                 "e.g. heartbeat_interval_s=30.")
    if query.strip().rstrip(";").count(";"):
        raise ConfigurationError(f"heartbeat_query must be one statement, got {query!r}.")


def check_schema_change_policy(policy: str) -> str:
    if policy not in SCHEMA_CHANGE_POLICIES:
        raise ConfigurationError(f"schema_changes must be one of {', '.join(SCHEMA_CHANGE_POLICIES)}, got {policy!r} "
                                 "(docs/events-and-types.md says what each does).")
    return policy


def check_sink(sink: object) -> None:
    if not isinstance(sink, SinkSpec):
        raise ConfigurationError(f"a job's sink must be a SinkSpec (protocol/sinks.py), got {sink!r}.")


class _JobFile:
    FORMAT: ClassVar[RecordFormat]

    def to_body(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> Any:
        return cls(**body)

    def to_json(self) -> str:
        return json.dumps(encode(self))

    @classmethod
    def from_json(cls, text: str) -> Any:
        return decode(cls, json.loads(text), f"the {cls.FORMAT.kind} file")


@dataclass
class ChunkJob(_JobFile):
    """One spark-submit of the chunk job (spark/chunk_job.py): read ``splits`` of ``table``."""

    #: 2: table_rule; 3: snapshot_consistency; 4: TableRule.route; 5: sink_format, iceberg_namespace;
    #: 6: sink (the pipeline's SinkSpec) in place of sink_root, sink_format and iceberg_namespace
    FORMAT: ClassVar[RecordFormat] = RecordFormat("chunk-job", 6)

    table: str  # db.table
    splits: list[SnapshotSplit]
    sink: SinkSpec  # which sink the rows go to (protocol/sinks.py)
    partitions_per_split: int = 0  # 0: Spark's default parallelism
    server_id_range: tuple[int, int] | None = None  # replica ids the job's binlog connections use
    stage_to: str | None = None  # stage the rows here for the stream instead of writing the sink
    retry_budget_s: float = 300.0  # a source fault lasting longer fails the job (cdc/source/retry.py)
    #: the servers the pipeline followed: the job's watermarks are placed among them (state/servers.py)
    servers: ServerHistory = ServerHistory()
    #: which columns are read and how they are masked (cdc/source/rules.py); None: all, as they are
    table_rule: TableRule | None = None
    #: SNAPSHOT_CONSISTENCIES: "at-least-once" positions each split at its low watermark, with no window
    snapshot_consistency: str = "exactly-once"

    def __post_init__(self) -> None:
        check_sink(self.sink)
        check_snapshot_consistency(self.snapshot_consistency)

    @property
    def replays_windows(self) -> bool:
        """Whether each split's binlog window is merged into its rows (exactly-once)."""
        return self.snapshot_consistency == "exactly-once"

    def to_body(self) -> dict[str, Any]:
        return {**super().to_body(), "splits": [s.to_dict() for s in self.splits], "servers": self.servers.to_body(),
                "table_rule": rule_to(self.table_rule), "sink": self.sink.to_body()}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "ChunkJob":
        ids = body.get("server_id_range")
        servers = ServerHistory.from_body(body["servers"], 1) if body.get("servers") else ServerHistory()
        body, sink = sink_of(body, version < 6)
        return cls(**{**body, "splits": [SnapshotSplit.from_dict(s) for s in body["splits"]],
                      "server_id_range": tuple(ids) if ids else None, "servers": servers,
                      "table_rule": rule_from(body.get("table_rule")), "sink": sink})


#: the stream's engines (``StreamJob.stream_engine``)
STRUCTURED_STREAMING, DRIVER = "structured-streaming", "driver"
STREAM_ENGINES = (STRUCTURED_STREAMING, DRIVER)


def stream_engine_of(chosen: str | None, *, spark_connect: bool) -> str:
    """The engine a stream runs on: the one chosen, else the driver loop (one long-lived reader beside
    the merges, no Spark job per batch), but on a Spark Connect session Structured Streaming, whose
    batches run on the server (the driver loop would read and merge in the Airflow worker)."""
    if chosen is not None:
        return chosen
    return STRUCTURED_STREAMING if spark_connect else DRIVER


@dataclass
class StreamJob(_JobFile):
    """One spark-submit of the stream job (spark/stream_job.py)."""

    #: 2: holder, report, lease_ttl_s; 3: cluster_after_files; 4: maintenance_every_s, vacuum_retention_s;
    #: 5: table_patterns, exclude_tables, schema_changes; 6: heartbeat_interval_s, heartbeat_query; 7:
    #: sink_format, iceberg_namespace (an older file reads with the defaults); 8: sink (the pipeline's
    #: SinkSpec) in place of sink_root, sink_format and iceberg_namespace; 9: stream_engine
    FORMAT: ClassVar[RecordFormat] = RecordFormat("stream-job", 9)

    state: str  # the pipeline's state location (registry, staged splits, progress)
    sink: SinkSpec  # which sink the changes go to (protocol/sinks.py)
    checkpoint: str = ""  # default: <state>/checkpoint, or a local folder for a state on an object store
    mode: str = StreamMode.AVAILABLE_NOW.value
    trigger_interval_s: float = 1.0
    server_id_range: str = ""  # replica ids of its binlog connections, "low-high" (empty: the default range)
    app_id: str = ""  # default: the checkpoint's identity (a new checkpoint gets a new one)
    changelog: bool = False  # also append every change to <table>__changelog
    decode_pieces: int = 2  # a large micro-batch range is decoded by this many tasks in parallel
    retry_budget_s: float = 300.0  # a source fault lasting longer fails the stream (cdc/source/retry.py)
    #: binlog the stream needs was purged: "fail" (with the way out), or "resnapshot": record exactly
    #: the tables that needed it (frozen meanwhile), which the next DAG run re-snapshots
    on_binlog_purged: str = "fail"
    #: a micro-batch ends at the first transaction end after this much binlog (0: no limit); a larger
    #: transaction makes a batch of its own
    max_batch_bytes: int = 128 << 20
    max_batch_events: int = 0  # the same in binlog events (0: no limit)
    #: what a decoding task sends through Spark to the driver; the rest goes through spill files
    inline_bytes: int = 32 << 20
    #: changes held and merged at once: a batch with more (one huge transaction) is merged in pieces of
    #: this many, each one commit recording its position (sinks/writer.py)
    max_apply_changes: int = 100_000
    #: once the merges have left this many data files of a table to rewrite (files whose key ranges
    #: overlap, runs of small ones), the stream clusters them by the chunk key between two batches
    #: (sinks/clustering.py), so merges keep reading few files (0: never)
    cluster_after_files: int = 16
    #: the stream maintains its tables every this many seconds, between two batches: compaction,
    #: checkpoint, and vacuum with ``vacuum_retention_s`` (sinks/delta/maintenance.py; 0: only when a
    #: maintenance task asks)
    maintenance_every_s: float = 0.0
    vacuum_retention_s: float | None = None  # None: its own maintenance does not vacuum
    #: who starts the stream, named by the pipeline's lease (state/lease.py) to a second stream it refuses
    holder: str = ""
    report: str = ""  # its report folder (spark/report.py), in its lease: how a detached stream is found
    #: a stream sending no lease heartbeat for this long may be taken over (state/lease.py)
    lease_ttl_s: float = 60.0
    #: the pipeline's table patterns and exclusions (cdc/source/selection.py): a table that is not
    #: captured and starts to match is recorded for the next run (state/new_tables.py)
    table_patterns: list[str] = field(default_factory=list)
    exclude_tables: list[str] = field(default_factory=list)
    #: what a DDL statement of a captured table does (SCHEMA_CHANGE_POLICIES): "evolve" follows it as
    #: docs/events-and-types.md says; "fail" stops the stream before any of it is applied
    schema_changes: str = "evolve"
    #: a running stream that finished no batch for this long records its position anyway, measured
    #: against the server's head (lag and bytes behind stay true while the source is quiet), and runs
    #: ``heartbeat_query`` on the source (0: never; stream/heartbeat.py)
    heartbeat_interval_s: float = 30.0
    #: a statement the stream runs on the source every ``heartbeat_interval_s`` while no batch
    #: finishes (e.g. an upsert into a heartbeat table), so a source that writes nothing else still
    #: moves the binlog on; "" for none (Debezium's heartbeat.action.query)
    heartbeat_query: str = ""
    #: who runs the batches (STREAM_ENGINES): Spark's Structured Streaming, a micro-batch per batch
    #: (spark/stream_job.py), or the driver itself, reading and applying each batch without a Spark
    #: job (stream/loop.py); None: ``stream_engine_of`` decides (the driver, but on Spark Connect)
    stream_engine: str | None = None

    def __post_init__(self) -> None:
        check_sink(self.sink)
        if self.stream_engine is not None and self.stream_engine not in STREAM_ENGINES:
            raise ConfigurationError(f"stream_engine must be one of {', '.join(STREAM_ENGINES)}, got "
                                     f"{self.stream_engine!r}.")
        check_schema_change_policy(self.schema_changes)
        TableSelection.parse(self.table_patterns, self.exclude_tables)  # a malformed entry is refused here
        if self.lease_ttl_s <= 0:
            raise ConfigurationError(f"lease_ttl_s must be a positive number of seconds, got {self.lease_ttl_s}.")
        if self.mode not in set(StreamMode):
            raise ConfigurationError(f"stream mode must be one of {', '.join(StreamMode)}, got {self.mode!r}.")
        if self.on_binlog_purged not in ON_BINLOG_PURGED:
            raise ConfigurationError(f"on_binlog_purged must be one of {', '.join(ON_BINLOG_PURGED)}, got "
                                     f"{self.on_binlog_purged!r}.")
        for name in ("max_batch_bytes", "max_batch_events", "inline_bytes"):
            if getattr(self, name) < 0:
                raise ConfigurationError(f"{name} must be 0 (no limit) or a positive number of bytes/events, got "
                                         f"{getattr(self, name)}.")
        parse_server_id_range(self.server_id_range)  # refused here, before any job starts
        if self.cluster_after_files < 0:
            raise ConfigurationError(f"cluster_after_files must be 0 (never) or a positive number of files, got "
                                     f"{self.cluster_after_files}.")
        if self.maintenance_every_s < 0:
            raise ConfigurationError(f"maintenance_every_s must be 0 (only on request) or a positive number of seconds, "
                                     f"got {self.maintenance_every_s}.")
        MaintenancePolicy(vacuum_retention_s=self.vacuum_retention_s)  # refuses a negative retention
        check_heartbeat(self.heartbeat_interval_s, self.heartbeat_query)
        if self.max_apply_changes < 1:
            raise ConfigurationError(f"max_apply_changes must be a positive number, got {self.max_apply_changes}.")
        if not self.checkpoint:
            self.checkpoint = default_checkpoint(self.state)


    def to_body(self) -> dict[str, Any]:
        return {**super().to_body(), "sink": self.sink.to_body()}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "StreamJob":
        body, sink = sink_of(body, version < 8)
        return cls(**{**body, "sink": sink})


def sink_of(body: dict[str, Any], loose: bool) -> tuple[dict[str, Any], SinkSpec]:
    """A job file's body without its sink, and its sink: the ``sink`` record, or (``loose``: written
    before the SinkSpec) the ``sink_root``, ``sink_format`` and ``iceberg_namespace`` it had instead."""
    body = dict(body)
    if not loose:
        return body, SinkSpec.from_body(body.pop("sink"), SinkSpec.FORMAT.version)
    return body, SinkSpec(body.pop("sink_root"), body.pop("sink_format", DEFAULT_FORMAT),
                          body.pop("iceberg_namespace", DEFAULT_NAMESPACE))


#: the file systems Spark writes to by itself; an object store needs Hadoop jars (S3A, GCS, ABFS) we do not ship
HADOOP_SCHEMES = ("", "file", "hdfs", "viewfs")


def default_checkpoint(state: str) -> str:
    """Where the stream's Spark checkpoint lives when the job names no place: ``<state>/checkpoint``
    (state/registry.py PipelineState.checkpoint) when Spark can write there, else a folder of the
    driver's machine, one per state location. Losing it is safe: a stream whose checkpoint is new
    resumes from the positions the state location and the sink record (spark/stream_job.py)."""
    scheme = state.split("://", 1)[0].lower() if "://" in state else ""
    if scheme in HADOOP_SCHEMES:
        return f"{state.rstrip('/')}/checkpoint"
    digest = hashlib.sha1(state.rstrip("/").encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), "mysqlcdc-checkpoints", digest)
