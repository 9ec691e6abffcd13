"""Data files written into a Delta table's folder by executors, and the one commit that replaces a
chunk range with them (sinks/data_files.py, ``DeltaSink.commit_range``), on a real Delta table on
local disk; which partitions of a split the window's changes touch (spark/chunk_job.py); and the
files a stream's merge reads."""

from __future__ import annotations

import datetime as dt
import json
import threading

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, Operation, TableTruncated
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.sinks.data_files import chunk_bounds, file_stats, write_data_file
from airflow_provider_mysqlcdc.sinks.delta.predicates import files_holding
from airflow_provider_mysqlcdc.sinks.delta.sink import DeltaSink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_change_batch
from airflow_provider_mysqlcdc.spark.chunk_job import touched_partitions
from devtools.verify import read_delta

T = TableId("db", "t")
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("_cdc_chunk", pa.string())])


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "_cdc_chunk": [f"k{i:03d}" for i in ids]}, schema=SCHEMA)


def ids_in(uri: str) -> list[int]:
    return sorted(read_delta(uri).column("id").to_pylist())


@pytest.fixture
def sink(tmp_path) -> DeltaSink:
    sink = DeltaSink(str(tmp_path / "lake"))
    DeltaTable.create(sink.table_uri(T), SCHEMA)
    return sink


def test_a_range_commit_adds_its_files_and_removes_only_the_rows_the_range_held(sink):
    uri = sink.table_uri(T)
    write_deltalake(uri, rows(1, 2), mode="append")  # below the range
    write_deltalake(uri, rows(11, 12), mode="append")  # inside
    write_deltalake(uri, rows(5, 15, 25), mode="append")  # across both ends
    new = write_data_file(uri, rows(10, 13, 19), SCHEMA, prefix="chunk-1")
    sink.commit_range(T, "k010", "k020", [new], file_schema=SCHEMA)
    assert ids_in(uri) == [1, 2, 5, 10, 13, 19, 25]


def test_a_file_no_commit_added_is_invisible(sink):
    uri = sink.table_uri(T)
    write_data_file(uri, rows(1, 2, 3), SCHEMA, prefix="chunk-0")
    assert ids_in(uri) == []


def test_committing_the_same_files_again_changes_nothing(sink):
    uri = sink.table_uri(T)
    new = write_data_file(uri, rows(10, 11), SCHEMA, prefix="chunk-1")
    sink.commit_range(T, "k010", "k020", [new], file_schema=SCHEMA)
    version = DeltaTable(uri).version()
    sink.commit_range(T, "k010", "k020", [new], file_schema=SCHEMA)  # a retry after a commit that landed
    assert DeltaTable(uri).version() == version and ids_in(uri) == [10, 11]


def test_a_range_committed_again_replaces_its_earlier_files(sink):
    uri = sink.table_uri(T)
    sink.commit_range(T, None, "k010", [write_data_file(uri, rows(1, 2), SCHEMA, prefix="chunk-0")], file_schema=SCHEMA)
    sink.commit_range(T, None, "k010", [write_data_file(uri, rows(2, 3), SCHEMA, prefix="chunk-0")], file_schema=SCHEMA)
    assert ids_in(uri) == [2, 3]


