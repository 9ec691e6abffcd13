"""The stream's batches run in the driver itself, apart from Spark (``stream_engine="driver"``).

Structured Streaming (spark/stream_job.py) pays for each micro-batch: the JVM plans the binlog
source's batch, writes its offsets and commit files, schedules a task per read, and the rows come
back through Arrow IPC and ``collect``. ``StreamLoop`` does the same work in the process that would
start the query: ``BatchPlanner`` (batches.py) says where a batch ends and what it reads,
``BinlogReading`` (reading.py) reads it, its items go straight into the applier (applier.py) as they
are read, so memory is bounded as on the Spark path, and the batch's end is then recorded.

Exactly once rests on what it rests on for Spark's batches: every sink commit records the binlog
position of its last change, and a table applies only the changes after its position. The loop's
own checkpoint is the end of the last batch it finished (``progress/stream-offset.json``, written
after the batch's commits and before the staged files that batch applied are released), which is
also where a stream with a new Spark checkpoint starts; a kill -9 at any moment restarts from the
last end recorded and re-applies nothing a table holds.

Between batches (``BatchSteps``): clustering and maintenance (upkeep.py), the heartbeat
(heartbeat.py), and a stop request or a lost lease end the loop. A continuous loop whose batch
reached the head waits ``trigger_interval_s`` from the batch's start (as Spark's processing-time
trigger does); a batch its limits cut short is followed at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.sinks.change_columns import TableChanges
from airflow_provider_mysqlcdc.state.cleanup import release_applied_staged_files
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.stream.applier import AppliedBatch, BatchApplier
from airflow_provider_mysqlcdc.stream.batches import ActivationRead, BatchPlanner, BatchRead
from airflow_provider_mysqlcdc.stream.events import BatchItem, PieceRead, reading_summary
from airflow_provider_mysqlcdc.stream.heartbeat import Heartbeat, beat_query
from airflow_provider_mysqlcdc.stream.positions import record_processed
from airflow_provider_mysqlcdc.stream.read_process import Reading
from airflow_provider_mysqlcdc.stream.reading import PIECE, ReadItem, in_binlog_order
from airflow_provider_mysqlcdc.stream.upkeep import StreamUpkeep, inactive_sink_tables

log = logging.getLogger(__name__)


class BatchSteps:
    """What each batch does once its items are known, whichever engine read them: apply them
    (applier.py), record the batch's progress, cluster the tables it merged into; and between batches,
    maintenance (upkeep.py). ``applying`` is held while a batch is applied or the tables are
    maintained: never both at once."""

    def __init__(self, applier: BatchApplier, upkeep: StreamUpkeep):
        self.applier = applier
        self.upkeep = upkeep
        self.applying = threading.Lock()

    def __getstate__(self) -> dict:
        """On a Spark Connect session this object is pickled to the server: a lock does not travel."""
        state = dict(self.__dict__)
        del state["applying"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.applying = threading.Lock()

    def apply(self, generation: int | None, items: Iterator[BatchItem], batch_id: int, *, started: float,
              read_s: Callable[[], float], spill_files: int = 0, pieces: Callable[[], list[PieceRead]] = list,
              began_at: float = 0.0) -> AppliedBatch:
        """Apply a batch (begun at ``started``, monotonic; ``began_at``, the wall clock), record its
        progress, and cluster what it merged into. ``read_s`` and ``pieces`` are asked once the items
        are applied: the seconds spent reading, and the reads' timings."""
        done = self.applier.apply_batch(generation, items, batch_id)
        self.applier.record_progress(batch_id, done, spill_files, read_s(), time.monotonic() - started,
                                     reading_summary(pieces(), began_at))
        self.upkeep.cluster_due({w.target.table_id for t in done.merged_tables - set(self.applier.frozen)
                                 if (w := self.applier.writers.get(t)) is not None}, time.monotonic() - started,
                                self.stopped_sink_tables())
        return done

    def maintain_idle(self) -> None:
        """While no batch runs: what ``StreamUpkeep.maintain_due`` does, so a maintenance task is
        answered by a quiet stream too, and the clustering the last batches left waiting. A batch that
        starts meanwhile waits for it."""
        if self.applying.acquire(blocking=False):
            try:
                self.upkeep.maintain_due()
                self.upkeep.cluster_idle(self.stopped_sink_tables())
            finally:
                self.applying.release()

    def stopped_sink_tables(self) -> set[TableId]:
        """The sink tables upkeep leaves alone: each of their source tables frozen or no longer captured."""
        return inactive_sink_tables(self.applier.generation, self.applier.frozen.keys() | self.applier.removed)


