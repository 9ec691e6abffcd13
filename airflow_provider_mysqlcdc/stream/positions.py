"""Where the stream starts and goes on, apart from Spark: the first offset of a stream without a
checkpoint, the registry's high watermarks as a micro-batch places them, and what binlog lost to a
purge means (spark/binlog_source.py plans and reads by them)."""

from __future__ import annotations

import dataclasses
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import BinlogPurgedError, ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import BinlogPurged
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
from airflow_provider_mysqlcdc.cdc.source.server import check_offset_available
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.protocol.registry import Generation
from airflow_provider_mysqlcdc.state.generations import added_since, start_offset, with_splits
from airflow_provider_mysqlcdc.state.registry import PipelineState

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
    """``generation`` with the high watermarks the driver translated (spark/binlog_source.py)."""
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
