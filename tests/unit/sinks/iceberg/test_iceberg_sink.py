"""The Iceberg sink (sinks/iceberg/sink.py) on real Iceberg tables: pyiceberg, an embedded SQLite catalog
and data files in a temporary folder. What the stream's rules need of a sink is tested on both
formats by tests/unit/stream/; here, what is Iceberg's own: one commit per write, the position in the
table's properties and the snapshot's summary, the files a merge touches, concurrent writers, the
column types and their evolution, the catalog's settings."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import load_catalog
from pyspark import cloudpickle

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError, SchemaChangedError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec, check_namespace
from airflow_provider_mysqlcdc.sinks.base import StreamCommit
from airflow_provider_mysqlcdc.sinks.changelog import CHANGELOG_SCHEMA
from airflow_provider_mysqlcdc.sinks.data_files import write_data_file
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.iceberg import maintenance as iceberg_maintenance
from airflow_provider_mysqlcdc.sinks.iceberg.catalog import CATALOG_NAME, EMBEDDED_CATALOG_FILE, TABLE_LOCATION_PROPERTY
from airflow_provider_mysqlcdc.sinks.iceberg.commits import POSITION_PROPERTY
from airflow_provider_mysqlcdc.sinks.iceberg.maintenance import (
    ORPHAN_MIN_AGE_S,
    changelog_runs,
    compact_changelog,
    expirable,
    held_files,
)
from airflow_provider_mysqlcdc.sinks.iceberg.rows import chunk_filter
from airflow_provider_mysqlcdc.sinks.iceberg.sink import OPERATION_SUMMARY, IcebergSink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_change_batch
from tests.unit.stream.harness import insert, off, update

T = TableId("shop", "t")
ID = Column("id", "int", "int(11)", False)
V = Column("v", "varchar", "varchar(20)", True, charset="utf8mb4", collation="utf8mb4_bin")
AT = BinlogOffset("mysql-bin.000001", 100)


def table_schema(*extra: Column) -> TableSchema:
    return TableSchema(T, (ID, V, *extra), ("id",))


@pytest.fixture
def sink(tmp_path) -> IcebergSink:
    sink = open_sink(SinkSpec(str(tmp_path / "lake"), "iceberg"))
    assert isinstance(sink, IcebergSink)
    return sink


def writer(sink: IcebergSink, schema: TableSchema | None = None) -> SinkWriter:
    schema = schema or table_schema()
    sink.prepare(schema)
    return SinkWriter(sink, schema, "id", KeyOrdering(ID))


def split(w: SinkWriter, start: int | None, end: int | None, ids: range, value: str) -> None:
    w.write_split(FinishedSplit(SnapshotSplit(T, 0, "id", start, end), AT), [{"id": i, "v": value} for i in ids])


def held(sink: IcebergSink) -> dict[int, str]:
    rows = sink.read(T).to_pylist()
    assert len({r["id"] for r in rows}) == len(rows), "a key twice"
    return {r["id"]: r["v"] for r in rows}


def data_files(sink: IcebergSink, *, changelog: bool = False) -> set[str]:
    table = sink.open_table(T, changelog=changelog)
    return set(table.inspect.files().column("file_path").to_pylist())


def test_the_tables_are_named_in_the_embedded_catalog_at_the_lakes_root_and_live_under_it(sink, tmp_path):
    split(writer(sink), None, None, range(1, 4), "a")
    catalog = load_catalog(CATALOG_NAME, type="sql", uri=f"sqlite:///{tmp_path}/lake/{EMBEDDED_CATALOG_FILE}")
    table = catalog.load_table("shop.t")
    assert table.location() == f"{tmp_path}/lake/shop/t"
    assert {r["id"] for r in table.scan().to_arrow().to_pylist()} == {1, 2, 3}


def test_a_sink_with_its_catalog_open_pickles_and_its_copy_opens_a_catalog_of_its_own(sink):
    # a stream's foreachBatch function, which holds the sink, is pickled to a Spark Connect server
    split(writer(sink), None, None, range(1, 4), "a")
    copy = cloudpickle.loads(cloudpickle.dumps(sink))
    assert held(copy) == {1: "a", 2: "a", 3: "a"}
    assert copy.catalog is not sink.catalog


def test_a_split_replaces_exactly_its_range_in_one_commit_leaving_other_files_untouched(sink):
    w = writer(sink)
    split(w, None, 10, range(1, 10), "a")
    split(w, 10, None, range(10, 20), "a")
    before, snapshots = data_files(sink), len(sink.open_table(T).snapshots())
    split(w, None, 10, range(2, 5), "b")  # the split read again: rows 1 and 5-9 are gone from it
    assert held(sink) == {**{i: "b" for i in range(2, 5)}, **{i: "a" for i in range(10, 20)}}
    table = sink.open_table(T)
    assert len(table.metadata.snapshot_log) - snapshots <= 2  # one transaction: its delete and its append
    assert len(data_files(sink) & before) == 1  # the other split's file is the same file


def test_a_stream_commit_records_its_position_in_the_tables_properties_and_its_snapshots_summary(sink):
    w = writer(sink)
    split(w, None, None, range(1, 3), "a")
    apply_change_batch({T: w}, [update(T, 7, {"id": 1, "v": "a"}, {"id": 1, "v": "x"})], app_id="app", batch_id=3)
    table = sink.open_table(T)
    position = table.properties[POSITION_PROPERTY]
    summary = table.current_snapshot().summary.additional_properties
    assert summary[POSITION_PROPERTY] == position and summary["mysqlcdc.batch-id"] == "3"
    assert summary[OPERATION_SUMMARY] == "merge"
    fresh = open_sink(SinkSpec(sink.root, "iceberg"))  # another process
    assert fresh.applied_position(T) == tuple(int(n) for n in position.split(","))


def test_a_replayed_batch_is_recognised_and_applies_nothing(sink):
    w = writer(sink)
    split(w, None, None, range(1, 3), "a")
    batch = [update(T, 7, {"id": 1, "v": "a"}, {"id": 1, "v": "x"})]
    apply_change_batch({T: w}, batch, app_id="app", batch_id=1)
    snapshots = len(sink.open_table(T).snapshots())
    again = SinkWriter(open_sink(SinkSpec(sink.root, "iceberg")), table_schema(), "id", KeyOrdering(ID))
    assert apply_change_batch({T: again}, batch, app_id="app", batch_id=1) == {}
    assert len(sink.open_table(T).snapshots()) == snapshots and held(sink) == {1: "x", 2: "a"}


def test_a_copy_on_write_merge_rewrites_only_the_files_whose_chunk_range_can_hold_a_changed_key(tmp_path):
    sink = open_sink(SinkSpec(str(tmp_path / "lake"), "iceberg", merge_mode="copy-on-write"))
    assert isinstance(sink, IcebergSink)
    w = writer(sink)
    for start in range(0, 40, 10):
        split(w, start or None, start + 10 if start < 30 else None, range(start, start + 10), "a")
    before = data_files(sink)
    apply_change_batch({T: w}, [update(T, 7, {"id": 15, "v": "a"}, {"id": 15, "v": "x"}),
                                insert(T, 8, id=99, v="new")], app_id="app", batch_id=1)
    after = data_files(sink)
    assert len(before - after) == 1 and len(before & after) == 3  # only the file of keys 10-19 was rewritten
    assert held(sink) == {**{i: "a" for i in range(40)}, 15: "x", 99: "new"}


def test_a_filter_of_many_chunk_keys_still_prunes_files_by_their_bounds(sink):
    w = writer(sink)
    for start in range(0, 4000, 1000):
        split(w, start or None, start + 1000 if start < 3000 else None, range(start, start + 1000), "a")
    chunks = sorted(w.stamped(pa.table({"id": pa.array(range(1000, 1500), pa.int32()),
                                        "v": pa.array(["a"] * 500)}), AT).column("_cdc_chunk").to_pylist())
    planned = list(sink.open_table(T).scan(row_filter=chunk_filter(chunks)).plan_files())
    assert len(planned) == 1  # 500 keys (an In of more than 200 alone would read all four files)


def test_a_merge_filter_of_as_many_chunk_keys_as_a_batch_merges_at_once_reads_its_rows(sink):
    """A merge holds up to ``max_apply_changes`` changed keys; a chain of one ``Or`` per 200 of them
    (500 deep) overflowed Python's stack when pyiceberg bound it (the 200,000-row UPDATE benchmark)."""
    w = writer(sink)
    split(w, None, None, range(0, 10), "a")
    most = StreamJob(state="state", sink=SinkSpec("lake")).max_apply_changes
    chunks = w.stamped(pa.table({"id": pa.array(range(0, most * 2, 2), pa.int32()), "v": pa.array(["a"] * most)}),
                       AT).column("_cdc_chunk").to_pylist()
    read = sink.open_table(T).scan(row_filter=chunk_filter(sorted(chunks))).to_arrow()
    assert sorted(read.column("id").to_pylist()) == [0, 2, 4, 6, 8]


