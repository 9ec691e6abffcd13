"""Merge-on-read into Iceberg (sinks/iceberg/merge_on_read.py, row_deltas.py): a batch names the rows it
replaces in position-delete files and appends their new images, so it rewrites only what it changes,
lands whole and exactly once, and every reader (ours, pyiceberg, DuckDB) and every snapshot reads the
same rows as the copy-on-write merge gives; the sink's other writes and its upkeep stay exact on a
table holding delete files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import DataFileContent, ManifestFile

from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.base import StreamCommit
from airflow_provider_mysqlcdc.sinks.data_files import write_data_file
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.iceberg import maintenance as iceberg_maintenance
from airflow_provider_mysqlcdc.sinks.iceberg import merge_on_read
from airflow_provider_mysqlcdc.sinks.iceberg.row_deltas import RowDelta, live_files, referenced_path
from airflow_provider_mysqlcdc.sinks.iceberg.sink import IcebergSink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_change_batch
from devtools.verify import duckdb_with
from tests.unit.sinks.delta.test_merge_on_read import random_batches
from tests.unit.stream.harness import delete, insert, off, update

T = TableId("shop", "t")
ID = Column("id", "int", "int(11)", False)
V = Column("v", "varchar", "varchar(20)", True, charset="utf8mb4", collation="utf8mb4_bin")
SCHEMA = TableSchema(T, (ID, V), ("id",))
ROWS = 2_000


def snapshotted(root: Path, mode: str, rows: int = ROWS) -> SinkWriter:
    """A table of ``rows`` rows in two snapshot files (read as of offset 5), merged into in ``mode``."""
    sink = open_sink(SinkSpec(str(root), "iceberg", merge_mode=mode))
    sink.prepare(SCHEMA)
    writer = SinkWriter(sink, SCHEMA, "id", KeyOrdering(ID))
    half = rows // 2
    writer.write_split(FinishedSplit(SnapshotSplit(T, 0, "id", None, half), off(5)),
                       [{"id": i, "v": "a"} for i in range(half)])
    writer.write_split(FinishedSplit(SnapshotSplit(T, 1, "id", half, None), off(5)),
                       [{"id": i, "v": "a"} for i in range(half, rows)])
    return writer


def sink_of(writer: SinkWriter) -> IcebergSink:
    assert isinstance(writer.sink, IcebergSink)
    return writer.sink


def held(writer: SinkWriter) -> dict[int, str]:
    rows = writer.sink.read(T).to_pylist()
    assert len(rows) == len({r["id"] for r in rows}), "a key twice"
    return {r["id"]: r["v"] for r in rows}


def batch(writer: SinkWriter, changes: list, batch_id: int) -> None:
    apply_change_batch({T: writer}, changes, app_id="app", batch_id=batch_id)


def data_paths(writer: SinkWriter) -> set[str]:
    return set(sink_of(writer).open_table(T).inspect.data_files().column("file_path").to_pylist())


def dangling(writer: SinkWriter) -> list[str]:
    """The live delete files naming a data file the table no longer holds."""
    table = sink_of(writer).open_table(T)
    data, deletes = live_files(table.metadata, table.io)
    return [f.file_path for f in deletes if referenced_path(f) not in data]


def unreferenced(writer: SinkWriter) -> set[str]:
    """The files in the table's data folder that no snapshot of it names."""
    table = sink_of(writer).open_table(T)
    named = set(table.inspect.all_files().column("file_path").to_pylist())
    return {str(p) for p in Path(table.location(), "data").iterdir()} - named


def duckdb_rows(metadata_location: str, snapshot_id: int | None = None) -> dict[int, str]:
    """The table's rows as DuckDB's iceberg extension (from its PyPI wheel, no download) reads them."""
    con = duckdb_with("avro", "iceberg")
    try:
        at = "" if snapshot_id is None else f", snapshot_from_id => {snapshot_id}"
        rows = con.execute(f"SELECT id, v FROM iceberg_scan('{metadata_location}'{at})").fetchall()
    finally:
        con.close()
    assert len(rows) == len({r[0] for r in rows}), "a key twice"
    return dict(rows)


