"""The chunk job: read snapshot splits with Spark parallelism inside each split, write them to the sink.

For each split: its key range is cut into Spark partitions (boundaries from the database, like the
table's splits); every partition SELECTs its sub-range in its own consistent snapshot on an
executor and reports that snapshot's low watermark. Once all partitions are back, the driver reads
the high watermark, replays the binlog from the smallest partition low watermark to it over the
split's rows (correct because every partition's snapshot lies between the two), and replaces the
split's key range in the sink in one atomic commit. A retried split therefore replaces itself.

With ``stage_to`` (a table some stream already writes: state/registry.py), the rows go to one
Parquet file per split there instead, and the stream applies them at a micro-batch boundary.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.planning.splitter import ChunkSplitter, SplitOptions
from airflow_provider_mysqlcdc.cdc.reading.arrow_select import fast_select_supported, select_arrow
from airflow_provider_mysqlcdc.cdc.reading.split_reader import SplitReader
from airflow_provider_mysqlcdc.cdc.records.apply import KeyedRows
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.schema import TableId, TableSchema, load_table_schema
from airflow_provider_mysqlcdc.protocol.envelope import encode
from airflow_provider_mysqlcdc.protocol.jobs import ChunkJob
from airflow_provider_mysqlcdc.protocol.results import ChunkResult
from airflow_provider_mysqlcdc.sinks.arrow_rows import data_schema, merge_changes_into_table, rows_to_data_table
from airflow_provider_mysqlcdc.sinks.delta import DeltaSink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter
from airflow_provider_mysqlcdc.state.staged import write_staged

log = logging.getLogger(__name__)


def _read_partition(source: SourceConfig, schema: TableSchema, part: SnapshotSplit) -> tuple[dict, bytes]:
    """Executor side: SELECT one sub-range; its low watermark and rows as Arrow IPC bytes (read again
    from scratch after a transient source fault)."""
    return source.retry_policy.run(lambda: _read_partition_once(source, schema, part), f"reading {part.split_id}")


def _read_partition_once(source: SourceConfig, schema: TableSchema, part: SnapshotSplit) -> tuple[dict, bytes]:
    if fast_select_supported(schema, source):
        low, table = select_arrow(source, schema, part)
        table = table.cast(data_schema(schema))
    else:
        rows = KeyedRows(schema.key_columns)
        with SplitReader(source, schema, watch_in_flight=False) as reader:  # the driver's in_flight_floor covers it
            low, _ = reader.select(part, rows)
        table = rows_to_data_table(schema, list(rows.rows.values()))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as stream:
        stream.write_table(table)
    return low.to_dict(), sink.getvalue().to_pybytes()


def partition_reader(source: SourceConfig, schema: TableSchema, parts: list[SnapshotSplit]) -> Callable[[Any], Any]:
    """The function Spark runs on executors (``mapInArrow``): it goes to them pickled, with ``source``
    in it, so that is ``SourceConfig.for_executors`` (a private file's path, not the password: the
    task's under spark-submit, the server's on Spark Connect)."""

    def read(batches: Any) -> Any:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                low, payload = _read_partition(source, schema, parts[index])
                yield pa.record_batch([pa.array([json.dumps(low)]), pa.array([payload], pa.binary())],
                                      names=["low", "payload"])

    return read


def read_partitions(spark: Any, source: SourceConfig, schema: TableSchema,
                    parts: list[SnapshotSplit]) -> list[tuple[dict, bytes]]:
    """Read ``parts`` in parallel, one Spark task each: each one's low watermark and rows (Arrow IPC).

    Through the DataFrame API (``mapInArrow``), not RDDs, so the same code runs on a classic Spark
    session and on a Spark Connect one, which has no ``SparkContext``."""
    read = partition_reader(source, schema, parts)
    read_back = spark.range(0, len(parts), 1, len(parts)).mapInArrow(read, "low string, payload binary").toArrow()
    return [(json.loads(low), payload) for low, payload in
            zip(read_back.column("low").to_pylist(), read_back.column("payload").to_pylist())]


def default_parallelism(spark: Any) -> int:
    """How many tasks the session runs at once: a classic session's ``SparkContext`` knows; a Spark
    Connect session has none, and takes ``spark.default.parallelism`` when the server sets it, else 2."""
    try:
        return spark.sparkContext.defaultParallelism
    except Exception:  # Spark Connect: "sparkContext is not supported"
        return int(spark.conf.get("spark.default.parallelism", "2"))


def plan_partitions(source: SourceConfig, schema: TableSchema, split: SnapshotSplit, partitions: int) -> list[SnapshotSplit]:
    def plan(conn: Any) -> list[SnapshotSplit]:
        rows = ChunkSplitter(conn, schema, SplitOptions(chunk_key_column=split.chunk_key)).count_rows(split)
        size = max(1, math.ceil(rows / max(1, partitions)))
        return ChunkSplitter(conn, schema, SplitOptions(chunk_size=size, chunk_key_column=split.chunk_key)).split(within=split)

    return source.run(plan, f"planning the partitions of {split.split_id}")


def run_chunk_job(spark: Any, source: SourceConfig, job: ChunkJob,
                  executor_source: SourceConfig | None = None) -> dict[str, Any]:
    """``executor_source``: the settings the executors get (``SourceConfig.for_executors``); None: ``source``
    itself (a local session that only tests and tools start)."""
    started = time.monotonic()
    table_id = TableId.parse(job.table)
    source = source.with_retry(job.retry_budget_s)
    executor_source = (executor_source or source).with_retry(job.retry_budget_s)
    schema = source.run(lambda conn: load_table_schema(conn, table_id), f"reading the schema of {table_id}")
    splits = job.splits
    sink = DeltaSink(job.sink_root)
    if not job.stage_to:  # staged splits: the stream prepares the table when it applies them
        sink.prepare(schema)
    partitions = job.partitions_per_split or default_parallelism(spark)
    finished: list[FinishedSplit] = []
    total_rows = 0
    with SplitReader(source, schema, server_id_range=job.server_id_range) as reader:
        writer = SinkWriter(sink, schema, splits[0].chunk_key, reader.ordering(splits[0].chunk_key))
        for number, split in enumerate(splits, start=1):
            split_started = time.monotonic()
            parts = plan_partitions(source, schema, split, partitions)
            # MySQL: before any partition's snapshot starts, a low watermark behind transactions in flight
            floor = source.retry_policy.run(reader.in_flight_floor, "reading the low watermark")
            results = read_partitions(spark, executor_source, schema, parts)
            # placed among the pipeline's servers: after a failover, the rows' versions order after the old server's
            high = job.servers.place(reader.current_offset())
            data = pa.concat_tables([pa.ipc.open_stream(payload).read_all() for _, payload in results])
            low = min([BinlogOffset.from_dict(low) for low, _ in results] + ([floor] if floor else [])).in_epoch(high.epoch)
            changes = list(reader.window_changes(split, low, high)) if high > low else []
            data = merge_changes_into_table(schema, data, changes)
            staged = f"{job.stage_to.rstrip('/')}/split-{split.index}.parquet" if job.stage_to else None
            if staged:
                write_staged(staged, data)
            done = FinishedSplit(split, high, low, rows=data.num_rows, binlog_events_merged=len(changes), staged=staged,
                                 partitions=len(parts), seconds=round(time.monotonic() - split_started, 3))
            if not job.stage_to:
                writer.write_split_table(done, data)
            finished.append(done)
            total_rows += data.num_rows
            log.info("chunk job %s: split %d (%d/%d) %s: %d rows in %d partitions, %d binlog changes merged, "
                     "high watermark %s (%.1fs)", table_id, split.index, number, len(splits),
                     "staged for the stream" if job.stage_to else "written", data.num_rows, len(parts),
                     len(changes), high, time.monotonic() - split_started)
    return encode(ChunkResult(table_id.quoted, finished, total_rows, sum(f.binlog_events_merged for f in finished),
                              round(time.monotonic() - started, 3)))