def test_concurrent_splits_of_one_table_all_land_retried_on_conflict(sink):
    w = writer(sink)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            split(w, n * 10 or None, n * 10 + 10 if n < 5 else None, range(n * 10, n * 10 + 10), f"s{n}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert held(sink) == {i: f"s{i // 10}" for i in range(60)}


def test_a_merge_racing_a_split_read_after_its_change_leaves_the_splits_rows(sink):
    """A split read as of offset 90 races the stream's merge of a change at 70, which it holds already:
    whichever commits second works from the first's rows (the merge, computed again, finds rows newer
    than its change), so the table ends as the split read it."""
    w = writer(sink)
    split(w, None, None, range(0, 50), "a")
    errors: list[BaseException] = []

    def resplit() -> None:
        try:
            w.write_split(FinishedSplit(SnapshotSplit(T, 0, "id", None, None), off(90)),
                          [{"id": i, "v": "r"} for i in range(50)])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=resplit)
    thread.start()
    apply_change_batch({T: w}, [update(T, 70, {"id": 7, "v": "a"}, {"id": 7, "v": "x"})], app_id="app", batch_id=1)
    thread.join()
    assert errors == [] and held(sink) == {i: "r" for i in range(50)}


def test_every_column_type_of_the_sink_round_trips_through_an_iceberg_table(sink):
    columns = (Column("t8", "tinyint", "tinyint(4)", True), Column("u64", "bigint", "bigint(20) unsigned", True, unsigned=True),
               Column("f", "float", "float", True), Column("d", "decimal", "decimal(12,3)", True, numeric_precision=12,
                                                                     numeric_scale=3),
               Column("wide", "decimal", "decimal(50,2)", True, numeric_precision=50, numeric_scale=2),
               Column("day", "date", "date", True), Column("at", "datetime", "datetime(6)", True),
               Column("ts", "timestamp", "timestamp", True), Column("tm", "time", "time", True),
               Column("b", "varbinary", "varbinary(8)", True), Column("j", "json", "json", True))
    w = writer(sink, table_schema(*columns))
    row = {"id": 1, "v": "é", "t8": -128, "u64": 2**64 - 1, "f": 1.5, "d": Decimal("-123456789.125"),
           "wide": Decimal("1" * 48 + ".25"), "day": dt.date(1, 1, 1), "at": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
           "ts": dt.datetime(2038, 1, 19, 3, 14, 7, tzinfo=dt.timezone.utc), "tm": dt.timedelta(hours=-838),
           "b": b"\x00\xff", "j": '{"a": [1]}'}
    w.write_split(FinishedSplit(SnapshotSplit(T, 0, "id", None, None), AT), [row])
    read = sink.read(T).to_pylist()[0]
    assert {k: read[k] for k in row if k not in ("wide", "tm")} == {k: v for k, v in row.items() if k not in ("wide", "tm")}
    assert read["wide"] == "1" * 48 + ".25" and read["tm"] == -838 * 3600 * 1_000_000


def test_int_to_bigint_and_an_added_column_evolve_the_table_in_place_keeping_its_rows(sink):
    w = writer(sink, table_schema(Column("w", "int", "int(11)", True)))
    w.write_split(FinishedSplit(SnapshotSplit(T, 0, "id", None, None), AT), [{"id": 1, "v": "a", "w": 7}])
    wider = table_schema(Column("w", "bigint", "bigint(20)", True), Column("c", "varchar", "varchar(5)", True))
    sink.prepare(wider)
    w2 = SinkWriter(sink, wider, "id", KeyOrdering(ID))
    apply_change_batch({T: w2}, [insert(T, 9, id=2, v="b", w=2**40, c="new")], app_id="app", batch_id=1)
    rows = {r["id"]: r for r in sink.read(T).to_pylist()}
    assert rows[1]["w"] == 7 and rows[1]["c"] is None and rows[2]["w"] == 2**40 and rows[2]["c"] == "new"


def test_a_type_iceberg_cannot_widen_is_refused_and_replace_schema_empties_the_table_with_the_new_type(sink):
    w = writer(sink, table_schema(Column("w", "int", "int(11)", True)))
    w.write_split(FinishedSplit(SnapshotSplit(T, 0, "id", None, None), AT), [{"id": 1, "v": "a", "w": 7}])
    text = table_schema(Column("w", "varchar", "varchar(5)", True))
    with pytest.raises(SchemaChangedError, match="'w' of shop.t changed from int32 to string.*Re-snapshot"):
        sink.prepare(text)
    snapshots = len(sink.open_table(T).snapshots())
    sink.replace_schema(text)
    assert sink.read(T).num_rows == 0 and sink.read(T).schema.field("w").type in (pa.string(), pa.large_string())
    assert len(sink.open_table(T).snapshots()) == snapshots + 1
    sink.prepare(text)  # the new type is the table's now


def test_truncate_and_fill_each_commit_once_with_their_position(sink):
    w = writer(sink, table_schema(Column("c", "int", "int(11)", True)))
    split(w, None, None, range(1, 4), "a")
    w.fill_before(BinlogOffset("mysql-bin.000001", 200), {"c": 5}, app_id="app", batch_id=1)
    assert {r["c"] for r in sink.read(T).to_pylist()} == {5}
    w.truncate_before(BinlogOffset("mysql-bin.000001", 300), 0, app_id="app", batch_id=2)
    assert sink.read(T).num_rows == 0
    operations = [s.summary.additional_properties.get(OPERATION_SUMMARY) for s in sink.open_table(T).snapshots()]
    assert operations.count("fill") == 1 and operations.count("truncate") == 1


def test_a_lake_on_an_object_store_without_a_catalog_is_refused_naming_the_setting(tmp_path):
    sink = open_sink(SinkSpec("s3://bucket/lake", "iceberg"))
    with pytest.raises(ConfigurationError, match="iceberg_catalog_conn_id"):
        sink.prepare(table_schema())


def test_catalog_settings_that_do_not_open_a_catalog_are_refused_with_the_fix(tmp_path):
    sink = open_sink(SinkSpec(str(tmp_path), "iceberg"), catalog_properties={"type": "no-such-kind"})
    with pytest.raises(ConfigurationError, match="could not be opened.*pyiceberg's catalog properties"):
        sink.prepare(table_schema())


def test_a_catalog_that_places_its_tables_gets_them_where_it_places_them(tmp_path):
    warehouse = tmp_path / "catalog-warehouse"
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{warehouse}",
               TABLE_LOCATION_PROPERTY: "catalog"}
    sink = open_sink(SinkSpec(str(tmp_path / "lake"), "iceberg"), catalog_properties=catalog)
    assert isinstance(sink, IcebergSink)
    split(writer(sink), None, None, range(1, 4), "a")
    location = sink.open_table(T).location()
    assert location.startswith(f"file://{warehouse}/") and "lake" not in location
    assert all(path.startswith(location) for path in data_files(sink))
    assert held(sink) == {1: "a", 2: "a", 3: "a"}
    assert sink.placed_location(T) == location and sink.placed_location(TableId("shop", "absent")) is None