@pytest.fixture(scope="module")
def merged(tmp_path_factory) -> tuple[dict[str, SinkWriter], dict[int, str], int]:
    """The same random batches merged into a copy-on-write and a merge-on-read table of the same
    snapshot; the rows they leave and the merge-on-read table's snapshot before the first batch."""
    root = tmp_path_factory.mktemp("lake")
    writers = {mode: snapshotted(root / mode, mode) for mode in ("copy-on-write", "merge-on-read")}
    batches, rows = random_batches(seed=7, batches=10, per_batch=40)
    before = sink_of(writers["merge-on-read"]).open_table(T).current_snapshot().snapshot_id
    for batch_id, changes in enumerate(batches):
        for writer in writers.values():
            batch(writer, changes, batch_id)
    return writers, rows, before


def test_random_changes_leave_the_same_rows_as_the_copy_on_write_merge(merged):
    writers, rows, _ = merged
    assert held(writers["merge-on-read"]) == rows
    assert held(writers["copy-on-write"]) == rows


def test_pyiceberg_and_duckdb_read_the_rows_the_sink_reads(merged):
    writers, rows, _ = merged
    table = sink_of(writers["merge-on-read"]).open_table(T)
    assert {r["id"]: r["v"] for r in table.scan().to_arrow().to_pylist()} == rows
    assert duckdb_rows(table.metadata_location) == rows


def test_time_travel_to_the_snapshot_before_the_merges_reads_the_snapshots_rows(merged):
    writers, _, before = merged
    table = sink_of(writers["merge-on-read"]).open_table(T)
    old = {i: "a" for i in range(ROWS)}
    assert {r["id"]: r["v"] for r in table.scan(snapshot_id=before).to_arrow().to_pylist()} == old
    assert duckdb_rows(table.metadata_location, before) == old


def test_a_merge_writes_position_deletes_and_one_data_file_leaving_every_data_file_in_place(tmp_path):
    writer = snapshotted(tmp_path, "merge-on-read")
    files_before = data_paths(writer)
    batch(writer, [update(T, 10, {"id": 3, "v": "a"}, {"id": 3, "v": "b"}), delete(T, 11, id=1500, v="a")], 1)
    snapshot = sink_of(writer).open_table(T).current_snapshot()
    summary = snapshot.summary.additional_properties
    assert summary["added-position-delete-files"] == "2" and summary["added-position-deletes"] == "2"
    assert summary["added-data-files"] == "1" and "deleted-data-files" not in summary
    assert summary["mysqlcdc.merge-mode"] == "merge-on-read"
    assert files_before < data_paths(writer)  # every snapshot file still there, one new file
    assert held(writer) == {**{i: "a" for i in range(ROWS) if i != 1500}, 3: "b"}


def test_each_delete_file_names_positions_of_one_earlier_data_file_sorted_and_scoped_to_it(tmp_path):
    writer = snapshotted(tmp_path, "merge-on-read")
    files_before = data_paths(writer)
    batch(writer, [update(T, 10 + i, {"id": i, "v": "a"}, {"id": i, "v": "b"}) for i in (9, 3, 1200, 7)], 1)
    table = sink_of(writer).open_table(T)
    _, deletes = live_files(table.metadata, table.io)
    assert len(deletes) == 2
    for delete_file in deletes:
        assert delete_file.content == DataFileContent.POSITION_DELETES
        rows = pq.read_table(delete_file.file_path)
        assert rows.schema.field("file_path").metadata[b"PARQUET:field_id"] == b"2147483546"
        assert rows.schema.field("pos").metadata[b"PARQUET:field_id"] == b"2147483545"
        [path] = set(rows.column("file_path").to_pylist())
        assert path in files_before and referenced_path(delete_file) == path
        assert rows.column("pos").to_pylist() == sorted(rows.column("pos").to_pylist())


