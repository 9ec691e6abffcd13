"""Merge-on-read into Delta (sinks/delta/merge_on_read.py): a batch marks the rows it replaces in
deletion vectors and appends their new images, so it rewrites only what it changes, lands whole and
exactly once, and every reader (ours, delta-rs, DuckDB) and every version reads the same rows as the
copy-on-write MERGE gives."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.errors import ConcurrentCommit
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.delta.log import DeltaLog
from airflow_provider_mysqlcdc.sinks.delta.merge_on_read import merge_by_vectors
from airflow_provider_mysqlcdc.sinks.delta.sink import DeltaSink
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_change_batch
from tests.unit.sinks.delta.test_deletion_vectors import duckdb_rows
from tests.unit.stream.harness import delete, insert, off, update

T = TableId("shop", "t")
ID = Column("id", "int", "int(11)", False)
V = Column("v", "varchar", "varchar(20)", True, charset="utf8mb4", collation="utf8mb4_bin")
SCHEMA = TableSchema(T, (ID, V), ("id",))
ROWS = 2_000


def snapshotted(root: Path, mode: str, sink_format: str = "delta") -> SinkWriter:
    """A table of ``ROWS`` rows in two snapshot files (read as of offset 5), merged into in ``mode``."""
    sink = open_sink(SinkSpec(str(root), sink_format, merge_mode=mode))
    sink.prepare(SCHEMA)
    writer = SinkWriter(sink, SCHEMA, "id", KeyOrdering(ID))
    half = ROWS // 2
    writer.write_split(FinishedSplit(SnapshotSplit(T, 0, "id", None, half), off(5)),
                       [{"id": i, "v": "a"} for i in range(half)])
    writer.write_split(FinishedSplit(SnapshotSplit(T, 1, "id", half, None), off(5)),
                       [{"id": i, "v": "a"} for i in range(half, ROWS)])
    return writer


def random_batches(seed: int, batches: int, per_batch: int) -> tuple[list[list], dict[int, str]]:
    """Batches of random changes over the whole key range (updates, deletes, inserts of new keys and
    of deleted ones), and the rows they leave."""
    rng = random.Random(seed)
    rows = {i: "a" for i in range(ROWS)}
    n = 10
    out = []
    for _ in range(batches):
        batch = []
        for _ in range(per_batch):
            key, n = rng.randrange(ROWS + ROWS // 10), n + 1
            if key in rows and rng.random() < 0.25:
                batch.append(delete(T, n, id=key, v=rows.pop(key)))
            elif key in rows:
                batch.append(update(T, n, {"id": key, "v": rows[key]}, {"id": key, "v": f"u{n}"}))
                rows[key] = f"u{n}"
            else:
                rows[key] = f"i{n}"
                batch.append(insert(T, n, id=key, v=rows[key]))
        out.append(batch)
    return out, rows


def merged_batches(root: Path, *, seed: int, batches: int, per_batch: int) -> tuple[SinkWriter, str, dict[int, str]]:
    """A merge-on-read table after ``random_batches``: its writer, its folder and the rows it holds."""
    writer = snapshotted(root, "merge-on-read")
    changes, rows = random_batches(seed=seed, batches=batches, per_batch=per_batch)
    for batch_id, batch in enumerate(changes):
        apply_change_batch({T: writer}, batch, app_id="app", batch_id=batch_id)
    return writer, writer.sink.table_uri(T), rows


def held(writer: SinkWriter) -> dict[int, str]:
    rows = writer.sink.read(T).to_pylist()
    assert len(rows) == len({r["id"] for r in rows}), "a key twice"
    return {r["id"]: r["v"] for r in rows}


def added_rows(uri: str, since: int) -> int:
    """Rows in the data files the commits after version ``since`` added (a vector's re-add excluded)."""
    table = DeltaTable(uri)
    total = 0
    for version in range(since + 1, table.version() + 1):
        for line in (Path(uri) / "_delta_log" / f"{version:020d}.json").read_text().splitlines():
            action = json.loads(line)
            if "add" in action and not action["add"].get("deletionVector"):
                total += json.loads(action["add"]["stats"])["numRecords"]
    return total


@pytest.fixture(scope="module")
def merged(tmp_path_factory) -> tuple[dict[str, SinkWriter], dict[int, str], int, int]:
    """The same random batches merged into a copy-on-write and a merge-on-read table of the same
    snapshot; the rows they leave, the version before the first batch and the changes merged."""
    root = tmp_path_factory.mktemp("lake")
    writers = {mode: snapshotted(root / mode, mode) for mode in ("copy-on-write", "merge-on-read")}
    batches, rows = random_batches(seed=7, batches=12, per_batch=40)
    before = DeltaTable(writers["merge-on-read"].sink.table_uri(T)).version()
    for batch_id, batch in enumerate(batches):
        for writer in writers.values():
            apply_change_batch({T: writer}, batch, app_id="app", batch_id=batch_id)
    return writers, rows, before, sum(len(b) for b in batches)


def test_random_changes_leave_the_same_rows_as_the_copy_on_write_merge(merged):
    writers, rows, _, _ = merged
    assert held(writers["merge-on-read"]) == rows
    assert held(writers["copy-on-write"]) == rows


def test_delta_rs_and_duckdb_read_the_merged_rows(merged):
    writers, rows, _, _ = merged
    uri = writers["merge-on-read"].sink.table_uri(T)
    assert {r["id"]: r["v"] for r in pa.table(DeltaTable(uri).scan()).to_pylist()} == rows
    assert {r["id"]: r["v"] for r in duckdb_rows(uri)} == rows


def test_the_snapshot_files_stay_with_vectors_and_few_rows_are_rewritten(merged):
    """Copy-on-write rewrites both snapshot files at every batch (thousands of rows a batch); merge-on-
    read keeps them, marks the replaced rows in their vectors and writes about one row per change."""
    writers, _, before, changes = merged
    uri = writers["merge-on-read"].sink.table_uri(T)
    files = DeltaLog(uri).files(DeltaTable(uri))
    snapshot_files = [f for f in files.values() if f.rows == ROWS // 2]
    assert len(snapshot_files) == 2 and all(f.vector is not None and f.deleted > 0 for f in snapshot_files)
    assert added_rows(uri, before) <= 2 * changes
    assert added_rows(writers["copy-on-write"].sink.table_uri(T), before) > 5 * changes


def test_every_version_reads_as_it_was_committed(tmp_path):
    writer = snapshotted(tmp_path / "lake", "merge-on-read")
    uri = writer.sink.table_uri(T)
    batches, _ = random_batches(seed=3, batches=4, per_batch=30)
    expected = {DeltaTable(uri).version(): held(writer)}
    for batch_id, batch in enumerate(batches):
        apply_change_batch({T: writer}, batch, app_id="app", batch_id=batch_id)
        expected[DeltaTable(uri).version()] = held(writer)
    for version, rows in expected.items():
        assert {r["id"]: r["v"] for r in pa.table(DeltaTable(uri, version=version).scan()).to_pylist()} == rows


def test_a_batch_applied_again_changes_nothing(tmp_path):
    writer = snapshotted(tmp_path / "lake", "merge-on-read")
    uri = writer.sink.table_uri(T)
    batch = [update(T, 20, {"id": 1, "v": "a"}, {"id": 1, "v": "b"}), delete(T, 21, id=2, v="a")]
    apply_change_batch({T: writer}, batch, app_id="app", batch_id=1)
    version = DeltaTable(uri).version()
    again = SinkWriter(writer.sink, SCHEMA, "id", KeyOrdering(ID))  # a restarted stream: positions from the table
    assert apply_change_batch({T: again}, batch, app_id="app", batch_id=1) == {}
    assert DeltaTable(uri).version() == version and held(again)[1] == "b" and 2 not in held(again)


def test_a_commit_that_lost_its_version_to_another_writer_leaves_no_file_and_the_retry_lands(tmp_path):
    writer = snapshotted(tmp_path / "lake", "merge-on-read")
    sink = writer.sink
    assert isinstance(sink, DeltaSink)
    uri = sink.table_uri(T)
    apply_change_batch({T: writer}, [update(T, 20, {"id": 1, "v": "a"}, {"id": 1, "v": "b"})], app_id="app",
                       batch_id=1)
    stale = DeltaTable(uri)
    changes = writer.changes_table(_change_columns(writer, [update(T, 21, {"id": 3, "v": "a"}, {"id": 3, "v": "c"})]))
    apply_change_batch({T: writer}, [update(T, 22, {"id": 4, "v": "a"}, {"id": 4, "v": "d"})], app_id="app",
                       batch_id=2)  # another writer's commit, after ``stale`` was loaded
    files_before = set(p.name for p in Path(uri).iterdir())
    with pytest.raises(ConcurrentCommit):
        merge_by_vectors(stale, uri, sink.delta_log(uri), sink.key_index, changes, key_columns=["id"], nullable_keys=set(),
                         shard_range=None, file_schema=pa.schema(stale.schema().to_arrow()), transactions=[])
    assert set(p.name for p in Path(uri).iterdir()) == files_before
    merge_by_vectors(DeltaTable(uri), uri, sink.delta_log(uri), sink.key_index, changes, key_columns=["id"], nullable_keys=set(),
                     shard_range=None, file_schema=pa.schema(stale.schema().to_arrow()), transactions=[])
    assert {k: held(writer)[k] for k in (1, 3, 4)} == {1: "b", 3: "c", 4: "d"}


def test_a_file_a_batch_mostly_deletes_is_rewritten_and_one_it_empties_is_removed(tmp_path):
    writer = snapshotted(tmp_path / "lake", "merge-on-read")
    uri = writer.sink.table_uri(T)
    half = ROWS // 2
    snapshot_files = set(DeltaLog(uri).files(DeltaTable(uri)))
    batch = [delete(T, 10 + i, id=i, v="a") for i in range(half)]  # the whole first file
    batch += [update(T, 5000 + i, {"id": i, "v": "a"}, {"id": i, "v": "z"}) for i in range(half, half + 3 * half // 4)]
    apply_change_batch({T: writer}, batch, app_id="app", batch_id=1)
    files = DeltaLog(uri).files(DeltaTable(uri))
    assert not snapshot_files & set(files)  # neither snapshot file is left
    assert all(f.vector is None for f in files.values())
    assert held(writer) == {i: ("z" if i < half + 3 * half // 4 else "a") for i in range(half, ROWS)}


def test_an_existing_copy_on_write_table_is_upgraded_in_a_commit_of_its_own(tmp_path):
    writer = snapshotted(tmp_path / "lake", "copy-on-write")
    uri = writer.sink.table_uri(T)
    assert "deletionVectors" not in (DeltaTable(uri).protocol().writer_features or [])
    mor = SinkWriter(DeltaSink(str(tmp_path / "lake"), merge_mode="merge-on-read"), SCHEMA, "id", KeyOrdering(ID))
    apply_change_batch({T: mor}, [update(T, 20, {"id": 1, "v": "a"}, {"id": 1, "v": "b"})], app_id="app", batch_id=1)
    history = DeltaTable(uri).history(2)
    assert [h["operation"] for h in history] == ["MERGE", "ADD FEATURE"]
    assert "deletionVectors" in DeltaTable(uri).protocol().reader_features


def test_a_table_with_check_constraints_copies_on_write(tmp_path):
    """Only delta-rs's writes check constraints: such a table's merges stay delta-rs's MERGE."""
    writer = snapshotted(tmp_path / "lake", "merge-on-read")
    uri = writer.sink.table_uri(T)
    DeltaTable(uri).alter.add_constraint({"small_ids": "id < 100000"})
    apply_change_batch({T: writer}, [update(T, 20, {"id": 1, "v": "a"}, {"id": 1, "v": "b"})], app_id="app", batch_id=1)
    assert DeltaTable(uri).history(1)[0]["engineInfo"].startswith("delta-rs")
    assert held(writer)[1] == "b"


def vector_files(uri: str) -> set[str]:
    return {str(p) for p in Path(uri).glob("deletion_vector_*.bin")}


def _after(moment: float) -> None:
    """Wait until the clock is past ``moment`` (a retention's edge the test's vacuum must see behind it)."""
    while time.time() <= moment:
        time.sleep(0.05)


def test_vacuum_keeps_a_file_a_retained_version_reads_though_an_older_removal_of_it_expired(tmp_path):
    """A file given a second deletion vector has two removals in the log: its first vector's, long
    expired, and a recent one (compaction took it out). delta-rs's vacuum deletes it for the expired
    one; the versions before the compaction, within the retention, still read it."""
    from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy

    writer = snapshotted(tmp_path / "lake", "merge-on-read")
    uri = writer.sink.table_uri(T)
    apply_change_batch({T: writer}, [update(T, 20, {"id": 1, "v": "a"}, {"id": 1, "v": "b"})], app_id="app", batch_id=1)
    first = time.time()
    apply_change_batch({T: writer}, [update(T, 21, {"id": 2, "v": "a"}, {"id": 2, "v": "b"})], app_id="app", batch_id=2)
    _after(first + 2)  # the first vector's removal is older than the retention below
    before_compaction = DeltaTable(uri).version()
    expected = held(writer)
    while writer.sink.cluster(T, min_files=1) is not None:
        pass
    [done] = writer.sink.maintain(T, MaintenancePolicy(compact=False, vacuum_retention_s=1))
    assert done.files_vacuumed >= 1  # the first vector's file
    assert {r["id"]: r["v"] for r in pa.table(DeltaTable(uri, version=before_compaction).scan()).to_pylist()} == expected
    assert held(writer) == expected
    assert "variantType" not in (DeltaTable(uri).protocol().reader_features or [])


def _change_columns(writer: SinkWriter, records: list) -> pa.Table:
    from airflow_provider_mysqlcdc.sinks.change_columns import change_columns, conform_changes

    return conform_changes(change_columns(SCHEMA, records), writer.data_schema)[0]


def test_clustering_folds_the_vectors_into_rewritten_files_and_changes_no_row(tmp_path):
    writer, uri, rows = merged_batches(tmp_path / "lake", seed=11, batches=6, per_batch=120)
    assert any(f.vector is not None for f in DeltaLog(uri).files(DeltaTable(uri)).values())
    while writer.sink.cluster(T) is not None:
        pass
    files = DeltaLog(uri).files(DeltaTable(uri))
    assert all(f.vector is None for f in files.values())
    assert held(writer) == rows and {r["id"]: r["v"] for r in duckdb_rows(uri)} == rows


def test_a_range_commit_keeps_what_a_vector_deleted_outside_its_range_deleted(tmp_path):
    """A split re-read over part of a file whose vector deletes rows outside the split: the rows the
    file keeps outside the range are its live rows, not its Parquet rows."""
    writer = snapshotted(tmp_path / "lake", "merge-on-read")
    sink = writer.sink
    apply_change_batch({T: writer}, [delete(T, 20, id=5, v="a"), delete(T, 21, id=700, v="a")], app_id="app",
                       batch_id=1)
    split = FinishedSplit(SnapshotSplit(T, 0, "id", 600, 800), off(30))
    start, end = writer.split_range(split.split)
    data = writer.stamped(pa.table({"id": pa.array(range(600, 800), pa.int32()), "v": ["r"] * 200}), off(30))
    file_schema = sink.file_schema(SCHEMA)
    from airflow_provider_mysqlcdc.sinks.data_files import write_data_file

    sink.commit_range(T, start, end, [write_data_file(sink.data_folder(T), data, file_schema, prefix="split")],
                      file_schema=file_schema)
    rows = held(writer)
    assert 5 not in rows and rows[700] == "r" and rows[599] == "a" and len(rows) == ROWS - 1


def test_vacuum_deletes_only_vector_files_no_retained_version_names(tmp_path):
    """Each batch's vector file replaces the last one's for the files it touched: the superseded ones
    stay while time travel within the retention reads them, and go once no retained version names
    them; the live ones always stay."""
    from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy

    writer, uri, rows = merged_batches(tmp_path / "lake", seed=5, batches=3, per_batch=50)
    written = set(vector_files(uri))
    assert len(written) == 3
    [done] = writer.sink.maintain(T, MaintenancePolicy(compact=False, vacuum_retention_s=3600))
    assert done.files_vacuumed == 0 and set(vector_files(uri)) == written
    [done] = writer.sink.maintain(T, MaintenancePolicy(compact=False, vacuum_retention_s=0))
    named = {f.vector.file_path(uri) for f in DeltaLog(uri).files(DeltaTable(uri)).values() if f.vector}
    assert set(vector_files(uri)) == named and len(named) < 3 and done.files_vacuumed == 3 - len(named)
    assert held(writer) == rows and {r["id"]: r["v"] for r in duckdb_rows(uri)} == rows


def test_maintenance_folds_the_files_whose_deleted_share_reaches_the_policys_and_counts_them(tmp_path):
    from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy
    from airflow_provider_mysqlcdc.sinks.delta.maintenance import maintain_table

    sink = open_sink(SinkSpec(str(tmp_path / "lake"), "delta", merge_mode="merge-on-read"))
    sink.prepare(SCHEMA)
    writer = SinkWriter(sink, SCHEMA, "id", KeyOrdering(ID))
    half, rng = ROWS // 2, random.Random(4)  # files of random text: larger than a small file (1 MiB / 32)
    for index, (start, end) in enumerate(((None, half), (half, None))):
        writer.write_split(FinishedSplit(SnapshotSplit(T, index, "id", start, end), off(5)),
                           [{"id": i, "v": "%020x" % rng.getrandbits(80)} for i in range(start or 0, end or ROWS)])
    uri = sink.table_uri(T)
    batch = [delete(T, 10 + i, id=i, v="") for i in range(0, half, 4)]  # a quarter of the first file's rows
    batch += [delete(T, 5000 + i, id=i, v="") for i in range(half, ROWS, 10)]  # a tenth of the second's
    apply_change_batch({T: writer}, batch, app_id="app", batch_id=1)
    rows = held(writer)

    def vectors() -> list[float]:
        return sorted(f.deleted / f.rows for f in DeltaLog(uri).files(DeltaTable(uri)).values() if f.vector and f.rows)

    assert vectors() == [0.1, 0.25]
    [done] = maintain_table(writer.sink, T, MaintenancePolicy(checkpoint=False, target_file_bytes=1 << 20, fold_share=0.3))
    assert done.files_folded == 0 and vectors() == [0.1, 0.25]
    [done] = maintain_table(writer.sink, T, MaintenancePolicy(checkpoint=False, target_file_bytes=1 << 20, fold_share=0.2))
    assert done.files_folded == 1 and vectors() == [0.1]
    assert held(writer) == rows and {r["id"]: r["v"] for r in duckdb_rows(uri)} == rows


def counting_log_listings(monkeypatch) -> list[int]:
    """How many times delta-rs brings a loaded table up to date (it lists the log folder each time)."""
    calls = [0]
    real = DeltaTable.update_incremental

    def counted(self):
        calls[0] += 1
        return real(self)

    monkeypatch.setattr(DeltaTable, "update_incremental", counted)
    return calls


def loaded_log(tmp_path: Path) -> tuple[SinkWriter, DeltaLog]:
    """A merge-on-read table's writer and the log its sink keeps for it."""
    writer = snapshotted(tmp_path / "lake", "merge-on-read")
    assert isinstance(writer.sink, DeltaSink)
    return writer, writer.sink.delta_log(writer.sink.table_uri(T))


def test_a_table_no_commit_followed_is_taken_as_loaded_without_listing_its_log(tmp_path, monkeypatch):
    writer, log = loaded_log(tmp_path)
    version = log.latest(None).version()
    listings = counting_log_listings(monkeypatch)
    assert log.latest(None).version() == version and log.latest(None).version() == version
    assert listings == [0]


def test_a_table_another_writer_committed_to_is_brought_up_to_date(tmp_path, monkeypatch):
    writer, log = loaded_log(tmp_path)
    version = log.latest(None).version()
    other = SinkWriter(open_sink(SinkSpec(str(tmp_path / "lake"), "delta", merge_mode="merge-on-read")), SCHEMA, "id",
                       KeyOrdering(ID))  # another process's sink
    apply_change_batch({T: other}, [update(T, 20, {"id": 1, "v": "a"}, {"id": 1, "v": "b"})], app_id="other",
                       batch_id=1)
    listings = counting_log_listings(monkeypatch)
    assert log.latest(None).version() == version + 1 and listings == [1]
    apply_change_batch({T: writer}, [update(T, 21, {"id": 2, "v": "a"}, {"id": 2, "v": "c"})], app_id="app",
                       batch_id=1)
    assert {k: held(writer)[k] for k in (1, 2)} == {1: "b", 2: "c"}
