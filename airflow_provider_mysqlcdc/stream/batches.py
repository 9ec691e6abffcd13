"""Where a micro-batch ends and what it reads, apart from Spark: the driver's side of a batch.

A batch ``(start, end]`` goes between two ``StreamOffset``s: binlog positions read from the
server's head (always between transactions, so a batch never ends inside one), each with the
registry generation it captures and the binlog it belongs to (its server's epoch and GTID
position). ``BatchPlanner``:

- ``head``: the binlog head now, at the registry's latest generation;
- ``end``: where a batch from ``start`` ends: the head, or the first transaction end past
  ``max_bytes`` of binlog or ``max_events`` events (cdc/binlog/ranges.py ``batch_end``); it checks
  that the start lies in this server's binlog (cheaply every time, exactly once per planner), so a
  reset, restored or other server's binlog is refused;
- ``reads``: the reads a batch is made of (reading.py runs them): an activation first when ``end``
  has a newer generation than ``start`` (``ActivationRead``), the purge gap at its start
  (``GapRead``, ``on_binlog_purged="resnapshot"``), then its binlog range, cut into up to
  ``decode_pieces`` ranges decoded in parallel (``RangeRead``).

The start of a batch is followed onto the server the source failed over to (state/servers.py), and
high watermarks read on an earlier server are translated into this one's binlog.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from airflow_provider_mysqlcdc.cdc.binlog.ranges import DecodeRange, batch_end, plan_decode_ranges
from airflow_provider_mysqlcdc.cdc.errors import BinlogPurgedError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import BinlogPurged
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig, pick_server_id
from airflow_provider_mysqlcdc.cdc.source.server import binlog_changed_error, check_offset_available
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.servers import ServerEpochs
from airflow_provider_mysqlcdc.stream.positions import (
    Watermarks,
    all_in_epoch,
    purged_or_raise,
    watermarks_to_translate,
)


@dataclass(frozen=True)
class RangeRead:
    """One piece of a batch's binlog range (cdc/binlog/ranges.py), read by one connection."""

    read_from: BinlogOffset
    decode_after: BinlogOffset | None
    end: BinlogOffset
    server_id: int  # distinct per piece: the server drops a replica connection that reuses an id
    generation: int
    watermarks: Watermarks


@dataclass(frozen=True)
class ActivationRead:
    """The splits ``generation`` adds to ``previous``, activated at ``start`` (stream/activation.py)."""

    previous: int
    generation: int
    start: BinlogOffset
    server_id: int
    on_binlog_purged: str
    watermarks: Watermarks


@dataclass(frozen=True)
class GapRead:
    """The start of a batch's range was purged: the batch reads from the oldest binlog left, and this
    tells the applier which changes were lost (``on_binlog_purged="resnapshot"``)."""

    gap: BinlogPurged
    generation: int


#: one read of a batch
BatchRead = Union[RangeRead, ActivationRead, GapRead]


class BatchPlanner:
    """The driver's side of the stream's batches over ``source`` for the pipeline at ``state`` (see
    the module doc). ``server_id_range``: the replica server ids its reads take, one per read of a
    batch; ``decode_pieces``: how many ranges a batch's binlog is cut into at most."""

    def __init__(self, source: SourceConfig, state: PipelineState, *, server_id_range: tuple[int, int],
                 decode_pieces: int, on_binlog_purged: str):
        self.source = source
        self.state = state
        self.server_id_range = server_id_range
        self.decode_pieces = decode_pieces
        self.on_binlog_purged = on_binlog_purged
        self.servers = ServerEpochs(state)
        self._verified = False

    def head(self) -> StreamOffset:
        """The server's binlog head (in its epoch), at the registry's latest generation."""
        head = self.source.run(self.servers.head, "reading the binlog head")
        return StreamOffset(head, self.state.latest_number())

    def end(self, start: StreamOffset, head: StreamOffset, *, max_bytes: int = 0, max_events: int = 0) -> StreamOffset:
        """Where a batch from ``start`` ends, ``head`` at the latest (0: no limit)."""
        begin = start.offset
        if head.offset < begin:  # never a stall: say what happened
            raise binlog_changed_error(f"The stream has processed the binlog up to {begin}, but the "
                                       f"server's binlog now ends at {head.offset}")

        def end(conn: Any) -> BinlogOffset:
            here = self.servers.follow(conn, begin)  # the same point on a server the source failed over to
            self._check_start(conn, here)
            return batch_end(conn, here, head.offset, max_bytes=max_bytes, max_events=max_events) \
                if max_bytes or max_events else head.offset

        end_offset = self.source.run(end, "finding the batch's end")
        return StreamOffset(end_offset, max(head.generation, start.generation))

    def _check_start(self, conn: Any, begin: BinlogOffset) -> None:
        """The start lies in this server's binlog: cheaply every time, exactly once per planner (a reset
        binlog may have grown past it). A purged start is left to ``reads`` (on_binlog_purged)."""
        try:
            check_offset_available(conn, begin, exact=not self._verified)
        except BinlogPurgedError:
            return
        self._verified = True

    def reads(self, start: StreamOffset, end: StreamOffset) -> list[BatchRead]:
        """The reads of the batch ``(start, end]``, in the order their items go."""
        begin, finish = start.offset, end.offset
        generation, previous = end.generation, start.generation

        def plan(conn: Any) -> tuple[BinlogOffset, Watermarks, BinlogPurged | None, list[DecodeRange]]:
            here = self.servers.follow(conn, begin)  # the same point on a server the source failed over to
            watermarks = self._translated_watermarks(conn, begin, here, generation, previous)
            gap = purged_or_raise(conn, here, self.on_binlog_purged) if finish > here else None
            read_from = gap.resumed_at if gap else here
            ranges = plan_decode_ranges(conn, read_from, finish, self.decode_pieces) if finish > read_from else []
            return here, watermarks, gap, ranges

        here, watermarks, gap, ranges = self.source.run(plan, "planning the binlog range")
        ids = self._server_ids(len(ranges) + 1)
        reads: list[BatchRead] = [RangeRead(r.read_from, r.decode_after, r.end, server_id, generation, watermarks)
                                  for r, server_id in zip(ranges, ids)]
        if gap is not None:
            reads.insert(0, GapRead(gap, generation))
        if generation != previous:
            reads.insert(0, ActivationRead(previous, generation, here, ids[-1], self.on_binlog_purged, watermarks))
        return reads

    def _server_ids(self, count: int) -> list[int]:
        low, high = self.server_id_range
        base = pick_server_id(self.server_id_range)
        return [low + (base - low + i) % (high - low + 1) for i in range(count)]

    def _translated_watermarks(self, conn: Any, begin: BinlogOffset, here: BinlogOffset, number: int,
                               previous: int) -> Watermarks:
        """High watermarks of generation ``number`` read on an earlier server than the one this batch
        reads (a failover) that the stream still compares changes with exactly (after the batch's
        start ``begin``, or of a split this batch activates), translated into this server's binlog
        by their GTID positions."""
        if here.epoch == 0:  # the first server: no watermark was read on an earlier one
            return {}
        new = self.state.load(number)
        if all_in_epoch(new, here.epoch):
            return {}
        older = self.state.load(previous) if number != previous else new
        return {f.split.split_id: self.servers.translate(conn, f.high_watermark, here.epoch)
                for f in watermarks_to_translate(new, older, begin, here.epoch)}