def test_a_second_merge_into_a_file_replaces_its_delete_file_by_one_holding_both_batches_rows(tmp_path):
    writer = snapshotted(tmp_path, "merge-on-read")
    batch(writer, [update(T, 10, {"id": 3, "v": "a"}, {"id": 3, "v": "b"})], 1)
    batch(writer, [update(T, 11, {"id": 4, "v": "a"}, {"id": 4, "v": "c"})], 2)
    table = sink_of(writer).open_table(T)
    _, [delete_file] = live_files(table.metadata, table.io)
    assert delete_file.record_count == 2
    assert held(writer) == {**{i: "a" for i in range(ROWS)}, 3: "b", 4: "c"}


def test_a_batch_deleting_most_of_a_files_rows_rewrites_the_file_instead(tmp_path):
    writer = snapshotted(tmp_path, "merge-on-read", rows=20)
    before = data_paths(writer)
    batch(writer, [delete(T, 10 + i, id=i, v="a") for i in range(6)], 1)
    summary = sink_of(writer).open_table(T).current_snapshot().summary.additional_properties
    assert summary["mysqlcdc.files-rewritten"] == "1" and "added-position-delete-files" not in summary
    assert len(before - data_paths(writer)) == 1 and not dangling(writer)
    assert held(writer) == {i: "a" for i in range(6, 20)}


def test_a_row_inserted_again_after_its_delete_is_visible(tmp_path):
    writer = snapshotted(tmp_path, "merge-on-read")
    batch(writer, [delete(T, 10, id=3, v="a")], 1)
    batch(writer, [insert(T, 11, id=3, v="again")], 2)
    assert held(writer)[3] == "again"
    batch(writer, [update(T, 12, {"id": 3, "v": "again"}, {"id": 3, "v": "third"})], 3)
    assert held(writer)[3] == "third" and len(held(writer)) == ROWS


def test_a_replayed_batch_is_recognised_and_writes_nothing(tmp_path):
    writer = snapshotted(tmp_path, "merge-on-read")
    changes = [update(T, 10, {"id": 3, "v": "a"}, {"id": 3, "v": "b"})]
    batch(writer, changes, 1)
    snapshots = len(sink_of(writer).open_table(T).snapshots())
    batch(writer, changes, 1)
    assert len(sink_of(writer).open_table(T).snapshots()) == snapshots


def test_a_row_delta_fails_when_another_commit_landed_after_its_transaction_began(tmp_path):
    """The catalog requirement that the branch is still at the transaction's snapshot refuses it:
    deletes computed against a stale snapshot never land."""
    writer = snapshotted(tmp_path, "merge-on-read", rows=20)
    table = sink_of(writer).open_table(T)
    tx = table.transaction()
    RowDelta(tx, table.io).commit()
    batch(writer, [update(T, 10, {"id": 3, "v": "a"}, {"id": 3, "v": "b"})], 1)
    with pytest.raises(CommitFailedException, match="Requirement failed: branch main has changed"):
        tx.commit_transaction()


def race_a_split(tmp_path: Path, monkeypatch, retries: str | None = None) -> tuple[SinkWriter, list[str]]:
    """A merge of key 3 while a split of the whole table, read again, lands as the merge writes its
    delete files (``retries``: the table's ``commit.retry.num-retries``, the sink's 0 by default);
    the merge's writer and the data files whose delete files it wrote, attempt by attempt."""
    writer = snapshotted(tmp_path, "merge-on-read", rows=20)
    if retries is not None:
        sink_of(writer).open_table(T).transaction().set_properties({"commit.retry.num-retries": retries}) \
            .commit_transaction()
    other = open_sink(SinkSpec(str(tmp_path), "iceberg", merge_mode="copy-on-write"))
    rival = SinkWriter(other, SCHEMA, "id", KeyOrdering(ID))
    real, calls = merge_on_read.write_position_deletes, []

    def racing(table, path, positions):
        calls.append(path)
        if len(calls) == 1:
            rival.write_split(FinishedSplit(SnapshotSplit(T, 0, "id", None, None), off(6)),
                              [{"id": i, "v": "split"} for i in range(20)])
        return real(table, path, positions)

    monkeypatch.setattr(merge_on_read, "write_position_deletes", racing)
    batch(writer, [update(T, 10, {"id": 3, "v": "a"}, {"id": 3, "v": "b"})], 1)
    return writer, calls