def test_a_sql_catalog_asked_to_place_tables_without_a_warehouse_is_refused_with_the_fix(tmp_path):
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", TABLE_LOCATION_PROPERTY: "catalog"}
    sink = open_sink(SinkSpec(str(tmp_path / "lake"), "iceberg"), catalog_properties=catalog)
    with pytest.raises(ConfigurationError, match="without a 'warehouse' property.*give it a warehouse"):
        sink.prepare(table_schema())
    assert not (tmp_path / "lake").exists()


def test_an_unknown_table_location_setting_is_refused_before_anything_is_written(tmp_path):
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", TABLE_LOCATION_PROPERTY: "warehouse"}
    sink = open_sink(SinkSpec(str(tmp_path / "lake"), "iceberg"), catalog_properties=catalog)
    with pytest.raises(ConfigurationError, match=f"{TABLE_LOCATION_PROPERTY} is 'warehouse'.*'catalog'"):
        sink.prepare(table_schema())
    assert not (tmp_path / "lake").exists()


@pytest.mark.parametrize("template", ["", "{db}", "lake_{database}_{table}"])
def test_a_namespace_template_naming_more_than_the_database_is_refused(template):
    with pytest.raises(ConfigurationError, match="iceberg_namespace"):
        check_namespace(template)


def test_the_namespace_template_names_each_tables_namespace(tmp_path):
    sink = open_sink(SinkSpec(str(tmp_path / "lake"), "iceberg", "lake_{database}"))
    split(writer(sink), None, None, range(1, 3), "a")
    assert sink.catalog.load_table("lake_shop.t").scan().to_arrow().num_rows == 2
    assert StreamCommit("a", 1, (1, 2, 3, 4)).shard == ""


