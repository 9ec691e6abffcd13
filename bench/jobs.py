"""The benchmarks' two ways to run our Spark programs once, each in one spark-submit in local mode and
timed, with the peak RSS per role of its processes (bench/memory.py's ``PeakRss``): the chunk job over
a whole table, and an available-now stream over captured tables from a binlog position."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.planning.splitter import SplitOptions, TableSplitter
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.protocol.jobs import STRUCTURED_STREAMING, ChunkJob, StreamJob
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, stream_only_split
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.state.registry import PipelineState
from bench.memory import PeakRss
from devtools.spark_submit import SparkSubmit

#: the stream engine of the benchmarks that have measured Structured Streaming from their start (their
#: log lines and report text are its own): their figures stay comparable with every earlier run's; the
#: default engine (the driver loop) is measured beside it by ``--only sustained`` and ``--only stream-startup``
BASELINE_ENGINE = STRUCTURED_STREAMING

#: rows per split of the snapshot benchmarks' chunk jobs (read by 4 partitions each), whatever the table's size
SPLIT_ROWS = 1_000_000


def timed(fn):
    started = time.monotonic()
    result = fn()
    return time.monotonic() - started, result


def table_rows(conn: Any, table: TableId) -> int:
    with conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {table.quoted}")
        return int(cur.fetchone()[0])


def run_chunk_job(conn: Any, table: TableId, work: Path, secrets: Path, lake: str,
                  consistency: str = "exactly-once", sink_format: str = "delta", merge_mode: str | None = None) -> dict:
    """Our chunk job over the whole table into ``work / lake`` in one spark-submit: seconds, window
    changes merged, and peak RSS per role. ``merge_mode``: the sink's (None: the format's default)."""
    schema = load_table_schema(conn, table)
    splits = TableSplitter(conn, schema, SplitOptions(split_rows=SPLIT_ROWS)).split()
    job = ChunkJob(table=str(table), splits=splits, sink=SinkSpec(str(work / lake), sink_format, merge_mode=merge_mode),
                   partitions_per_split=4, snapshot_consistency=consistency)
    (work / f"{lake}.json").write_text(job.to_json())
    submit = SparkSubmit(master="local[2]", work_dir=work / "spark")
    sampler = PeakRss(os.getpid())  # the spark-submit's processes, told apart by their command lines
    try:
        total, result = timed(lambda: submit.run("snapshot_chunk.py", ["--job", str(work / f"{lake}.json")], secrets))
    finally:
        peak = sampler.stop()
    print("chunk job log:\n" + "\n".join(line for line in submit.last_log.splitlines() if "chunk job" in line), flush=True)
    assert result["rows"] == table_rows(conn, table), result
    return {"ours_total_s": total, "ours_work_s": result["seconds"], "ours_splits": len(splits), "peak_bytes": peak,
            "merged": result["binlog_events_merged"]}


def run_stream_job(conn: Any, tables: list[TableId], key: str, start: BinlogOffset, work: Path, secrets: Path,
                   name: str, *, sink_format: str = "delta", prepare: bool = True, **settings: Any) -> dict:
    """One available-now stream of ``tables`` (each keyed by ``key``) from ``start`` to the binlog's end
    into ``work / f"{name}-lake"``, in one spark-submit: its result, the streaming and end-to-end
    seconds, and peak RSS per role. ``prepare``: create the sink tables first (a sink the chunk job
    filled already has them); ``settings``: further StreamJob fields."""
    lake, state = work / f"{name}-lake", PipelineState(str(work / f"{name}-state"))
    state.commit({t: CapturedTable(key, [stream_only_split(t, key, start)]) for t in tables})
    if prepare:
        sink = open_sink(SinkSpec(str(lake), sink_format))
        for table in tables:
            sink.prepare(load_table_schema(conn, table))
    job = StreamJob(state=state.location, sink=SinkSpec(str(lake), sink_format), **{"stream_engine": BASELINE_ENGINE, **settings})
    (work / f"{name}.json").write_text(job.to_json())
    submit = SparkSubmit(master="local[2]", work_dir=work / "spark")
    sampler = PeakRss(os.getpid())
    try:
        total, result = timed(lambda: submit.run("binlog_stream.py", ["--job", str(work / f"{name}.json")], secrets))
    finally:
        peak = sampler.stop()
    return {"result": result, "streaming_s": result["streaming_seconds"], "total_s": total, "peak_bytes": peak,
            "log": submit.last_log}