def test_a_merge_meeting_a_concurrent_commit_is_made_again_from_a_fresh_load_and_stays_exact(tmp_path, monkeypatch):
    """The merge's first commit fails, it deletes what it wrote, and is computed again on the split's
    rows. Its stale deletes would have named the split's removed file, and key 3 would be there twice."""
    writer, calls = race_a_split(tmp_path, monkeypatch)
    assert len(calls) == 2 and calls[0] != calls[1]  # the second attempt names the split's file
    assert held(writer) == {**{i: "split" for i in range(20)}, 3: "b"}
    assert unreferenced(writer) == set()  # the failed attempt's files were deleted


def test_pyiceberg_own_retry_never_rebases_a_merges_deletes_onto_a_newer_snapshot(tmp_path, monkeypatch):
    """A table whose commits pyiceberg retries itself (another writer's setting): the row delta
    refuses the rebase, and the sink computes the merge again from a fresh load."""
    writer, calls = race_a_split(tmp_path, monkeypatch, retries="4")
    assert len(calls) == 2 and calls[0] != calls[1]
    assert held(writer) == {**{i: "split" for i in range(20)}, 3: "b"}


def merged_twice(tmp_path: Path) -> SinkWriter:
    """A table of 20 rows in one file whose row 15 a merge deleted and row 3 updated (offset 10)."""
    writer = snapshotted(tmp_path, "merge-on-read", rows=20)
    batch(writer, [delete(T, 10, id=15, v="a"), update(T, 10, {"id": 3, "v": "a"}, {"id": 3, "v": "b"})], 1)
    assert dangling(writer) == []
    return writer


def test_a_split_replacing_part_of_a_file_with_deleted_rows_keeps_them_deleted(tmp_path):
    """pyiceberg's delete rewrites a file partly in the range from its live rows (the scan applies
    its delete files): the deleted row does not come back, and no delete file is left naming the
    rewritten file."""
    writer = merged_twice(tmp_path)
    writer.write_split(FinishedSplit(SnapshotSplit(T, 0, "id", None, 5), off(20)), [{"id": i, "v": "s"} for i in range(5)])
    assert held(writer) == {**{i: "s" for i in range(5)}, **{i: "a" for i in range(5, 20) if i != 15}}
    assert dangling(writer) == []


def test_data_files_committed_for_a_range_keep_the_deleted_rows_of_a_file_partly_in_it_deleted(tmp_path):
    writer = merged_twice(tmp_path)
    sink = sink_of(writer)
    file_schema = sink.file_schema(SCHEMA)
    assert file_schema is not None
    rows = writer.stamped(pa.table({"id": pa.array([1, 2], pa.int32()), "v": ["new", "new"]}), off(20))
    files = [write_data_file(sink.data_folder(T), rows, file_schema, prefix="chunk-0-0")]
    start, end = writer.split_range(SnapshotSplit(T, 0, "id", 0, 10))
    sink.commit_range(T, start, end, files, file_schema=file_schema)
    assert held(writer) == {1: "new", 2: "new", **{i: "a" for i in range(10, 20) if i != 15}}
    assert dangling(writer) == []


def test_a_truncate_drops_the_files_whose_rows_it_deletes_with_their_delete_files(tmp_path):
    writer = merged_twice(tmp_path)
    sink_of(writer).truncate_before(T, 10**18, commit=StreamCommit("app", 2, (1, 10**6, 0, 0)))
    assert held(writer) == {}
    assert dangling(writer) == []