def overlapping_files(sink: IcebergSink) -> int:
    """How many data files' ``_cdc_chunk`` ranges overlap another's."""
    files = held_files(sink.open_table(T))
    return sum(1 for f in files if any(g is not f and f.low <= g.high and g.low <= f.high for g in files))


def spoilt_by_merges(sink: IcebergSink) -> SinkWriter:
    """Four splits, then merges whose rewritten and inserted rows span several splits' ranges."""
    w = writer(sink)
    for start in range(0, 40, 10):
        split(w, start or None, start + 10 if start < 30 else None, range(start, start + 10), "a")
    for batch, ids in enumerate([(5, 25), (15, 35), (1, 39)], start=1):
        apply_change_batch({T: w}, [update(T, 10 * batch + i, {"id": k, "v": "a"}, {"id": k, "v": f"m{batch}"})
                                    for i, k in enumerate(ids)], app_id="app", batch_id=batch)
    return w


def test_clustering_rewrites_overlapping_files_in_key_order_and_changes_no_row(sink):
    spoilt_by_merges(sink)
    rows, position = held(sink), sink.applied_position(T)
    assert overlapping_files(sink) > 0
    result = sink.cluster(T, min_files=2)
    assert result is not None and result.files_read >= 2
    assert overlapping_files(sink) == 0 and held(sink) == rows and sink.applied_position(T) == position
    assert sink.open_table(T).current_snapshot().summary.additional_properties[OPERATION_SUMMARY] == "cluster"
    assert sink.cluster(T, min_files=2) is None  # nothing left to do


