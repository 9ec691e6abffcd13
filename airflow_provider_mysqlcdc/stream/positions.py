"""Where the stream starts and goes on, apart from Spark: the first offset of a stream without a
checkpoint, the registry's high watermarks as a micro-batch places them, and what binlog lost to a
purge means (batches.py plans by them, reading.py reads by them)."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import BinlogPurgedError, ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import BinlogPurged
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
from airflow_provider_mysqlcdc.cdc.source.server import check_offset_available
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.protocol.progress import (
    HistoryPoint,
    StreamBatchProgress,
    StreamHistory,
    StreamOffsetProgress,
)
from airflow_provider_mysqlcdc.protocol.registry import Generation
from airflow_provider_mysqlcdc.state.generations import added_since, start_offset, with_splits
from airflow_provider_mysqlcdc.state.registry import STREAM_HISTORY, STREAM_OFFSET, STREAM_PROGRESS, PipelineState
from airflow_provider_mysqlcdc.stream.heartbeat import idle_lag

log = logging.getLogger(__name__)

#: split id -> its high watermark placed among the pipeline's servers (state/servers.py), where that
#: differs from the registry's: after a failover, in the epoch of the server the batch reads from
Watermarks = dict[str, BinlogOffset]


def registry_start_offset(state: PipelineState) -> StreamOffset:
    """Where a stream without a checkpoint starts: the registry's smallest high watermark, at generation
    0 (nothing captured), so the first batch activates everything the latest generation holds."""
    start = start_offset(state.latest())
    if start is None:
        raise ConfigurationError(f"No tables are captured at {state.location}: run the snapshot (or register "
                                 "tables with startup mode 'latest'/'offset') before starting the stream.")
    return StreamOffset(start, 0)


def with_watermarks(generation: Generation, watermarks: Watermarks) -> Generation:
    """``generation`` with the high watermarks the driver translated (batches.py)."""
    if not watermarks:
        return generation
    return with_splits(generation, lambda f: dataclasses.replace(f, high_watermark=watermarks[f.split.split_id])
                                  if f.split.split_id in watermarks else f)


def all_in_epoch(generation: Generation, epoch: int) -> bool:
    """Every high watermark of ``generation`` was read on the server of ``epoch``: none to translate."""
    return all(f.high_watermark.epoch == epoch for f in generation.finished_splits)


def watermarks_to_translate(new: Generation, older: Generation, begin: BinlogOffset, epoch: int) -> list[FinishedSplit]:
    """The splits of ``new`` (a batch from ``begin`` on, read on the server of ``epoch``) whose high
    watermarks, read on an earlier server, the batch still compares changes with exactly: those of the
    splits it activates (added since ``older``), and those after ``begin`` on ``begin``'s server.
    They are translated into this server's binlog by their GTID positions (state/servers.py)."""
    added = {f.split.split_id for f in added_since(new, older)}
    return [f for f in new.finished_splits
            if f.high_watermark.epoch < epoch
            and (f.split.split_id in added or (f.high_watermark.epoch == begin.epoch and f.high_watermark > begin))]


def purged_or_raise(conn: Any, offset: BinlogOffset, on_binlog_purged: str) -> BinlogPurged | None:
    """None when the server still has the binlog at ``offset``; else the gap to go on after, with
    ``on_binlog_purged="resnapshot"`` (its tables are re-snapshotted), or the error."""
    try:
        check_offset_available(conn, offset)
        return None
    except BinlogPurgedError as exc:
        if on_binlog_purged != "resnapshot" or exc.oldest is None:  # no binlog left to go on from
            raise
        return BinlogPurged(offset, exc.oldest)


def record_processed(state: PipelineState, job: StreamJob, end: StreamOffset, batch_id: int | None,
                     measure: Callable[[BinlogOffset], tuple[BinlogOffset, int | None]] | None = None, *,
                     heartbeat: bool = False) -> None:
    """Where the stream has processed to (the end of its batch ``batch_id``), for ``bin/status``, the
    metrics and a later stream whose checkpoint is new (``resume_offset``); with ``measure`` (the
    server's head, and the bytes from the end to it), how far behind the head that is, also added
    to the stream's history (the UI's lag chart) with the batch's lag. ``heartbeat``: measured again
    while no batch finished (heartbeat.py): no changes, and no lag once caught up."""
    head, behind = None, None
    if measure is not None:
        try:
            head, behind = measure(end.offset)
        except Exception as exc:  # noqa: BLE001 - a figure for people: never stop the stream for it
            log.info("could not measure how far the stream is behind the binlog head: %s", exc)
    now = time.time()
    batch = state.read_progress(StreamBatchProgress, STREAM_PROGRESS)
    ours = batch if batch is not None and batch.app_id == job.app_id and batch.batch == batch_id else None
    lag = ours.lag_s if ours else 0.0
    if heartbeat:
        lag = idle_lag(behind, lag)
    state.write_progress(STREAM_OFFSET, StreamOffsetProgress(end, now, job.sink.root, job.app_id, head, behind,
                                                             lag if measure is not None else None))
    if measure is not None:
        history = state.read_progress(StreamHistory, STREAM_HISTORY) or StreamHistory()
        state.write_progress(STREAM_HISTORY, history.with_point(HistoryPoint(
            now, lag, behind, ours.changes_in_batch if ours and not heartbeat else 0)))


def resume_offset(state: PipelineState, job: StreamJob) -> StreamOffset | None:
    """Where a stream with a new checkpoint starts: the end of the last batch a stream of this
    pipeline committed into the same sink (every table holds every change up to it)."""
    progress = state.read_progress(StreamOffsetProgress, STREAM_OFFSET)
    return progress.offset if progress and progress.sink_root == job.sink.root else None
