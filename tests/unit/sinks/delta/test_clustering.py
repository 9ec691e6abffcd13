"""Clustering a Delta table's data files by the chunk key (sinks/clustering.py, ``DeltaSink.cluster``):
which files a run rewrites, that it keeps every row and changes none, that its files come out with
ranges apart, and that a commit racing it wins, on a real Delta table on local disk."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, TableFeatures, write_deltalake
from deltalake.schema import Field as DeltaField

from airflow_provider_mysqlcdc.cdc.errors import ConcurrentCommit
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.sinks.clustering import HeldFile, clustering_plan
from airflow_provider_mysqlcdc.sinks.delta.clustering import CLUSTERING_COMMIT, cluster_table, held_files
from airflow_provider_mysqlcdc.sinks.delta.sink import DeltaSink
from devtools.verify import read_delta

T = TableId("db", "line items")  # a name its folder keeps and a URI escapes
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string()), pa.field("_cdc_chunk", pa.string())])
MIB = 1 << 20


def rows(*ids: int, v: str = "a") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [v] * len(ids), "_cdc_chunk": [f"k{i:04d}" for i in ids]},
                    schema=SCHEMA)


def held(name: str, low: int, high: int, size_mib: float) -> HeldFile:
    return HeldFile(name, int(size_mib * MIB), 100, f"k{low:04d}", f"k{high:04d}")


def names(plan: list[list[HeldFile]]) -> list[list[str]]:
    return [[f.path for f in group] for group in plan]


@pytest.fixture
def sink(tmp_path) -> DeltaSink:
    sink = DeltaSink(str(tmp_path / "lake"))
    DeltaTable.create(sink.table_uri(T), SCHEMA)
    return sink


def test_files_whose_ranges_overlap_are_rewritten_together_and_large_apart_files_stay():
    files = [held("a", 0, 99, 100), held("b", 100, 199, 100), held("wide", 50, 150, 100), held("c", 200, 299, 100)]
    plan, left = clustering_plan(files, target_bytes=128 * MIB, max_rewrite_bytes=1024 * MIB)
    assert names(plan) == [["a", "wide", "b"]] and left == 0


def test_runs_of_small_neighbours_are_joined_up_to_the_target_size():
    small = [held(f"s{n:02d}", 10 * n, 10 * n + 9, 7) for n in range(40)]  # small: under 256 / 32 MiB
    files = small + [held("big", 400, 499, 100), held("t", 500, 509, 7), held("u", 510, 519, 7)]
    plan, _ = clustering_plan(files, target_bytes=256 * MIB, max_rewrite_bytes=1024 * MIB)
    # 36 files make 252 MiB, a 37th would pass 256 MiB; the big file ends a run
    assert names(plan) == [[f"s{n:02d}" for n in range(36)], [f"s{n:02d}" for n in range(36, 40)], ["t", "u"]]


def test_with_large_files_apart_small_files_spanning_them_are_packed_and_only_a_mostly_deleted_large_one_folds():
    large = [held(f"p{n}", 100 * n, 100 * n + 99, 100) for n in range(4)]
    large[2] = HeldFile("p2", 100 * MIB, 70, "k0200", "k0299", deleted=30)  # 30% deleted: folds alone
    batches = [held(f"b{n:02d}", 0, 399, 1) for n in range(20)]  # each batch's random keys span the table
    plan, _ = clustering_plan(large + batches, target_bytes=128 * MIB, large_apart=True)
    assert names(plan) == [[f"b{n:02d}" for n in range(20)], ["p2"]]
    whole, _ = clustering_plan(large + batches, target_bytes=128 * MIB, max_rewrite_bytes=1024 * MIB)
    assert sorted(names(whole)[0]) == sorted(f.path for f in large + batches)  # without: the whole table rewritten


def test_a_file_of_a_snapshot_partition_is_not_small():
    files = [held(f"p{n}", 10 * n, 10 * n + 9, 12) for n in range(40)]  # 250k rows of a TPC-DS customer
    assert clustering_plan(files)[0] == []


def test_a_run_rewrites_overlapping_groups_first_and_leaves_what_passes_its_budget_to_the_next():
    files = [held("s1", 0, 9, 1), held("s2", 10, 19, 1), held("a", 100, 199, 60), held("b", 150, 250, 60),
             held("c", 300, 399, 60), held("d", 350, 450, 60)]
    plan, left = clustering_plan(files, target_bytes=128 * MIB, max_rewrite_bytes=241 * MIB)
    assert names(plan) == [["a", "b"], ["c", "d"]] and left == 0
    plan, _ = clustering_plan(files, target_bytes=128 * MIB, max_rewrite_bytes=200 * MIB)
    assert names(plan) == [["s1", "s2"], ["a", "b"]]


def test_an_overlapping_group_larger_than_a_run_may_rewrite_is_left_and_counted():
    files = [held("a", 0, 99, 300), held("b", 50, 150, 300), held("c", 200, 209, 1), held("d", 210, 219, 1)]
    plan, left = clustering_plan(files, target_bytes=128 * MIB, max_rewrite_bytes=512 * MIB)
    assert names(plan) == [["c", "d"]] and left == 1


def test_a_clustered_table_keeps_every_row_in_files_whose_ranges_are_apart(sink):
    uri = sink.table_uri(T)
    for ids in [range(0, 400, 2), range(1, 400, 2), range(1000, 1010)]:  # evens and odds overlap
        write_deltalake(uri, rows(*ids), mode="append")
    before = read_delta(uri).sort_by("id")
    result = sink.cluster(T, target_bytes=2048)
    table = DeltaTable(uri)
    assert read_delta(uri).sort_by("id").equals(before)
    ranges = sorted((f.low, f.high) for f in held_files(table, uri))
    assert all(high < low for (_, high), (low, _) in zip(ranges, ranges[1:])), ranges
    assert result is not None and (result.files_read, result.rows) == (2, 400)
    assert result.files_written == len(ranges) - 1 > 1


def test_a_clustering_commit_changes_no_data(sink):
    uri = sink.table_uri(T)
    write_deltalake(uri, rows(1, 5), mode="append")
    write_deltalake(uri, rows(3, 7), mode="append")
    sink.cluster(T)
    commit = Path(uri, "_delta_log", f"{DeltaTable(uri).version():020d}.json").read_text().splitlines()
    actions = [json.loads(line) for line in commit]
    changes = [a[kind]["dataChange"] for a in actions for kind in ("add", "remove") if kind in a]
    assert changes == [False, False, False]
    assert DeltaTable(uri).history(1)[0][CLUSTERING_COMMIT] == "2 file(s) rewritten as 1 (4 rows)"


def test_a_merge_after_clustering_reads_only_the_file_holding_its_key(sink):
    uri = sink.table_uri(T)
    for start in range(0, 40, 10):  # interleaved: every file spans the whole range
        write_deltalake(uri, rows(*range(start // 10, 400, 4)), mode="append")
    sink.cluster(T, target_bytes=1024)
    files = len(held_files(DeltaTable(uri), uri))
    DeltaTable(uri).merge(rows(201, v="b"), predicate="t.id = s.id AND t._cdc_chunk >= 'k0201' AND t._cdc_chunk <= 'k0201'",
                          source_alias="s", target_alias="t").when_matched_update_all().execute()
    assert files > 4
    assert DeltaTable(uri).history(1)[0]["operationMetrics"]["num_target_files_scanned"] == 1


def test_a_commit_that_rewrote_a_file_meanwhile_fails_the_clustering_which_leaves_no_files(sink):
    uri = sink.table_uri(T)
    write_deltalake(uri, rows(1, 5), mode="append")
    write_deltalake(uri, rows(3, 7), mode="append")
    planned = DeltaTable(uri)
    DeltaTable(uri).merge(rows(3, v="b"), predicate="t.id = s.id", source_alias="s",
                          target_alias="t").when_matched_update_all().execute()
    with pytest.raises(ConcurrentCommit, match="it changed"):
        cluster_table(planned, uri)
    assert not list(Path(uri).glob("clustered-*"))
    assert sink.cluster(T) is not None  # planned again from the merge's version
    values = {r["id"]: r["v"] for r in read_delta(uri).to_pylist()}
    assert values == {1: "a", 3: "b", 5: "a", 7: "a"}


@pytest.mark.parametrize("make", ["column mapping", "an unknown writer feature"])
def test_a_table_whose_files_or_features_a_clustering_commit_would_not_keep_right_is_left_as_it_is(tmp_path, make):
    """Column mapping (its files' columns are not the table's: on delta-rs's legacy protocol no feature
    names it) or a writer feature the log's commits do not know: such a table is not clustered."""
    sink = DeltaSink(str(tmp_path / "lake"))
    uri = sink.table_uri(T)
    if make == "column mapping":
        DeltaTable.create(uri, SCHEMA, configuration={"delta.columnMapping.mode": "name"})
    else:
        DeltaTable.create(uri, SCHEMA)
        DeltaTable(uri).alter.add_feature(TableFeatures.ChangeDataFeed, allow_protocol_versions_increase=True)
    for start in range(0, 40, 10):  # interleaved: clustering would rewrite every file
        write_deltalake(uri, rows(*range(start // 10, 400, 4)), mode="append")
    version = DeltaTable(uri).version()
    assert sink.cluster(T, target_bytes=1024) is None
    assert DeltaTable(uri).version() == version


def test_a_table_with_nothing_to_rewrite_is_left_as_it_is(sink):
    uri = sink.table_uri(T)
    write_deltalake(uri, rows(1, 2), mode="append")
    write_deltalake(uri, rows(3, 4), mode="append")
    version = DeltaTable(uri).version()
    assert sink.cluster(T, target_bytes=8) is None
    assert DeltaTable(uri).version() == version


def test_files_without_chunk_statistics_are_left_where_they_are(sink):
    uri = sink.table_uri(T)
    DeltaTable(uri).alter.set_table_properties({"delta.dataSkippingNumIndexedCols": "0"})
    write_deltalake(uri, rows(1, 5), mode="append")
    write_deltalake(uri, rows(3, 7), mode="append")
    assert held_files(DeltaTable(uri), uri) == [] and sink.cluster(T) is None


def test_a_table_is_clustered_only_once_min_files_files_need_it(sink):
    uri = sink.table_uri(T)
    for n in range(3):
        write_deltalake(uri, rows(10 * n, 10 * n + 1), mode="append")
    assert sink.cluster(T, min_files=4) is None
    write_deltalake(uri, rows(99), mode="append")
    assert sink.cluster(T, min_files=4).files_read == 4


def test_files_are_cut_only_where_the_chunk_value_changes(sink):
    """A composite key's rows share their chunk key's value: no two files may hold the same one."""
    uri = sink.table_uri(T)
    composite = pa.table({"id": pa.array(range(10), pa.int64()), "v": ["a"] * 10,
                          "_cdc_chunk": ["k1"] * 4 + ["k2"] * 4 + ["k3"] * 2}, schema=SCHEMA)
    write_deltalake(uri, composite.slice(0, 5), mode="append")  # k1 x4, k2 x1
    write_deltalake(uri, composite.slice(5), mode="append")  # k2 x3, k3 x2: overlaps the first at k2
    sink.cluster(T, target_bytes=1)  # as many pieces as bytes: a cut wherever one is allowed
    files = sorted(held_files(DeltaTable(uri), uri), key=lambda f: f.low)
    assert [(f.low, f.high, f.rows) for f in files] == [("k1", "k1", 4), ("k2", "k2", 4), ("k3", "k3", 2)]


def test_files_written_before_a_column_was_added_are_clustered_with_it_empty(sink):
    uri = sink.table_uri(T)
    write_deltalake(uri, rows(1, 5), mode="append")
    DeltaTable(uri).alter.add_columns([DeltaField("w", "long", nullable=True)])
    write_deltalake(uri, rows(3, 7).append_column("w", pa.array([30, 70], pa.int64())), mode="append")
    assert sink.cluster(T).files_read == 2
    values = {r["id"]: r["w"] for r in read_delta(uri).to_pylist()}
    assert values == {1: None, 3: 30, 5: None, 7: 70}


def test_a_file_appended_while_clustering_ran_stays(sink):
    uri = sink.table_uri(T)
    write_deltalake(uri, rows(1, 5), mode="append")
    write_deltalake(uri, rows(3, 7), mode="append")
    planned = DeltaTable(uri)
    write_deltalake(uri, rows(9), mode="append")  # a pure append: no file of the plan removed
    assert cluster_table(planned, uri).files_read == 2
    assert sorted(read_delta(uri).column("id").to_pylist()) == [1, 3, 5, 7, 9]


def test_a_run_is_bounded_by_the_memory_its_rows_take_decompressed():
    """Small files of rows that compress well: the run takes as many as fit in memory, not in bytes."""
    files = [held(f"s{n}", 10 * n, 10 * n + 9, 1) for n in range(10)]  # 1 MiB each, 20 MiB decompressed
    plan, _ = clustering_plan(files, target_bytes=128 * MIB, max_rewrite_bytes=100 * MIB,
                              memory_of=lambda f: 20 * MIB)
    assert names(plan) == [[f"s{n}" for n in range(5)]]