_END = object()


def changes_held(item: Any) -> int:
    """What an item weighs in a read-ahead: its changes (a marker: 1)."""
    return item.data.num_rows if isinstance(item, TableChanges) else 1


class ReadAhead:
    """Reading while applying: ``items`` iterated on a thread of its own, at most ``depth`` ahead of
    whoever iterates this (the applier), each item weighing ``weight(item)`` (1 by default), so the
    reads (in the read process, read_process.py, or decoding here) go on while the merges write
    (Arrow, delta-rs and pyiceberg, which let the interpreter go). One item is always let through,
    however much it weighs. The reads' errors are raised where the items are taken; ``close`` stops
    the reads (the applier failed) and waits for them. ``waited_s``: how long the applier waited for
    items, the batch's reading as it felt it."""

    def __init__(self, items: Iterator[Any], depth: int, clock: Callable[[], float] = time.monotonic,
                 weight: Callable[[Any], int] = lambda _: 1):
        self.items = items
        self.clock = clock
        self.depth = depth  # 0: no thread, the items read as they are taken
        self.weight = weight
        self.ready: deque[tuple[Any, int]] = deque()
        self.held = 0
        self.changed = threading.Condition()
        self.closed = threading.Event()
        self.waited_s = 0.0
        self.thread = threading.Thread(target=self._read, name="mysqlcdc-read-ahead", daemon=True)
        if depth:
            self.thread.start()

    def _read(self) -> None:
        try:
            for item in self.items:
                if not self._put(item, self.weight(item)):
                    return
            self._put(_END, 0)
        except BaseException as exc:  # noqa: BLE001 - handed to the applier's thread, raised there
            self._put(_Failed(exc), 0)
        finally:
            self._close_items()

    def _close_items(self) -> None:
        close = getattr(self.items, "close", None)
        if close is not None:
            close()

    def _put(self, item: Any, weight: int) -> bool:
        with self.changed:
            while self.held and self.held + weight > self.depth and not self.closed.is_set():
                self.changed.wait()
            if self.closed.is_set():
                return False
            self.ready.append((item, weight))
            self.held += weight
            self.changed.notify_all()
            return True

    def _take(self) -> Any:
        with self.changed:
            while not self.ready:
                self.changed.wait()
            item, weight = self.ready.popleft()
            self.held -= weight
            self.changed.notify_all()
            return item

    def __iter__(self) -> Iterator[Any]:
        while True:
            began = self.clock()
            item = self._take() if self.depth else next(self.items, _END)
            self.waited_s += self.clock() - began
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item

    def close(self) -> None:
        with self.changed:
            self.closed.set()
            self.changed.notify_all()
        if self.depth:
            self.thread.join()  # the thread closes the items
        else:
            self._close_items()


@dataclass(frozen=True)
class _Failed:
    error: BaseException


@dataclass
class LoopResult:
    """What a loop did: its batches, the id of its last one and where that one ended."""

    batches: int = 0
    last_batch: int | None = None
    end: StreamOffset | None = None


