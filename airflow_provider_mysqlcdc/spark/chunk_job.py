"""The chunk job: read snapshot splits with Spark parallelism inside each split, write them to the sink.

For each split: its key range is cut into Spark partitions (boundaries from the database, like the
table's splits); every partition SELECTs its sub-range in its own consistent snapshot on an
executor, writes its rows as one Parquet data file straight into the Delta table's folder (stamped
with that snapshot's position) and sends back the file's description and the snapshot's low
watermark: no row crosses to the driver. Once all partitions are back, the driver reads the high
watermark and replays the binlog from the smallest partition low watermark to it over the split's
rows (correct because every partition's snapshot lies between the two). A partition none of those
changes touches is exact as of the high watermark already; the files of the touched ones are read
back, merged with the changes and written again (as of the high watermark). Then one Delta commit
adds the split's files and removes what its key range held before: a retried split replaces
itself, and a file no commit added stays invisible.

With ``stage_to`` (a table some stream already writes: state/registry.py), or while a column's type
differs from the Delta table's (a widening only a rewrite carries out), the partitions' rows come to
the driver instead (Arrow IPC), which writes one Parquet file per split to the staging folder, or
replaces the split's range through delta-rs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, TableTruncated, WindowChange
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.planning.splitter import SplitOptions, TableSplitter
from airflow_provider_mysqlcdc.cdc.reading.arrow_select import fast_select_supported, select_arrow
from airflow_provider_mysqlcdc.cdc.reading.split_reader import SplitRangeChecker, SplitReader
from airflow_provider_mysqlcdc.cdc.records.apply import KeyedRows
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.rules import captured_schema
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.protocol.envelope import encode
from airflow_provider_mysqlcdc.protocol.jobs import ChunkJob
from airflow_provider_mysqlcdc.protocol.results import ChunkResult
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.arrow_rows import data_schema, merge_changes_into_table, rows_to_data_table
from airflow_provider_mysqlcdc.sinks.data_files import DataFile, delete_data_file, read_data_file, write_data_file
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter
from airflow_provider_mysqlcdc.state.credentials import install_from_private_file
from airflow_provider_mysqlcdc.state.epochs import place
from airflow_provider_mysqlcdc.state.staged import write_staged

log = logging.getLogger(__name__)


def _read_partition(source: SourceConfig, schema: TableSchema, part: SnapshotSplit) -> tuple[BinlogOffset, pa.Table]:
    """Executor side: SELECT one sub-range; its low watermark and rows (read again from scratch after
    a transient source fault)."""
    return source.retry_policy.run(lambda: _read_partition_once(source, schema, part), f"reading {part.split_id}")


def _read_partition_once(source: SourceConfig, schema: TableSchema, part: SnapshotSplit) -> tuple[BinlogOffset, pa.Table]:
    if fast_select_supported(schema, source):
        low, table = select_arrow(source, schema, part)
        return low, table.cast(data_schema(schema))
    rows = KeyedRows(schema.key_columns)
    with SplitReader(source, schema, watch_in_flight=False) as reader:  # the driver's in_flight_floor covers it
        low, _ = reader.select(part, rows)
    return low, rows_to_data_table(schema, list(rows.rows.values()))


@dataclass(frozen=True)
class PartitionFiles:
    """Where and how the executors write their partitions' rows as data files (pickled to them)."""

    sink: SinkSpec
    file_schema: pa.Schema
    chunk_key: str
    #: the server epoch the executors' low watermarks are placed in (state of the pipeline's servers)
    epoch: int
    #: the file names' start (the split's), followed by the partition's number
    prefix: str
    #: the folder the files go to (``Sink.data_folder``, decided by the driver)
    data_folder: str = ""

    def write(self, source: SourceConfig, schema: TableSchema, part: SnapshotSplit, low: BinlogOffset,
              rows: pa.Table) -> DataFile:
        """Stamp ``rows`` as read at ``low`` and write them into the table's folder."""
        install_from_private_file(source.password_file)  # the lake may be on an object store
        sink = open_sink(self.sink)  # only to stamp the rows: the files go to data_folder
        ordering = KeyOrdering(schema.column(self.chunk_key), source.connect)
        try:
            writer = SinkWriter(sink, schema, self.chunk_key, ordering)
            stamped = writer.stamped(rows, low.in_epoch(self.epoch))
        finally:
            ordering.close()
        return write_data_file(self.data_folder, stamped, self.file_schema, prefix=f"{self.prefix}-{part.index}")