def test_range_commits_racing_on_one_table_all_land(sink):
    uri = sink.table_uri(T)
    write_deltalake(uri, rows(5, 15, 25, 35), mode="append")  # one file across every range: each commit rewrites it
    errors: list[Exception] = []

    def commit(number: int) -> None:
        try:
            start, end = f"k{number * 10:03d}", f"k{number * 10 + 10:03d}"
            new = write_data_file(uri, rows(number * 10 + 1), SCHEMA, prefix=f"chunk-{number}")
            sink.commit_range(T, start, end, [new], file_schema=SCHEMA)
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    racers = [threading.Thread(target=commit, args=(n,)) for n in range(4)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert errors == [] and ids_in(uri) == [1, 11, 21, 31]


def test_a_wide_table_keeps_the_statistics_its_range_commits_decide_by(tmp_path):
    """Delta keeps statistics of a table's first 32 columns only, unless told otherwise; the chunk
    column comes after the source's columns."""
    sink = DeltaSink(str(tmp_path / "lake"))
    columns = tuple(Column(name=f"c{i}", data_type="bigint", column_type="bigint", nullable=i > 0) for i in range(40))
    schema = TableSchema(T, columns, ("c0",))
    sink.prepare(schema)
    uri = sink.table_uri(T)
    file_schema = sink.file_schema(schema)
    data = pa.table({"c0": pa.array([1], pa.int64()), "_cdc_chunk": ["k001"]})  # the rest NULL
    sink.commit_range(T, None, None, [write_data_file(uri, data, file_schema, prefix="chunk-0")], file_schema=file_schema)
    [held] = pa.table(DeltaTable(uri).get_add_actions(flatten=True)).to_pylist()
    assert chunk_bounds(held) == ("k001", "k001")


def test_file_stats_keep_the_chunk_range_however_long_and_leave_out_long_text():
    long_chunk, text = "k" * 300, "x" * 500
    data = pa.table({"id": pa.array([3, 1], pa.int64()), "note": [text, None], "_cdc_chunk": ["k", long_chunk]})
    stats = json.loads(file_stats(data))
    assert stats["numRecords"] == 2 and stats["nullCount"] == {"id": 0, "note": 1, "_cdc_chunk": 0}
    assert (stats["minValues"]["id"], stats["maxValues"]["id"]) == (1, 3)
    assert (stats["minValues"]["_cdc_chunk"], stats["maxValues"]["_cdc_chunk"]) == ("k", long_chunk)
    assert "note" not in stats["minValues"]


ID = Column(name="id", data_type="int", column_type="int", nullable=False)
AT = BinlogOffset("mysql-bin.000001", 100)
PARTS = [SnapshotSplit(T, 0, "id", None, 10), SnapshotSplit(T, 0, "id", 10, 20), SnapshotSplit(T, 0, "id", 20, None)]


def change(op: Operation, before: int | None, after: int | None) -> ChangeRecord:
    return ChangeRecord(op, T, None if before is None else {"id": before}, None if after is None else {"id": after}, AT)


@pytest.mark.parametrize(("changes", "touched"), [
    ([], []),
    ([change(Operation.CREATE, None, 15)], [1]),
    ([change(Operation.DELETE, 3, None), change(Operation.UPDATE, 25, 25)], [0, 2]),
    ([change(Operation.UPDATE, 5, 12)], [0, 1]),  # an update moving a row between partitions touches both
    ([TableTruncated(T, AT)], [0, 1, 2]),
])
def test_the_window_touches_the_partitions_holding_its_changes(changes, touched):
    assert touched_partitions(PARTS, changes, KeyOrdering(ID)) == touched


D = Column(name="d", data_type="date", column_type="date", nullable=False)
V = Column(name="v", data_type="int", column_type="int", nullable=True)
DAY = dt.date(2024, 1, 1)


@pytest.mark.parametrize("merge_mode", ["copy-on-write", "merge-on-read"])
def test_a_merge_reads_only_the_files_holding_a_changed_key(tmp_path, merge_mode):
    """Five snapshot files of a DATE key (merged copy-on-write by delta-rs's streamed execution, which
    derives no pruning from the changes itself); a batch changes keys of two of them and adds one past
    the end."""
    sink = DeltaSink(str(tmp_path / "lake"), merge_mode=merge_mode)
    schema = TableSchema(T, (D, V), ("d",))
    sink.prepare(schema)
    writer = SinkWriter(sink, schema, "d", KeyOrdering(D))
    for index in range(5):
        start, end = DAY + dt.timedelta(20 * index), DAY + dt.timedelta(20 * index + 20)
        split = SnapshotSplit(T, index, "d", None if index == 0 else start, None if index == 4 else end)
        writer.write_split(FinishedSplit(split, AT), [{"d": start + dt.timedelta(i), "v": 0} for i in range(20)])
    later = BinlogOffset("mysql-bin.000001", 200)
    changes = [ChangeRecord(Operation.UPDATE, T, {"d": DAY + dt.timedelta(25), "v": 0}, {"d": DAY + dt.timedelta(25), "v": 1}, later),
               ChangeRecord(Operation.DELETE, T, {"d": DAY + dt.timedelta(61), "v": 0}, None, later, 1),
               ChangeRecord(Operation.CREATE, T, None, {"d": DAY + dt.timedelta(500), "v": 2}, later, 2)]
    apply_change_batch({T: writer}, changes, app_id="test", batch_id=1)
    table = DeltaTable(sink.table_uri(T))
    assert table.history(1)[0]["operationMetrics"]["num_target_files_scanned"] == 2
    held = read_delta(sink.table_uri(T), columns=["d", "v"])
    rows = {r["d"]: r["v"] for r in held.to_pylist()}
    assert held.num_rows == len(rows) == 100 and rows[DAY + dt.timedelta(25)] == 1 and rows[DAY + dt.timedelta(500)] == 2
    assert DAY + dt.timedelta(61) not in rows


@pytest.mark.parametrize("streamed", [False, True])
def test_a_pruned_merge_conflicts_with_a_concurrent_file_holding_one_of_its_new_keys(sink, streamed):
    """The merge predicate names the files holding the batch's keys and the keys no file holds: a
    writer that committed one of those keys meanwhile makes the merge fail (and be retried) instead
    of committing beside it, which would leave the key in the table twice."""
    uri = sink.table_uri(T)
    write_deltalake(uri, rows(1, 2, 3), mode="append")
    read = DeltaTable(uri)
    write_deltalake(uri, rows(100), mode="append")  # committed after the merge read the table
    changes = rows(2, 100)
    files = files_holding(read, changes.column("_cdc_chunk"))
    with pytest.raises(CommitFailedError):
        read.merge(changes, predicate=f"t.id = s.id AND ({files})", source_alias="s", target_alias="t",
                   streamed_exec=streamed).when_matched_update_all().when_not_matched_insert_all().execute()
