"""The driver loop (stream/loop.py): which batches it runs, in what order it hands their items on,
what it records after each, and when it waits, beats and stops. Its planner and reading stand in
for the server here (the batch's reads and their items are the integration tests'); the state
location is real."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_provider_mysqlcdc.cdc.errors import InternalError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.protocol.progress import StreamOffsetProgress
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.registry import STREAM_OFFSET, PipelineState
from airflow_provider_mysqlcdc.stream.events import PieceRead
from airflow_provider_mysqlcdc.stream.loop import ReadAhead, StreamLoop
from airflow_provider_mysqlcdc.stream.reading import CHANGES, DDL, PIECE, ReadItem


@pytest.fixture(autouse=True)
def sink_format():
    """Once, not per sink variant (tests/unit/stream/conftest.py): no sink here."""
    return "delta"


def _at(position: int, generation: int = 1) -> StreamOffset:
    return StreamOffset(BinlogOffset("bin.000002", position), generation)


class Planner:
    """Heads to return one after the other (the last one from then on); a batch ends at the head, or
    ``step`` bytes after its start when that comes first."""

    def __init__(self, heads: list[StreamOffset], step: int = 0):
        self.heads, self.step = heads, step
        self.reads_asked: list[tuple[StreamOffset, StreamOffset]] = []

    def head(self) -> StreamOffset:
        return self.heads.pop(0) if len(self.heads) > 1 else self.heads[0]

    def end(self, start: StreamOffset, head: StreamOffset, **limits: int) -> StreamOffset:
        position = head.offset.position if not self.step else min(head.offset.position,
                                                                  start.offset.position + self.step)
        return _at(position, max(head.generation, start.generation))

    def reads(self, start: StreamOffset, end: StreamOffset) -> list[Any]:
        self.reads_asked.append((start, end))
        return [(start, end)]


class Reading:
    """A batch's items: one DDL marker at each of its positions, or those given, then its timings."""

    def __init__(self, items: list[ReadItem] | None = None):
        self.items = items

    def read(self, read: tuple[StreamOffset, StreamOffset]) -> Any:
        start, end = read
        items = self.items or [ReadItem((p, 0, 0), DDL, f"at {p}") for p in range(start.offset.position + 1,
                                                                                   end.offset.position + 1, 100)]
        return iter([*items, ReadItem((0, 0, 0), PIECE, PieceRead("", "", 0.0, 0.0, 0.0, 0))])


@dataclass
class Steps:
    """What the loop hands each batch to: the items and ids it got, and what it did between batches."""

    applied: list[tuple[int, list[Any]]] = field(default_factory=list)
    idle: int = 0
    drained: int = 0  # the clustering left waiting, at the end of a bounded run
    applying: threading.Lock = field(default_factory=threading.Lock)

    @property
    def upkeep(self) -> Any:
        return self

    def maintain_due(self) -> None:
        pass

    def cluster_waiting(self, left_out: Any) -> None:
        self.drained += 1

    def stopped_sink_tables(self) -> set:
        return set()

    def maintain_idle(self) -> None:
        self.idle += 1

    def apply(self, generation: int | None, items: Any, batch_id: int, **timings: Any) -> None:
        self.applied.append((batch_id, list(items)))


def _loop(tmp_path, planner: Planner, reading: Reading | None = None, **job: Any) -> tuple[StreamLoop, Steps]:
    state = PipelineState(str(tmp_path / "state"))
    steps = Steps()
    spec = StreamJob(state=state.location, sink=SinkSpec(str(tmp_path / "lake")), app_id="mysqlcdc-test",
                     trigger_interval_s=0.0, **job)
    return StreamLoop(spec, state, steps, planner, reading or Reading(), lambda: None), steps  # type: ignore[arg-type]


def _recorded(tmp_path) -> StreamOffset | None:
    progress = PipelineState(str(tmp_path / "state")).read_progress(StreamOffsetProgress, STREAM_OFFSET)
    return progress.offset if progress else None


def test_an_available_now_loop_applies_its_batches_in_order_up_to_its_target_and_records_each_end(tmp_path):
    planner = Planner([_at(1000)], step=400)
    loop, steps = _loop(tmp_path, planner)

    done = loop.run(_at(4), first_batch=7, until=_at(1000))

    assert planner.reads_asked == [(_at(4), _at(404)), (_at(404), _at(804)), (_at(804), _at(1000))]
    assert [batch for batch, _ in steps.applied] == [7, 8, 9]
    assert [items for _, items in steps.applied][0] == ["at 5", "at 105", "at 205", "at 305"]  # timings kept apart
    assert (done.batches, done.last_batch, done.end) == (3, 9, _at(1000))
    assert _recorded(tmp_path) == _at(1000) and steps.drained == 1