def _encode_rows(rows: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as stream:
        stream.write_table(rows)
    return sink.getvalue().to_pybytes()


def partition_reader(source: SourceConfig, schema: TableSchema, parts: list[SnapshotSplit],
                     files: PartitionFiles | None = None) -> Callable[[Any], Any]:
    """The function Spark runs on executors (``mapInArrow``): it goes to them pickled, with ``source``
    in it, so that is ``SourceConfig.for_executors`` (a private file's path, not the password: the
    task's under spark-submit, the server's on Spark Connect). Per partition it yields the low
    watermark and either the description of the data file it wrote (``files``) or the rows."""

    def read(batches: Any) -> Any:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                low, rows = _read_partition(source, schema, parts[index])
                payload = (json.dumps(files.write(source, schema, parts[index], low, rows).to_dict()).encode()
                           if files else _encode_rows(rows))
                yield pa.record_batch([pa.array([json.dumps(low.to_dict())]), pa.array([payload], pa.binary())],
                                      names=["low", "payload"])

    return read


def read_partitions(spark: Any, source: SourceConfig, schema: TableSchema, parts: list[SnapshotSplit],
                    files: PartitionFiles | None = None) -> list[tuple[BinlogOffset, bytes]]:
    """Read ``parts`` in parallel, one Spark task each: each one's low watermark and payload (its data
    file's description with ``files``, else its rows as Arrow IPC).

    Through the DataFrame API (``mapInArrow``), not RDDs, so the same code runs on a classic Spark
    session and on a Spark Connect one, which has no ``SparkContext``."""
    read = partition_reader(source, schema, parts, files)
    read_back = spark.range(0, len(parts), 1, len(parts)).mapInArrow(read, "low string, payload binary").toArrow()
    return [(BinlogOffset.from_dict(json.loads(low)), payload) for low, payload in
            zip(read_back.column("low").to_pylist(), read_back.column("payload").to_pylist())]


def touched_partitions(parts: list[SnapshotSplit], changes: list[WindowChange], ordering: KeyOrdering) -> list[int]:
    """The partitions whose rows ``changes`` may change: those holding a chunk-key value of a change's
    before or after image (a row an update moves between partitions touches both), all of them after
    a ``TRUNCATE``."""
    if any(isinstance(change, TableTruncated) for change in changes):
        return list(range(len(parts)))
    chunk_key = parts[0].chunk_key
    values = [image[chunk_key] for change in changes if isinstance(change, ChangeRecord)
              for image in (change.before, change.after) if image is not None]
    if not values:
        return []
    return [i for i, part in enumerate(parts) if any(SplitRangeChecker(part, ordering).contains_all(values))]


def default_parallelism(spark: Any) -> int:
    """How many tasks the session runs at once: a classic session's ``SparkContext`` knows; a Spark
    Connect session has none, and takes ``spark.default.parallelism`` when the server sets it, else 2."""
    try:
        return spark.sparkContext.defaultParallelism
    except Exception:  # Spark Connect: "sparkContext is not supported"
        return int(spark.conf.get("spark.default.parallelism", "2"))


def plan_partitions(source: SourceConfig, schema: TableSchema, split: SnapshotSplit, partitions: int) -> list[SnapshotSplit]:
    def plan(conn: Any) -> list[SnapshotSplit]:
        even = TableSplitter(conn, schema, SplitOptions(chunk_key_column=split.chunk_key)).cut_evenly(split, partitions)
        if even is not None:
            return even
        rows = TableSplitter(conn, schema, SplitOptions(chunk_key_column=split.chunk_key)).count_rows(split)
        size = max(1, math.ceil(rows / max(1, partitions)))
        return TableSplitter(conn, schema, SplitOptions(split_rows=size, chunk_key_column=split.chunk_key)).split(within=split)

    return source.run(plan, f"planning the partitions of {split.split_id}")


def run_chunk_job(spark: Any, source: SourceConfig, job: ChunkJob,
                  executor_source: SourceConfig | None = None) -> dict[str, Any]:
    """``executor_source``: the settings the executors get (``SourceConfig.for_executors``); None: ``source``
    itself (a local session that only tests and tools start)."""
    started = time.monotonic()
    table_id = TableId.parse(job.table)
    source = source.with_retry(job.retry_budget_s)
    executor_source = (executor_source or source).with_retry(job.retry_budget_s)
    schema = captured_schema(source.run(lambda conn: load_table_schema(conn, table_id), f"reading the schema of {table_id}"),
                             job.table_rule, chunk_key=job.splits[0].chunk_key if job.splits else None)
    splits = job.splits
    sink = open_sink(job.sink)
    file_schema = None
    if not job.stage_to:  # staged splits: the stream prepares the table when it applies them
        sink.prepare(schema)
        file_schema = sink.file_schema(schema)
    partitions = job.partitions_per_split or default_parallelism(spark)
    finished: list[FinishedSplit] = []
    with SplitReader(source, schema, server_id_range=job.server_id_range) as reader:
        split_job = _SplitJob(spark, job, schema, reader, executor_source,
                              SinkWriter(sink, schema, splits[0].chunk_key, reader.ordering(splits[0].chunk_key)))
        for number, split in enumerate(splits, start=1):
            split_started = time.monotonic()
            parts = plan_partitions(source, schema, split, partitions)
            # MySQL: before any partition's snapshot starts, a low watermark behind transactions in flight
            floor = source.retry_policy.run(reader.in_flight_floor, "reading the low watermark")
            log.info("chunk job %s: split %d cut into %d partitions in %.1fs", table_id, split.index, len(parts),
                     time.monotonic() - split_started)
            done = (split_job.write_in_executors(split, parts, floor, file_schema) if file_schema is not None
                    else split_job.collect(split, parts, floor))
            done = dataclasses.replace(done, seconds=round(time.monotonic() - split_started, 3))
            finished.append(done)
            log.info("chunk job %s: split %d (%d/%d) %s: %d rows in %d partitions, %d binlog changes merged, "
                     "%s %s (%.1fs)", table_id, split.index, number, len(splits),
                     "staged for the stream" if job.stage_to else "written", done.rows, len(parts),
                     done.binlog_events_merged,
                     "high watermark" if job.replays_windows or done.high_watermark != done.low_watermark else
                     "at least once, the stream applies its changes after its low watermark",
                     done.high_watermark, done.seconds)
    return encode(ChunkResult(table_id.quoted, finished, sum(f.rows for f in finished),
                              sum(f.binlog_events_merged for f in finished), round(time.monotonic() - started, 3)))


@dataclass
class _SplitJob:
    """Reading one split of the job's table, its partitions in parallel, either way."""

    spark: Any
    job: ChunkJob
    schema: TableSchema
    reader: SplitReader
    executor_source: SourceConfig
    writer: SinkWriter

    def _epoch(self) -> int:
        """The server epoch the partitions are about to be read in (state/servers.py)."""
        return place(self.job.servers, self.reader.current_offset()).epoch

    def _window(self, split: SnapshotSplit, lows: list[BinlogOffset], floor: BinlogOffset | None,
                epoch: int) -> tuple[BinlogOffset, BinlogOffset, list[WindowChange]]:
        """The split's position, its low watermark, and its changes between the two.

        Exactly-once: the position is the high watermark (placed among the pipeline's servers: after a
        failover, the rows' versions order after the old server's) and the changes are the window's.
        At-least-once: the position is the low watermark and there are no changes: the stream applies
        the split's changes after it, some of which its rows already hold (docs/cdc-semantics.md). A
        failover while the partitions were read leaves no low watermark the new server knows, so such a
        split is brought to its high watermark all the same."""
        high = place(self.job.servers, self.reader.current_offset())
        low = min(lows + ([floor] if floor else [])).in_epoch(high.epoch)
        if not self.job.replays_windows and high.epoch == epoch:
            return low, low, []
        return high, low, list(self.reader.window_changes(split, low, high)) if high > low else []

    def write_in_executors(self, split: SnapshotSplit, parts: list[SnapshotSplit], floor: BinlogOffset | None,
                           file_schema: pa.Schema) -> FinishedSplit:
        """The executors write the partitions' data files; the driver rewrites the files the window's
        changes touch and commits the split's files in one commit."""
        sink = self.writer.sink
        uri = sink.data_folder(self.writer.target.table_id)
        epoch = self._epoch()
        files = PartitionFiles(self.job.sink, file_schema, split.chunk_key, epoch, prefix=f"chunk-{split.index}",
                               data_folder=uri)
        started = time.monotonic()
        results = read_partitions(self.spark, self.executor_source, self.schema, parts, files)
        written = [DataFile.from_dict(json.loads(payload)) for _, payload in results]
        read_s = time.monotonic() - started
        high, low, changes = self._window(split, [low for low, _ in results], floor, epoch)
        window_s = time.monotonic() - started - read_s
        touched = (touched_partitions(parts, changes, self.reader.ordering(split.chunk_key))
                   if high.epoch == epoch else list(range(len(parts))))  # a failover: all stamped again
        commit = [f for i, f in enumerate(written) if i not in touched]
        if touched:
            rows = pa.concat_tables([read_data_file(uri, written[i].path).select(data_schema(self.schema).names)
                                     for i in touched])
            rows = merge_changes_into_table(self.schema, rows, changes)
            if rows.num_rows:
                commit.append(write_data_file(uri, self.writer.stamped(rows, high), file_schema,
                                              prefix=f"chunk-{split.index}-merged"))
        start, end = self.writer.split_range(split)
        sink.commit_range(self.writer.target.table_id, start, end, commit, file_schema=file_schema)
        for i in touched:  # never committed: nothing reads them
            delete_data_file(uri, written[i].path)
        log.info("chunk job %s: split %d: partitions read and written by the executors in %.1fs, window read in "
                 "%.1fs, %d of %d partitions rewritten with its changes and the split committed in %.1fs",
                 self.schema.table_id, split.index, read_s, window_s, len(touched), len(parts),
                 time.monotonic() - started - read_s - window_s)
        return FinishedSplit(split, high, low, rows=sum(f.rows for f in commit), binlog_events_merged=len(changes),
                             partitions=len(parts))

    def collect(self, split: SnapshotSplit, parts: list[SnapshotSplit], floor: BinlogOffset | None) -> FinishedSplit:
        """The partitions' rows come to the driver, which stages them for the stream or replaces the
        split's range with them."""
        epoch = self._epoch()
        results = read_partitions(self.spark, self.executor_source, self.schema, parts)
        rows = pa.concat_tables([pa.ipc.open_stream(payload).read_all() for _, payload in results])
        high, low, changes = self._window(split, [low for low, _ in results], floor, epoch)
        rows = merge_changes_into_table(self.schema, rows, changes)
        staged = f"{self.job.stage_to.rstrip('/')}/split-{split.index}.parquet" if self.job.stage_to else None
        done = FinishedSplit(split, high, low, rows=rows.num_rows, binlog_events_merged=len(changes), staged=staged,
                             partitions=len(parts))
        if staged:
            write_staged(staged, rows)
        else:
            self.writer.write_split_table(done, rows)
        return done