def test_maintenance_expires_old_snapshots_and_deletes_only_unreferenced_old_files(sink):
    spoilt_by_merges(sink)
    rows = held(sink)
    old = time.time() - 2 * ORPHAN_MIN_AGE_S
    for path in Path(sink.table_uri(T), "data").iterdir():  # every file written so far is old
        os.utime(path, (old, old))
    [report] = sink.maintain(T, MaintenancePolicy(compact=True, checkpoint=False, vacuum_retention_s=0))
    table = sink.open_table(T)
    assert len(table.snapshots()) == 1 and held(sink) == rows
    assert report.files_vacuumed > 0 and report.files_after == len(list(Path(sink.table_uri(T), "data").iterdir()))
    assert overlapping_files(sink) == 0


def test_expiry_deletes_the_manifests_only_expired_snapshots_referenced(sink):
    spoilt_by_merges(sink)
    rows = held(sink)
    metadata = Path(sink.table_uri(T), "metadata")
    avro_before = {p.name for p in metadata.glob("*.avro")}
    sink.maintain(T, MaintenancePolicy(compact=True, checkpoint=False, vacuum_retention_s=0))
    table = sink.open_table(T)
    [current] = table.snapshots()
    kept = {Path(current.manifest_list).name} | {Path(m.manifest_path).name for m in current.manifests(table.io)}
    assert {p.name for p in metadata.glob("*.avro")} == kept and len(avro_before) > len(kept)
    assert held(sink) == rows