def test_a_fill_of_the_older_rows_keeps_the_deleted_rows_deleted(tmp_path):
    writer = merged_twice(tmp_path)
    version = int(sink_of(writer).read(T).filter(pa.compute.equal(pa.compute.field("id"), 3))
                  .column("_cdc_version")[0].as_py())
    sink_of(writer).fill_before(T, {"v": pa.scalar("f")}, version, commit=StreamCommit("app", 2, (1, 10**6, 0, 0)))
    assert held(writer) == {**{i: "f" for i in range(20) if i != 15}, 3: "b"}
    assert dangling(writer) == []


def test_replacing_the_schema_empties_the_table_and_leaves_no_delete_file(tmp_path):
    writer = merged_twice(tmp_path)
    sink_of(writer).replace_schema(SCHEMA)
    assert held(writer) == {} and dangling(writer) == []


def test_a_copy_on_write_merge_into_a_table_with_delete_files_keeps_their_rows_deleted(tmp_path):
    """The merge mode is a setting each run may change: a copy-on-write merge reads the rows its
    delete files leave and drops the delete files of the files it rewrites."""
    merged_twice(tmp_path)
    writer = SinkWriter(open_sink(SinkSpec(str(tmp_path), "iceberg", merge_mode="copy-on-write")), SCHEMA, "id",
                        KeyOrdering(ID))
    batch(writer, [update(T, 30, {"id": 4, "v": "a"}, {"id": 4, "v": "cow"})], 2)
    assert held(writer) == {**{i: "a" for i in range(20) if i != 15}, 3: "b", 4: "cow"}
    assert dangling(writer) == []


def spoilt(tmp_path: Path) -> tuple[SinkWriter, dict[int, str]]:
    """A merge-on-read table after random batches: many delete files, overlapping image files."""
    writer = snapshotted(tmp_path, "merge-on-read")
    batches, rows = random_batches(seed=3, batches=6, per_batch=40)
    for batch_id, changes in enumerate(batches):
        batch(writer, changes, batch_id)
    assert held(writer) == rows
    return writer, rows


def test_clustering_folds_the_delete_files_into_the_files_it_rewrites(tmp_path):
    writer, rows = spoilt(tmp_path)
    table = sink_of(writer).open_table(T)
    assert live_files(table.metadata, table.io)[1]  # delete files to fold
    sink_of(writer).maintain(T, MaintenancePolicy(compact=True, checkpoint=False, vacuum_retention_s=None))
    assert held(writer) == rows and dangling(writer) == []
    table = sink_of(writer).open_table(T)
    assert {r["id"]: r["v"] for r in table.scan().to_arrow().to_pylist()} == rows
    assert duckdb_rows(table.metadata_location) == rows


def test_clustering_rewrites_a_lone_file_with_many_deleted_rows_without_them(tmp_path):
    writer = snapshotted(tmp_path, "merge-on-read", rows=20)
    batch(writer, [delete(T, 10 + i, id=i, v="a") for i in (2, 4, 6)], 1)  # 3 of 10: no rewrite at merge
    sink_of(writer).cluster(T, min_files=2)
    table = sink_of(writer).open_table(T)
    assert not live_files(table.metadata, table.io)[1]
    assert held(writer) == {i: "a" for i in range(20) if i not in (2, 4, 6)}