def test_a_newer_generation_at_the_same_position_is_a_batch_of_its_own(tmp_path):
    """An activation with no binlog to read: the batch ``(start, start]`` carries the newer generation."""
    planner = Planner([_at(500, generation=2)])
    loop, steps = _loop(tmp_path, planner)

    loop.run(_at(500, generation=1), until=_at(500, generation=2))

    assert planner.reads_asked == [(_at(500, 1), _at(500, 2))] and _recorded(tmp_path) == _at(500, 2)


def test_items_out_of_binlog_order_are_refused_before_they_are_applied(tmp_path):
    reading = Reading([ReadItem((300, 0, 0), CHANGES, "later"), ReadItem((200, 0, 0), CHANGES, "earlier")])
    loop, steps = _loop(tmp_path, Planner([_at(1000)]), reading)

    with pytest.raises(InternalError, match="out of binlog order"):
        loop.run(_at(4), until=_at(1000))
    assert _recorded(tmp_path) is None


def test_a_caught_up_continuous_loop_maintains_between_batches_and_beats_when_due(tmp_path, monkeypatch):
    planner = Planner([_at(300), _at(300), _at(300), _at(600), _at(600)])
    loop, steps = _loop(tmp_path, planner, heartbeat_interval_s=0.5)
    ticks = iter(range(10_000))
    loop.clock = loop.heartbeat.clock = lambda: float(next(ticks))  # a second a look: a heartbeat is always due
    recorded: list[tuple[StreamOffset, bool]] = []

    def record(state: Any, job: Any, end: StreamOffset, batch_id: Any, *args: Any, heartbeat: bool = False) -> None:
        recorded.append((end, heartbeat))
        if batch_id == 1 and not heartbeat:
            loop.stop()

    monkeypatch.setattr("airflow_provider_mysqlcdc.stream.loop.record_processed", record)
    done = loop.run(_at(4))

    assert [batch for batch, _ in steps.applied] == [0, 1] and done.end == _at(600) and steps.drained == 0
    assert steps.idle == 2  # the two looks that found the head at 300
    assert recorded == [(_at(300), False), (_at(300), True), (_at(300), True), (_at(600), False)]


def test_a_stop_before_a_batch_runs_none(tmp_path):
    loop, steps = _loop(tmp_path, Planner([_at(1000)]))
    loop.stop()

    assert loop.run(_at(4)).batches == 0 and steps.applied == []


def test_reading_ahead_hands_on_every_item_in_order_and_a_reads_error_where_the_items_are_taken():
    def items():
        yield from range(200)
        raise OSError("the binlog connection dropped")

    ahead = ReadAhead(items(), depth=8)
    taken = []
    with pytest.raises(OSError, match="connection dropped"):
        for item in ahead:
            taken.append(item)
    ahead.close()
    assert taken == list(range(200))


def test_closing_a_read_ahead_stops_its_reads_while_they_wait_for_room():
    closed = threading.Event()

    def items():
        try:
            yield from range(1_000_000)
        finally:
            closed.set()

    ahead = ReadAhead(items(), depth=4)
    assert next(iter(ahead)) == 0  # the applier took one, then failed
    ahead.close()
    assert closed.is_set() and not ahead.thread.is_alive()


def test_a_read_ahead_holds_at_most_its_depth_of_weight_but_always_one_item():
    weights = [4, 4, 4, 20, 1]
    produced = [threading.Event() for _ in weights]

    def items():
        for n, weight in enumerate(weights):
            produced[n].set()
            yield weight

    ahead = ReadAhead(items(), depth=10, weight=lambda w: w)
    taken = iter(ahead)
    assert produced[2].wait(60) and ahead.held == 8  # the third waits for room
    assert [next(taken), next(taken), next(taken)] == [4, 4, 4]
    assert produced[4].wait(60) and ahead.held == 20  # alone over the depth; the last waits
    assert list(taken) == [20, 1]
    ahead.close()


def test_a_read_ahead_of_depth_0_reads_each_item_as_it_is_taken_on_the_callers_thread():
    threads = []

    def items():
        for n in range(3):
            threads.append(threading.current_thread())
            yield n

    ahead = ReadAhead(items(), depth=0)
    assert list(ahead) == [0, 1, 2] and set(threads) == {threading.current_thread()}
    ahead.close()