CHANGELOG = TableId("shop", "t__changelog")


def changelog_batches(sink: IcebergSink, versions: list[list[int]]) -> list[dict]:
    """One changelog append (one data file) per entry of ``versions``, a row per version in it;
    the changelog's rows afterwards, in a stable order."""
    split(writer(sink), None, None, range(1, 3), "a")
    for batch, batch_versions in enumerate(versions, start=1):
        rows = pa.Table.from_pylist([{"op": "u", "after": f'{{"id": {v}, "batch": {batch}}}', "binlog_pos": v,
                                      "row_in_event": i, "version": v} for i, v in enumerate(batch_versions)],
                                    schema=CHANGELOG_SCHEMA)
        sink.append_changelog(T, rows, commit=StreamCommit("app", batch, (1, 1000 * batch, 0, 0)))
    return changelog_rows(sink)


def changelog_rows(sink: IcebergSink) -> list[dict]:
    return sorted(sink.read(CHANGELOG).to_pylist(), key=lambda r: (r["version"], r["after"]))


def test_maintenance_bin_packs_a_changelogs_small_files_in_one_snapshot_that_changes_no_row(sink):
    before = changelog_batches(sink, [[1000 * b + i for i in range(3)] for b in range(1, 9)])
    position = sink.applied_position(T, changelog=True)
    reports = sink.maintain(T, MaintenancePolicy(compact=True, checkpoint=False, vacuum_retention_s=None))
    assert reports[-1].files_before == 8 and reports[-1].files_rewritten == 8 and reports[-1].files_after == 1
    assert changelog_rows(sink) == before and sink.applied_position(T, changelog=True) == position
    snapshot = sink.open_table(T, changelog=True).current_snapshot()
    summary = snapshot.summary
    assert summary.operation.value == "overwrite" and summary[OPERATION_SUMMARY] == "compact"
    assert summary["added-records"] == summary["deleted-records"] == str(len(before))
    [packed] = list(data_files(sink, changelog=True))
    assert pq.read_table(packed.removeprefix("file://")).column("version").to_pylist() == sorted(r["version"] for r in before)


def test_changelog_files_whose_versions_interleave_are_packed_without_a_row_written_twice(sink):
    """Routed shards' batches interleave in ``version``, and a run cut mid-event shares a version
    with the next: files are packed whole, never read by a version range, so no row comes twice."""
    before = changelog_batches(sink, [[10, 30, 50], [20, 30, 40], [50, 60], [5, 70], [60, 60, 80]])
    assert len(before) == 13
    table = sink.open_table(T, changelog=True)
    largest = max(table.inspect.data_files().column("file_size_in_bytes").to_pylist())
    removed = compact_changelog(table, target_bytes=2 * largest + 1).rewritten  # two files a run
    assert removed == 4  # two runs whose version ranges overlap
    assert changelog_rows(sink) == before and len(data_files(sink, changelog=True)) == 3