class StreamLoop:
    """The stream's batches, one after the other, from ``start`` (see the module doc). ``measure``: the
    server's head and the bytes behind it of a batch's end (positions.py ``record_processed``);
    ``run_query``: runs the heartbeat query on the source."""

    def __init__(self, job: StreamJob, state: PipelineState, steps: BatchSteps, planner: BatchPlanner,
                 reading: Reading, fence: Callable[[], None], *,
                 measure: Callable[[BinlogOffset], tuple[BinlogOffset, int | None]] | None = None,
                 run_query: Callable[[str], None] | None = None, stopping: threading.Event | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.job = job
        self.state = state
        self.steps = steps
        self.planner = planner
        self.reading = reading
        self.fence = fence
        self.measure = measure
        self.run_query = run_query
        self.clock = clock
        self.heartbeat = Heartbeat(job.heartbeat_interval_s, clock)
        self.stopping = stopping or threading.Event()

    def stop(self) -> None:
        """End the loop after the batch it is applying (or at once, between batches)."""
        self.stopping.set()

    def run(self, start: StreamOffset, *, first_batch: int = 0, until: StreamOffset | None = None) -> LoopResult:
        """Batches from ``start`` until stopped, or (``until``) until the binlog up to it is applied."""
        position, batch_id, result = start, first_batch, LoopResult()
        while not self.stopping.is_set():
            started, began_at = self.clock(), time.time()
            head = until if until is not None else self.planner.head()
            end = self.planner.end(position, head, max_bytes=self.job.max_batch_bytes,
                                   max_events=self.job.max_batch_events)
            if end == position:
                if until is not None:  # done: what clustering the last batches left waiting, then no more
                    with self.steps.applying:
                        self.steps.upkeep.cluster_waiting(self.steps.stopped_sink_tables())
                    break
                self._idle(result)
                self.stopping.wait(self.job.trigger_interval_s)
                continue
            self.fence()
            self._batch(position, end, batch_id, started, began_at)
            result.batches, result.last_batch, result.end = result.batches + 1, batch_id, end
            position, batch_id = end, batch_id + 1
            self.heartbeat.batch_finished()
            if until is None and end.offset == head.offset:  # caught up: the next batch at the next trigger
                self.stopping.wait(max(0.0, self.job.trigger_interval_s - (self.clock() - started)))
        return result

    def _batch(self, start: StreamOffset, end: StreamOffset, batch_id: int, started: float, began_at: float) -> None:
        pieces: list[PieceRead] = []
        reads = self.planner.reads(start, end)
        # an activation's items change what the next reads find (remembered schemas, the sink's
        # tables): a batch with one is read as it is applied, as Structured Streaming reads first.
        # Else the reads are up to a unit's changes ahead: the next unit is read while one merges
        depth = 0 if any(isinstance(r, ActivationRead) for r in reads) else self.job.max_apply_changes
        self.steps.applying.acquire()  # maintenance between batches waits for it, and it waits for maintenance
        try:
            ahead = ReadAhead(self._items(reads, pieces), depth, self.clock, weight=changes_held)
            try:
                self.steps.apply(end.generation, iter(ahead), batch_id, started=started,
                                 read_s=lambda: ahead.waited_s, pieces=lambda: pieces, began_at=began_at)
                self.steps.upkeep.maintain_due()
            finally:
                ahead.close()
        finally:
            self.steps.applying.release()
        self.fence()  # another stream took over meanwhile: record nothing
        record_processed(self.state, self.job, end, batch_id, self.measure)
        # the loop restarts from ``end`` (recorded just now): no restart activates what this batch did
        release_applied_staged_files(self.state, end)

    def _items(self, reads: list[BatchRead], pieces: list[PieceRead]) -> Iterator[BatchItem]:
        """The batch's items in binlog order, as its reads give them; the reads' timings into ``pieces``."""
        for item in in_binlog_order(self._changes_and_markers(reads, pieces), lambda i: i.key):
            yield item.item

    def _changes_and_markers(self, reads: list[BatchRead], pieces: list[PieceRead]) -> Iterator[ReadItem]:
        for read in reads:
            for item in self.reading.read(read):
                if item.kind == PIECE:
                    pieces.append(item.item)
                else:
                    yield item

    def _idle(self, result: LoopResult) -> None:
        """No batch to run: maintenance, and the heartbeat when it is due."""
        self.steps.maintain_idle()
        if not self.heartbeat.due():
            return
        self.heartbeat.beat()
        if result.end is not None:
            self.fence()
            record_processed(self.state, self.job, result.end, result.last_batch, self.measure, heartbeat=True)
        beat_query(self.job.heartbeat_query, self.run_query)