def test_expiry_deletes_the_delete_files_no_retained_snapshot_names_and_never_a_live_one(tmp_path, monkeypatch):
    writer, rows = spoilt(tmp_path)
    monkeypatch.setattr(iceberg_maintenance, "ORPHAN_MIN_AGE_S", 0.0)
    old = time.time() - 60
    for path in Path(sink_of(writer).table_uri(T), "data").iterdir():
        os.utime(path, (old, old))
    sink_of(writer).maintain(T, MaintenancePolicy(compact=False, checkpoint=False, vacuum_retention_s=0))
    assert held(writer) == rows  # a live delete file is no orphan
    table = sink_of(writer).open_table(T)
    _, deletes = live_files(table.metadata, table.io)
    assert deletes and all(Path(f.file_path).exists() for f in deletes)
    sink_of(writer).maintain(T, MaintenancePolicy(compact=True, checkpoint=False, vacuum_retention_s=0))
    table = sink_of(writer).open_table(T)
    data, deletes = live_files(table.metadata, table.io)
    on_disk = {str(p) for p in Path(table.location(), "data").iterdir()}
    assert len(table.snapshots()) == 1 and on_disk == data | {f.file_path for f in deletes}
    assert held(writer) == rows


def test_a_format_v1_table_is_upgraded_to_v2_before_its_first_merge_on_read(tmp_path):
    writer = snapshotted(tmp_path, "merge-on-read", rows=20)
    sink = sink_of(writer)
    table = sink.open_table(T)
    rows = table.scan().to_arrow()
    sink.catalog.drop_table(sink.identifier(T))
    v1 = sink.catalog.create_table(sink.identifier(T), schema=table.schema(), location=str(tmp_path / "v1"),
                                   properties={**table.properties, "format-version": "1"})
    v1.append(rows)
    assert sink.open_table(T).format_version == 1
    batch(writer, [update(T, 10, {"id": 3, "v": "a"}, {"id": 3, "v": "b"})], 1)
    table = sink.open_table(T)
    assert table.format_version == 2 and live_files(table.metadata, table.io)[1]
    assert held(writer) == {**{i: "a" for i in range(20)}, 3: "b"}


def counting_manifest_reads(monkeypatch) -> list[int]:
    """How many manifests are read (pyiceberg's own reading of one, whoever asks), as it happens."""
    reads = [0]
    real = ManifestFile.fetch_manifest_entry

    def counted(self, *args, **kwargs):
        reads[0] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry", counted)
    return reads


def test_a_clustering_check_right_after_the_sinks_own_merge_reads_no_manifest(tmp_path, monkeypatch):
    writer = snapshotted(tmp_path, "merge-on-read")
    for n in range(1, 4):  # each merge leaves its small file
        batch(writer, [update(T, 10 + n, {"id": n, "v": "a"}, {"id": n, "v": "b"})], n)
    files = len(data_paths(writer))
    reads = counting_manifest_reads(monkeypatch)
    assert sink_of(writer).cluster(T, min_files=files + 1, large_apart=True) is None  # not due yet
    assert reads == [0]
    assert sink_of(writer).cluster(T, min_files=files, large_apart=True).files_read == files
    assert held(writer) == {**{i: "a" for i in range(ROWS)}, **{i: "b" for i in range(1, 4)}}
    assert dangling(writer) == []


def test_clustering_after_another_writers_commit_plans_from_the_files_read_again(tmp_path, monkeypatch):
    writer = snapshotted(tmp_path, "merge-on-read")
    batch(writer, [update(T, 10, {"id": 1, "v": "a"}, {"id": 1, "v": "b"})], 1)
    batch(writer, [update(T, 11, {"id": 2, "v": "a"}, {"id": 2, "v": "b"})], 2)
    other = open_sink(SinkSpec(str(tmp_path), "iceberg", merge_mode="merge-on-read"))  # another process's sink
    apply_change_batch({T: SinkWriter(other, SCHEMA, "id", KeyOrdering(ID))}, [update(T, 12, {"id": 3, "v": "a"}, {"id": 3, "v": "c"})],
                       app_id="other", batch_id=1)
    files = len(data_paths(writer))  # the other's file too
    reads = counting_manifest_reads(monkeypatch)
    assert sink_of(writer).cluster(T, min_files=3, large_apart=True).files_read == files
    assert reads[0] > 0
    assert held(writer) == {**{i: "a" for i in range(ROWS)}, 1: "b", 2: "b", 3: "c"}
    assert dangling(writer) == []