def test_a_changelog_compaction_meeting_a_streams_append_plans_again_and_leaves_no_file_behind(sink, monkeypatch):
    """The stream appends a batch while the compaction writes its file: the compaction's commit fails,
    its file is deleted, and the next attempt packs the files again with the new batch's rows kept."""
    before = changelog_batches(sink, [[1, 2], [3, 4], [5, 6]])
    write, written = iceberg_maintenance.write_data_file, []

    def write_meeting_an_append(*args, **kwargs):
        if not written:
            rows = pa.Table.from_pylist([{"op": "c", "after": '{"id": 7}', "version": 7}], schema=CHANGELOG_SCHEMA)
            sink.append_changelog(T, rows, commit=StreamCommit("app", 9, (1, 9000, 0, 0)))
        written.append(write(*args, **kwargs))
        return written[-1]

    monkeypatch.setattr(iceberg_maintenance, "write_data_file", write_meeting_an_append)
    compaction = compact_changelog(sink.open_table(T, changelog=True))
    removed, note = compaction.rewritten, compaction.note
    rows = changelog_rows(sink)
    assert note == "" and len(written) == 2 and [r["version"] for r in rows] == [r["version"] for r in before] + [7]
    assert removed == 4 and len(data_files(sink, changelog=True)) == 1  # the new batch's file packed too
    folder = Path(sink.open_table(T, changelog=True).location().removeprefix("file://"), "data")
    assert [p.name for p in folder.glob("compact-*")] == [Path(p).name for p in data_files(sink, changelog=True)]


def test_changelog_runs_are_neighbouring_small_files_up_to_the_target_and_never_cross_a_large_one():
    mib = 2**20
    files = [(1, 9, mib, "a"), (10, 19, mib, "b"), (20, 29, 100 * mib, "big"), (30, 39, mib, "c"),
             (40, 49, mib, "d"), (50, 59, mib, "e"), (60, 69, mib, "f")]
    runs, left = changelog_runs(files, target_bytes=3 * mib, max_rewrite_bytes=10**12)
    assert runs == [["a", "b"], ["c", "d", "e"]] and left == ""  # "f" alone is no run
    runs, left = changelog_runs(files, target_bytes=3 * mib, max_rewrite_bytes=4 * mib)
    assert runs == [["a", "b"], ["c", "d"]] and "next run" in left


def test_an_unreferenced_file_younger_than_the_minimum_age_is_kept_for_the_writer_about_to_commit_it(sink):
    split(writer(sink), None, None, range(1, 4), "a")
    pending = Path(sink.table_uri(T), "data", "written-not-committed.parquet")
    pq.write_table(pa.table({"id": [9]}), pending)
    sink.maintain(T, MaintenancePolicy(compact=False, checkpoint=False, vacuum_retention_s=0))
    assert pending.exists() and held(sink) == {1: "a", 2: "a", 3: "a"}


def test_a_value_its_column_cannot_hold_is_the_tables_refusal_and_one_that_fits_is_written(sink):
    """The table's DECIMAL(10,2) kept (a writer of another scale, as under schema_changes="ignore"):
    1.5 fits it and is written; 1.2345 would lose digits, which freezes the table, not the stream."""
    def decimal(scale: int) -> Column:
        return Column("d", "decimal", f"decimal(10,{scale})", True, numeric_precision=10, numeric_scale=scale)

    split(writer(sink, table_schema(decimal(2))), None, None, range(1, 3), "a")
    finer = SinkWriter(sink, table_schema(decimal(4)), "id", KeyOrdering(ID))
    apply_change_batch({T: finer}, [insert(T, 9, id=5, v="x", d=Decimal("1.5000"))], app_id="app", batch_id=1)
    assert {r["id"]: r["d"] for r in sink.read(T).to_pylist()}[5] == Decimal("1.50")
    with pytest.raises(pa.ArrowInvalid) as refused:
        apply_change_batch({T: finer}, [insert(T, 10, id=6, v="y", d=Decimal("1.2345"))], app_id="app", batch_id=2)
    assert sink.refuses(T, refused.value) and not sink.refuses(T, OSError("connection reset by peer"))
    assert 6 not in held(sink)


