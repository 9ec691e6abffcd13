"""The stream's clustering between batches (stream/upkeep.py): a merge-on-read table only gets its
small files packed and its mostly deleted files folded (the plan itself: tests/unit/sinks/delta/
test_clustering.py), a copy-on-write one its key ranges set apart again; and the next batch waits
for at most a share of the batch's own time, the tables left over clustered first after the next one."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.model.rules import Route, TableRule
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, Generation
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.clustering import ClusteringResult
from airflow_provider_mysqlcdc.sinks.delta.sink import DeltaSink
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.stream.upkeep import CLUSTER_SHARE, IDLE_S, StreamUpkeep, inactive_sink_tables


@pytest.fixture(autouse=True)
def sink_format():
    """Once, not per sink variant (tests/unit/stream/conftest.py): the sink here is a stand-in."""
    return "delta"


MOR, COW = TableId("shop", "orders"), TableId("shop", "audit")
TABLES = [TableId("shop", f"t{n}") for n in range(6)]
#: what each clustering run of the fake sink takes on the fake clock
RUN_S = 1.0


class ClusterCalls(DeltaSink):
    """A Delta sink that records how the stream asks it to cluster; tables in ``due`` take ``RUN_S``
    on the test's clock and report a run, the others are checked at no cost and need none."""

    calls: list[tuple[TableId, bool]]
    due: set[TableId]
    failing: set[TableId]
    now: list[float]

    def cluster(self, table_id, **kwargs):  # type: ignore[override]
        self.calls.append((table_id, kwargs["large_apart"]))
        if table_id not in self.due | self.failing:
            return None
        self.now[0] += RUN_S
        if table_id in self.failing:
            raise OSError("the object store went away")
        return ClusteringResult(4, 1, 100, 0)


def upkeep(tmp_path, due=(), **sink_options) -> tuple[StreamUpkeep, ClusterCalls]:
    sink = ClusterCalls(str(tmp_path / "lake"), **sink_options)
    sink.calls, sink.due, sink.failing, sink.now = [], set(due), set(), [0.0]
    job = StreamJob(state=str(tmp_path / "state"), sink=SinkSpec(str(tmp_path / "lake")), cluster_after_files=4)
    return StreamUpkeep(job, sink, PipelineState(str(tmp_path / "state")), clock=lambda: sink.now[0]), sink


def test_between_batches_a_merge_on_read_tables_large_files_stay_apart_and_a_copy_on_write_ones_do_not(tmp_path):
    stream, sink = upkeep(tmp_path, table_merge_modes=((str(COW), "copy-on-write"),))
    stream.cluster_due({MOR, COW}, batch_s=10.0)
    assert sorted(sink.calls) == sorted([(MOR, True), (COW, False)])


def test_clustering_after_a_batch_stops_at_its_share_of_the_batchs_time_and_the_rest_go_first_after_the_next(tmp_path):
    stream, sink = upkeep(tmp_path, due=TABLES)
    batch_s = 1.5 * RUN_S / CLUSTER_SHARE  # its share ends during the second run
    stream.cluster_due(set(TABLES), batch_s)
    assert [t for t, _ in sink.calls] == TABLES[:2]
    sink.calls.clear()
    stream.cluster_due({TABLES[0]}, batch_s)  # the next batch touched only the first table
    assert [t for t, _ in sink.calls] == TABLES[2:4]
    sink.calls.clear()
    sink.due = set()  # the tables left need nothing more: checking them all costs nothing
    stream.cluster_due(set(), batch_s)
    assert [t for t, _ in sink.calls] == [*TABLES[4:], TABLES[0]]
    assert stream.waiting == []


def test_clustering_after_a_batch_runs_once_however_short_the_batch(tmp_path):
    stream, sink = upkeep(tmp_path, due=TABLES[:2])
    stream.cluster_due(set(TABLES), batch_s=0.0)
    assert [t for t, _ in sink.calls] == TABLES[:1]
    assert stream.waiting == TABLES[1:]


def test_checks_that_find_nothing_to_do_do_not_end_the_clustering_after_a_batch(tmp_path):
    stream, sink = upkeep(tmp_path, due=TABLES[-1:])
    stream.cluster_due(set(TABLES), batch_s=0.0)
    assert [t for t, _ in sink.calls] == TABLES and stream.waiting == []


def test_a_table_frozen_while_it_waited_for_clustering_is_not_clustered(tmp_path):
    stream, sink = upkeep(tmp_path, due=TABLES[:3])
    stream.cluster_due(set(TABLES[:3]), batch_s=0.0)
    sink.calls.clear()
    stream.cluster_due(set(), batch_s=100.0, left_out={TABLES[1]})
    assert [t for t, _ in sink.calls] == [TABLES[2]]


def test_a_clustering_that_fails_after_its_work_counts_against_the_batchs_share_too(tmp_path):
    stream, sink = upkeep(tmp_path, due=TABLES[1:])
    sink.failing = {TABLES[0]}
    stream.cluster_due(set(TABLES), batch_s=0.0)
    assert [t for t, _ in sink.calls] == TABLES[:1] and stream.waiting == TABLES[1:]


def test_a_quiet_stream_clusters_the_tables_left_waiting_one_at_a_time_once_idle_long_enough(tmp_path):
    stream, sink = upkeep(tmp_path, due=TABLES[:3])
    stream.cluster_due(set(TABLES[:3]), batch_s=0.0)
    sink.calls.clear()
    stream.cluster_idle()
    assert sink.calls == []  # no clustering since for less than IDLE_S
    sink.now[0] += IDLE_S
    stream.cluster_idle()
    assert [t for t, _ in sink.calls] == [TABLES[1]] and stream.waiting == [TABLES[2]]
    stream.cluster_idle()
    assert [t for t, _ in sink.calls] == [TABLES[1]]  # the next one IDLE_S later


def test_upkeep_leaves_a_routed_table_alone_only_once_every_shard_of_it_stopped():
    shard_a, shard_b, plain = TableId("shop_1", "orders"), TableId("shop_2", "orders"), TableId("shop", "audit")
    routed = TableRule(route=Route("shop", "orders"))
    generation = Generation(3, {shard_a: CapturedTable("id", [], routed), shard_b: CapturedTable("id", [], routed),
                                plain: CapturedTable("id", [])})
    assert inactive_sink_tables(generation, {shard_a}) == set()
    assert inactive_sink_tables(generation, {shard_a, shard_b}) == {TableId("shop", "orders")}
    assert inactive_sink_tables(generation, {plain}) == {plain}


def test_the_end_of_a_bounded_run_clusters_every_table_left_waiting(tmp_path):
    stream, sink = upkeep(tmp_path, due=TABLES)
    stream.cluster_due(set(TABLES), batch_s=0.0)
    sink.calls.clear()
    stream.cluster_waiting(left_out={TABLES[3]})
    assert [t for t, _ in sink.calls] == [t for t in TABLES[1:] if t != TABLES[3]] and stream.waiting == []
