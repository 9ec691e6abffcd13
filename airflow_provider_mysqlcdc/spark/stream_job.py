"""The stream job: Structured Streaming over the binlog source, merged into the sink per micro-batch.

Exactly once: Spark's checkpoint records each batch's offsets before it runs; ``foreachBatch``
merges the batch into every table in one commit per table, recorded under ``(app_id, version)``,
so a batch replayed after a crash (kill -9 included) skips the tables it already reached.
``available-now`` catches up to the binlog head as of start and exits; ``continuous`` runs
micro-batches every ``trigger_interval_s`` until stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import time
from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, SchemaChangeEvent
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.schema import TableId, load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.sinks.delta import DeltaSink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_change_batch
from airflow_provider_mysqlcdc.spark.binlog_source import SOURCE_NAME, BinlogDataSource, StreamSeed

log = logging.getLogger(__name__)

MODES = ("available-now", "continuous")
#: merges of one micro-batch are versioned batch_id * SEGMENTS + segment (a DDL starts a new segment)
SEGMENTS = 1_000_000


@dataclass
class StreamJob:
    seed: str
    sink_root: str
    checkpoint: str
    mode: str = "available-now"
    trigger_interval_s: float = 1.0
    server_id_range: str = "5400-6399"
    app_id: str = ""
    changelog: bool = False  # also append every change to <table>__changelog
    decode_pieces: int = 2  # a large micro-batch range is decoded by this many tasks in parallel

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"stream mode must be one of {MODES}, got {self.mode!r}")
        if not self.app_id:
            # stable for one checkpoint location: the idempotency key of this stream's commits
            self.app_id = "mysqlcdc-" + hashlib.sha1(self.checkpoint.encode()).hexdigest()[:16]

    @classmethod
    def from_json(cls, text: str) -> "StreamJob":
        return cls(**json.loads(text))

    def to_json(self) -> str:
        return json.dumps(self.__dict__)


class BatchApplier:
    """The ``foreachBatch`` function: decode the batch, apply it segment by segment, log progress."""

    def __init__(self, source: SourceConfig, job: StreamJob, seed: StreamSeed):
        self.source = source
        self.job = job
        self.sink = DeltaSink(job.sink_root)
        self.writers: dict[TableId, SinkWriter] = {}
        conn = source.connect()
        try:
            for table_id in seed.tables:
                self._load_writer(conn, table_id, seed.chunk_keys[table_id])
        finally:
            conn.close()
        self.rows_applied = 0

    def _load_writer(self, conn: Any, table_id: TableId, chunk_key: str) -> None:
        schema = load_table_schema(conn, table_id)
        self.sink.prepare(schema)  # refuses unsafe type changes with a clear error
        self.writers[table_id] = SinkWriter(self.sink, schema, chunk_key,
                                            KeyOrdering(schema.column(chunk_key), self.source.connect))

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        started = time.monotonic()
        # Sorted here, not with orderBy: Spark's sort samples its input first, which would read the
        # binlog range twice.
        rows = sorted(batch_df.select("version", "row", "part", "payload").collect(),
                      key=lambda r: (r.version, r.row, r.part))
        read_s = time.monotonic() - started
        items = [item for r in rows for item in pickle.loads(r.payload)]
        # Each unit of work (a run of changes, or a TRUNCATE) commits under its own version
        # batch_id * SEGMENTS + n, so a replayed batch redoes exactly the units it had not committed.
        segment: list[ChangeRecord] = []
        unit = 0
        for item in items:
            if isinstance(item, SchemaChangeEvent):
                self._apply(segment, batch_id * SEGMENTS + unit)
                segment, unit = [], unit + 1
                if self._schema_changed(item, batch_id * SEGMENTS + unit):
                    unit += 1
            else:
                segment.append(item)
        self._apply(segment, batch_id * SEGMENTS + unit)
        self.rows_applied += len(items)
        self._log_progress(batch_id, items, read_s, time.monotonic() - started)

    def _apply(self, records: list[ChangeRecord], version: int) -> None:
        if records:
            apply_change_batch(self.writers, records, app_id=self.job.app_id, batch_id=version,
                               changelog=self.job.changelog)

    def _schema_changed(self, event: SchemaChangeEvent, version: int) -> bool:
        """Follow a DDL statement; True when it committed something to the sink under ``version``."""
        affected = [t for t in event.table_ids if t in self.writers]
        log.warning("schema change at %s affects %s: %s", event.offset, affected or "no captured table", event.statement)
        if affected and event.statement.lstrip().upper().startswith("TRUNCATE"):
            for table_id in affected:
                self.sink.truncate(table_id, app_id=self.job.app_id, batch_id=version)
            return True
        conn = self.source.connect()
        try:
            for table_id in affected:
                self._load_writer(conn, table_id, self.writers[table_id].chunk_key)
        finally:
            conn.close()
        return False

    def _log_progress(self, batch_id: int, items: list[Any], read_s: float, seconds: float) -> None:
        conn = self.source.connect()
        try:
            head = current_offset(conn)
        finally:
            conn.close()
        newest = max((i.timestamp_ms for i in items), default=0)
        lag_s = time.time() - newest / 1000 if newest else 0.0
        log.info("stream batch %d: %d changes applied in %.2fs (%.2fs reading the binlog, %.2fs merging; %d in total); "
                 "binlog head %s; event-time lag %.1fs", batch_id, len(items), seconds, read_s, seconds - read_s,
                 self.rows_applied, head, lag_s)


def run_stream_job(spark: Any, source: SourceConfig, job: StreamJob, source_file: str) -> dict[str, Any]:
    seed = StreamSeed.load(job.seed)
    spark.dataSource.register(BinlogDataSource)
    applier = BatchApplier(source, job, seed)
    stream = (spark.readStream.format(SOURCE_NAME)
              .option("seed", job.seed).option("source_file", source_file)
              .option("server_id_range", job.server_id_range).option("decode_pieces", str(job.decode_pieces)).load())
    writer = stream.writeStream.foreachBatch(applier).option("checkpointLocation", job.checkpoint)
    if job.mode == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{job.trigger_interval_s} seconds")
    started = time.monotonic()
    query = writer.start()
    query.awaitTermination()
    progress = query.lastProgress or {}
    return {"mode": job.mode, "changes_applied": applier.rows_applied, "app_id": job.app_id,
            "streaming_seconds": round(time.monotonic() - started, 3),
            "last_batch": progress.get("batchId"), "end_offset": (progress.get("sources") or [{}])[0].get("endOffset")}