def test_a_stream_write_made_again_after_it_landed_is_not_made_twice(sink):
    """A commit whose outcome was unknown (the catalog's connection lost as it answered) is made
    again by the retry: the table's recorded position shows it landed, and nothing is added."""
    w = writer(sink)
    split(w, None, None, range(1, 3), "a")
    commit = StreamCommit("app", 1, (1, 1000, 0, 0))
    rows = CHANGELOG_SCHEMA.empty_table().to_pylist() or [{"op": "c", "after": '{"id": 9}', "binlog_pos": 1000}]
    rows = pa.Table.from_pylist(rows, schema=CHANGELOG_SCHEMA)
    sink.append_changelog(T, rows, commit=commit)
    sink.append_changelog(T, rows, commit=commit)
    assert sink.read(TableId("shop", "t__changelog")).num_rows == 1
    snapshots = len(sink.open_table(T).snapshots())
    sink.truncate_before(T, 10**18, commit=commit)
    sink.truncate_before(T, 10**18, commit=commit)
    assert len(sink.open_table(T).snapshots()) == snapshots + 2  # one transaction: its delete and its append



def test_the_first_data_files_of_a_new_table_are_written_into_its_data_folder_and_committed(sink):
    w = writer(sink)
    file_schema = sink.file_schema(w.schema)
    rows = w.stamped(pa.table({"id": pa.array([1, 2], pa.int32()), "v": ["a", "b"]}), AT)
    files = [write_data_file(sink.data_folder(T), rows, file_schema, prefix="chunk-0-0")]
    sink.commit_range(T, None, None, files, file_schema=file_schema)
    assert held(sink) == {1: "a", 2: "b"}


def test_data_files_written_apart_replace_their_range_in_one_commit_once(sink):
    """The executors' way: rows written as Parquet files into the table's data folder, in the table's
    columns without field ids, then committed for their range (a file partly inside it rewritten)."""
    w = writer(sink, table_schema(Column("n", "tinyint", "tinyint(4)", True)))
    w.write_split(FinishedSplit(SnapshotSplit(T, 0, "id", None, None), AT), [{"id": i, "v": "old", "n": 1} for i in range(20)])
    file_schema = sink.file_schema(w.schema)
    assert file_schema is not None and file_schema.field("n").type == pa.int32() and not file_schema.field("id").metadata
    rows = w.stamped(pa.table({"id": pa.array([5, 6, 7], pa.int32()), "v": ["new"] * 3, "n": pa.array([2] * 3, pa.int8())}), AT)
    files = [write_data_file(sink.data_folder(T), rows, file_schema, prefix="chunk-0-0")]
    start, end = w.split_range(SnapshotSplit(T, 0, "id", 5, 10))
    sink.commit_range(T, start, end, files, file_schema=file_schema)
    expected = {**{i: "old" for i in range(20) if not 5 <= i < 10}, 5: "new", 6: "new", 7: "new"}
    assert held(sink) == expected
    snapshots = len(sink.open_table(T).snapshots())
    sink.commit_range(T, start, end, files, file_schema=file_schema)  # landed already: nothing more
    assert len(sink.open_table(T).snapshots()) == snapshots and held(sink) == expected
    assert any(f"{sink.data_folder(T)}/{files[0].path}" == p for p in data_files(sink))


def test_a_snapshot_expires_once_it_stopped_being_current_longer_ago_than_the_retention():
    """Snapshot 1 was created long ago but replaced only at 900: a cutoff of 500 keeps it (a reader
    that began while it was current may still read its files); 2 was never current (a transaction's
    first of two snapshots) and goes by its own time; the current one always stays."""
    log = [(1, 100), (3, 900), (4, 950)]
    snapshots = [(1, 100), (2, 400), (3, 400), (4, 950)]
    assert expirable(log, snapshots, 4, 500) == [2]
    assert expirable(log, snapshots, 4, 920) == [1, 2]
    assert expirable(log, snapshots, 4, 10**9) == [1, 2, 3]


def test_a_catalog_that_does_not_open_is_refused_without_the_values_of_its_properties(tmp_path):
    secret_uri = "thrift://user:hunter2-secret@127.0.0.1:1"
    sink = open_sink(SinkSpec(str(tmp_path), "iceberg"), catalog_properties={"type": "hive", "uri": secret_uri})
    with pytest.raises(ConfigurationError) as refused:
        sink.prepare(table_schema())
    assert "hunter2-secret" not in str(refused.value) and refused.value.__cause__ is None
    assert "type, uri" in str(refused.value)
