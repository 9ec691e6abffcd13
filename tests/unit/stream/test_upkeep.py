"""The stream's clustering between batches (stream/upkeep.py): a merge-on-read table only gets its
small files packed and its mostly deleted files folded (the plan itself: tests/unit/sinks/delta/
test_clustering.py), a copy-on-write one its key ranges set apart again."""

from __future__ import annotations

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.delta.sink import DeltaSink
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.stream.upkeep import StreamUpkeep

MOR, COW = TableId("shop", "orders"), TableId("shop", "audit")


class ClusterCalls(DeltaSink):
    """A Delta sink that records how the stream asks it to cluster, and clusters nothing."""

    calls: list[tuple[TableId, bool]]

    def cluster(self, table_id, **kwargs):  # type: ignore[override]
        self.calls.append((table_id, kwargs["large_apart"]))
        return None


def test_between_batches_a_merge_on_read_tables_large_files_stay_apart_and_a_copy_on_write_ones_do_not(tmp_path):
    sink = ClusterCalls(str(tmp_path / "lake"), table_merge_modes=((str(COW), "copy-on-write"),))
    sink.calls = []
    job = StreamJob(state=str(tmp_path / "state"), sink=SinkSpec(str(tmp_path / "lake")), cluster_after_files=4)
    StreamUpkeep(job, sink, PipelineState(str(tmp_path / "state"))).cluster_due({MOR, COW})
    assert sorted(sink.calls) == sorted([(MOR, True), (COW, False)])
