"""What a clustering run may rewrite, on every table format (sinks/clustering.py and each format's
commit of a run): rows in memory, not Parquet bytes, bound a run; packing a merge-on-read table's
small files leaves the large files they overlap as they are. Real tables on local disk."""

from __future__ import annotations

import random

import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.base import Sink
from airflow_provider_mysqlcdc.sinks.clustering import ClusteringResult
from airflow_provider_mysqlcdc.sinks.delta import clustering as delta_clustering
from airflow_provider_mysqlcdc.sinks.delta.sink import DeltaSink
from airflow_provider_mysqlcdc.sinks.factory import SINK_FORMATS, open_sink
from airflow_provider_mysqlcdc.sinks.iceberg import maintenance as iceberg_maintenance
from airflow_provider_mysqlcdc.sinks.iceberg.sink import IcebergSink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_change_batch
from tests.unit.stream.harness import update

T = TableId("shop", "t")
ID = Column("id", "int", "int(11)", False)
V = Column("v", "varchar", "varchar(255)", True, charset="utf8mb4", collation="utf8mb4_bin")
SCHEMA = TableSchema(T, (ID, V), ("id",))
AT = BinlogOffset("mysql-bin.000001", 100)


@pytest.fixture(params=list(SINK_FORMATS))
def writer(request, tmp_path) -> SinkWriter:
    sink = open_sink(SinkSpec(str(tmp_path / "lake"), request.param, merge_mode="merge-on-read"))
    sink.prepare(SCHEMA)
    return SinkWriter(sink, SCHEMA, "id", KeyOrdering(ID))


def split(writer: SinkWriter, index: int, start: int, end: int, value) -> None:
    writer.write_split(FinishedSplit(SnapshotSplit(T, index, "id", start or None, end), AT),
                       [{"id": i, "v": value(i)} for i in range(start, end)])


def cluster(sink: Sink, **bounds: int | bool) -> ClusteringResult | None:
    """One clustering run of the table, as the format's own run (the bounds a sink's ``cluster`` fixes)."""
    if isinstance(sink, DeltaSink):
        uri = sink.table_uri(T)
        return delta_clustering.cluster_table(DeltaTable(uri), uri, **bounds)  # type: ignore[arg-type]
    assert isinstance(sink, IcebergSink)
    return iceberg_maintenance.cluster_table(sink.open_table(T), **bounds)  # type: ignore[arg-type]


def data_files(sink: Sink) -> set[str]:
    if isinstance(sink, DeltaSink):
        return set(DeltaTable(sink.table_uri(T)).file_uris())
    assert isinstance(sink, IcebergSink)
    return set(sink.open_table(T).inspect.data_files().column("file_path").to_pylist())


def held(sink: Sink) -> dict[int, str]:
    rows = sink.read(T).to_pylist()
    assert len({r["id"] for r in rows}) == len(rows), "a key twice"
    return {r["id"]: r["v"] for r in rows}


def test_a_run_takes_only_the_small_files_whose_rows_fit_its_memory_however_small_their_parquet(writer):
    """Rows that compress to almost nothing: six files far under the bound in Parquet bytes, whose
    rows take more than twice the bound in memory: one run rewrites the two that fit."""
    for index in range(6):
        split(writer, index, 2_000 * index, 2_000 * (index + 1), lambda i: "x" * 250)
    rows = held(writer.sink)
    one_file = writer.sink.read(T).slice(0, 2_000).nbytes
    result = cluster(writer.sink, max_rewrite_bytes=int(2.5 * one_file))
    assert result is not None and (result.files_read, result.rows) == (2, 4_000)
    assert held(writer.sink) == rows


def test_packing_small_files_leaves_the_large_files_they_overlap_as_they_are(writer):
    """A merge-on-read table between batches (``large_apart``): each batch's file of random keys
    spans the large snapshot files; packing those files rewrites them only, never the large ones."""
    for index in range(2):
        split(writer, index, 5_000 * index, 5_000 * (index + 1), lambda i: f"{i * 7919 % 100_003:08d}" * 8)
    large = data_files(writer.sink)
    draw = random.Random(47)
    for batch in range(1, 5):
        keys = draw.sample(range(10_000), 20)
        apply_change_batch({T: writer}, [update(T, 100 * batch + n, {"id": k, "v": "a"}, {"id": k, "v": f"b{batch}"})
                                         for n, k in enumerate(keys)], app_id="app", batch_id=batch)
    rows = held(writer.sink)
    small = data_files(writer.sink) - large
    assert len(small) >= 4
    # small: under target_bytes / 32, which the snapshot's files are not
    result = cluster(writer.sink, target_bytes=32 * 40_000, large_apart=True)
    assert result is not None and result.files_read == len(small)
    assert large <= data_files(writer.sink) and not small & data_files(writer.sink)
    assert held(writer.sink) == rows
