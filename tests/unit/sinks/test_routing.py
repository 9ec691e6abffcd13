"""Two source tables routed into one sink table (sinks/routing.py), on a real Delta table on local
disk: the shards hold the same key values, and whatever is written for one shard (a split, data
files, a TRUNCATE, a column's default, a merge, a stream's position, its changelog) leaves the
other shard's rows as they were."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.errors import SchemaChangedError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, Operation
from airflow_provider_mysqlcdc.cdc.model.rules import Route, TableRule
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering, encode_sort_key
from airflow_provider_mysqlcdc.cdc.records.table_rows import RowRules
from airflow_provider_mysqlcdc.sinks.arrow_rows import SHARD_COLUMNS, arrow_schema, rows_to_data_table
from airflow_provider_mysqlcdc.sinks.changelog import CHANGELOG_SUFFIX
from airflow_provider_mysqlcdc.sinks.data_files import write_data_file
from airflow_provider_mysqlcdc.sinks.delta.sink import DeltaSink
from airflow_provider_mysqlcdc.sinks.routing import fit_shards, shard_bounds, shard_id, sink_target
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_change_batch
from devtools.verify import read_delta

A, B = TableId("shop_1", "orders"), TableId("shop_2", "orders")
ROUTE = Route("shop", "orders")
SINK = TableId("shop", "orders")
ID = Column("id", "int", "int(11)", False)
V = Column("v", "varchar", "varchar(20)", True, charset="utf8mb4", collation="utf8mb4_bin")
AT = BinlogOffset("mysql-bin.000001", 100)
MIDDLE, LATER = BinlogOffset("mysql-bin.000001", 300), BinlogOffset("mysql-bin.000001", 500)


def shard_schema(table_id: TableId, *extra: Column, route: Route = ROUTE) -> TableSchema:
    return TableSchema(table_id, (ID, V, *extra), ("id",), table_rule=TableRule(route=route))


@pytest.fixture
def sink(tmp_path) -> DeltaSink:
    return DeltaSink(str(tmp_path / "lake"))


def writer_of(sink: DeltaSink, table_id: TableId, *extra: Column) -> SinkWriter:
    schema = shard_schema(table_id, *extra)
    sink.prepare(schema)
    return SinkWriter(sink, schema, "id", KeyOrdering(ID))


def snapshot(writer: SinkWriter, ids: range, value: str, start: int | None = None, end: int | None = None) -> None:
    """One split ``[start, end)`` of the writer's shard, holding ``ids``."""
    split = SnapshotSplit(writer.schema.table_id, 0, "id", start, end)
    writer.write_split(FinishedSplit(split, AT), [{"id": i, "v": value} for i in ids])


def held(sink: DeltaSink) -> dict[tuple[str, int], str | None]:
    """The sink table's rows: (source database, id) to v."""
    rows = read_delta(sink.table_uri(SINK)).to_pylist()
    assert len({(r["_cdc_source_database"], r["id"]) for r in rows}) == len(rows), "a shard's key twice"
    return {(r["_cdc_source_database"], r["id"]): r["v"] for r in rows}


def both(sink: DeltaSink) -> tuple[SinkWriter, SinkWriter]:
    """Shards A and B in one sink table, each holding ids 1-5 ("a" and "b")."""
    a, b = writer_of(sink, A), writer_of(sink, B)
    snapshot(a, range(1, 6), "a")
    snapshot(b, range(1, 6), "b")
    return a, b


def test_both_shards_land_in_the_one_sink_table_with_their_source_names_and_tagged_chunks(sink):
    both(sink)
    table = read_delta(sink.table_uri(SINK))
    assert table.num_rows == 10
    assert {tuple(r[c] for c in SHARD_COLUMNS) for r in table.to_pylist()} == {("shop_1", "orders"), ("shop_2", "orders")}
    for row in table.to_pylist():
        source = TableId(row["_cdc_source_database"], row["_cdc_source_table"])
        assert row["_cdc_chunk"] == shard_id(source) + "." + encode_sort_key(row["id"])
    fields = pa.schema(DeltaTable(sink.table_uri(SINK)).schema().to_arrow())
    assert not any(fields.field(name).nullable for name in SHARD_COLUMNS)


def test_a_whole_table_split_of_one_shard_replaces_only_its_rows(sink):
    a, _ = both(sink)
    snapshot(a, range(3, 5), "a2")  # an open split (start and end None): the shard's whole table
    assert held(sink) == {**{("shop_2", i): "b" for i in range(1, 6)}, ("shop_1", 3): "a2", ("shop_1", 4): "a2"}


def test_a_split_range_of_one_shard_replaces_only_its_rows_in_that_range(sink):
    a, _ = both(sink)
    snapshot(a, [2], "a2", start=2, end=4)  # id 3 is gone from shard A's range [2, 4)
    expected = {**{("shop_1", i): "a" for i in (1, 4, 5)}, ("shop_1", 2): "a2", **{("shop_2", i): "b" for i in range(1, 6)}}
    assert held(sink) == expected


def test_a_range_commit_of_data_files_of_one_shard_keeps_the_other_shards_files(sink):
    a, _ = both(sink)
    uri = sink.table_uri(SINK)
    file_schema = sink.file_schema(a.schema)
    assert file_schema is not None
    data = a.stamped(pa.table({"id": pa.array([7, 8], pa.int32()), "v": ["a3", "a3"]}), AT)
    files = [write_data_file(uri, data, file_schema, prefix="test")]
    start, end = a.split_range(SnapshotSplit(A, 0, "id"))
    sink.commit_range(SINK, start, end, files, file_schema=file_schema)
    assert held(sink) == {("shop_1", 7): "a3", ("shop_1", 8): "a3", **{("shop_2", i): "b" for i in range(1, 6)}}


def test_a_truncate_of_one_shard_removes_only_its_rows(sink):
    a, _ = both(sink)
    assert a.truncate_before(LATER, 0, app_id="test", batch_id=1)
    assert held(sink) == {("shop_2", i): "b" for i in range(1, 6)}


def test_a_default_filled_in_one_shard_fills_only_its_rows(sink):
    w = Column("w", "int", "int(11)", True)
    a, _ = both(sink)
    a = writer_of(sink, A, w)
    assert a.fill_before(LATER, {"w": 7}, app_id="test", batch_id=1)
    rows = read_delta(sink.table_uri(SINK)).to_pylist()
    assert {(r["_cdc_source_database"], r["w"]) for r in rows} == {("shop_1", 7), ("shop_2", None)}


def test_a_merge_of_one_shard_never_touches_the_same_key_in_another(sink):
    """Even where one data file holds both shards' rows (clustering joins small files), so that the
    files a merge reads hold the other shard's keys too."""
    a, b = both(sink)
    assert sink.cluster(SINK) is not None
    assert len(DeltaTable(sink.table_uri(SINK)).file_uris()) == 1
    changes = [ChangeRecord(Operation.UPDATE, A, {"id": 1, "v": "a"}, {"id": 1, "v": "a1"}, LATER),
               ChangeRecord(Operation.DELETE, A, {"id": 2, "v": "a"}, None, LATER, 1),
               ChangeRecord(Operation.CREATE, A, None, {"id": 9, "v": "a9"}, LATER, 2)]
    apply_change_batch({A: a, B: b}, changes, app_id="test", batch_id=1)
    expected = {("shop_1", 1): "a1", **{("shop_1", i): "a" for i in (3, 4, 5)}, ("shop_1", 9): "a9",
                **{("shop_2", i): "b" for i in range(1, 6)}}
    assert held(sink) == expected


def test_each_shard_applies_the_changes_after_its_own_position(sink):
    """Shard A committed a later position than B's changes of a replayed batch: B's still apply
    (one position for the sink table would skip them as applied)."""
    a, b = both(sink)
    apply_change_batch({A: a}, [ChangeRecord(Operation.UPDATE, A, {"id": 1, "v": "a"}, {"id": 1, "v": "a1"}, LATER)],
                       app_id="test", batch_id=2)
    fresh_a, fresh_b = writer_of(sink, A), writer_of(sink, B)  # a restarted stream: positions read from the sink
    assert fresh_a.applied() is not None and fresh_b.applied() is None
    merged = apply_change_batch({A: fresh_a, B: fresh_b},
                                [ChangeRecord(Operation.UPDATE, B, {"id": 1, "v": "b"}, {"id": 1, "v": "b1"}, MIDDLE),
                                 ChangeRecord(Operation.UPDATE, A, {"id": 1, "v": "a1"}, {"id": 1, "v": "a2"}, LATER)],
                                app_id="test", batch_id=2)
    assert merged == {B: 1}
    assert held(sink)[("shop_2", 1)] == "b1" and held(sink)[("shop_1", 1)] == "a1"


def test_the_changelog_of_a_routed_table_names_each_changes_source(sink):
    a, b = both(sink)
    apply_change_batch({A: a, B: b}, [ChangeRecord(Operation.UPDATE, A, {"id": 1, "v": "a"}, {"id": 1, "v": "a1"}, AT),
                                      ChangeRecord(Operation.DELETE, B, {"id": 2, "v": "b"}, None, LATER)],
                       app_id="test", batch_id=1, changelog=True)
    assert b.truncate_before(BinlogOffset("mysql-bin.000001", 900), 0, app_id="test", batch_id=2, changelog=True)
    log = read_delta(sink.table_uri(SINK) + CHANGELOG_SUFFIX).to_pylist()
    assert sorted((r["op"], r["source_database"], r["source_table"]) for r in log) == [
        ("d", "shop_2", "orders"), ("t", "shop_2", "orders"), ("u", "shop_1", "orders")]
    assert sink.applied_position(SINK, changelog=True, shard=shard_id(A)) is not None


def test_a_routed_tables_schema_is_never_replaced_by_one_shard(sink):
    both(sink)
    with pytest.raises(SchemaChangedError, match="shard of shop.orders"):
        sink.replace_schema(shard_schema(A))
    assert len(held(sink)) == 10


def test_a_shards_range_holds_every_key_of_its_own_and_none_of_another_shard():
    keys = [encode_sort_key(k) for k in (-2**63, -1, 0, 1, 2**63 - 1, b"", b"\xff" * 8, 1.5)]
    for mine, other in ((A, B), (B, A)):
        low, high = shard_bounds(shard_id(mine))
        for key in keys:
            assert low <= shard_id(mine) + "." + key < high
            assert not low <= shard_id(other) + "." + key < high


def test_a_table_that_is_not_routed_writes_its_own_sink_table_without_a_tag():
    schema = TableSchema(A, (ID, V), ("id",), table_rule=TableRule(exclude=("v",)))
    target = sink_target(schema)
    assert (target.table_id, target.shard, target.tag) == (A, "", "")
    assert target.bounds("01", None) == ("01", None)


def test_a_rule_that_only_routes_leaves_the_rows_as_they_are():
    assert RowRules.of(shard_schema(A), salt=lambda: "") is None


def test_a_route_travels_with_its_rule():
    rule = TableRule(exclude=("v",), route=Route("shop", "orders", global_key=True, column_types=(("ID", "int64"),)))
    again = TableRule.from_dict(rule.to_dict())
    assert again == rule and again.route.global_key and again.route.column_types == (("id", "int64"),)
    assert "into shop.orders (key unique across shards)" in str(rule)


def test_declaring_the_key_global_is_no_change_of_rule_that_re_snapshots():
    assert TableRule(route=Route("shop", "orders", global_key=True)) == TableRule(route=Route("shop", "orders"))


def test_the_sink_types_a_shard_is_written_with_are_no_change_of_rule_that_re_snapshots():
    """A DDL made the shard's own type the table's (INT to BIGINT where the table has BIGINT): the
    next plan records no wider type for it, and the shard is not re-snapshotted for that."""
    assert TableRule(route=Route("shop", "orders", column_types=(("v", "int64"),))) == TableRule(
        route=Route("shop", "orders"))


def test_shards_at_first_capture_share_the_widest_type_of_each_column():
    wide = TableSchema(B, (Column("id", "bigint", "bigint(20)", False), V,
                           Column("amount", "decimal", "decimal(12,4)", True, numeric_precision=12, numeric_scale=4)),
                       ("id",), table_rule=TableRule(route=ROUTE))
    narrow = shard_schema(A, Column("amount", "decimal", "decimal(10,2)", True, numeric_precision=10, numeric_scale=2),
                          Column("w", "float", "float", True))
    fit = fit_shards([], [narrow, wide])
    assert (fit.unfit, fit.problems) == ({}, [])
    assert fit.types == {"id": pa.int64(), "v": pa.string(), "amount": pa.decimal128(12, 4), "w": pa.float32()}
    typed = fit.typed(narrow)
    assert typed.table_rule.route.column_types == (("amount", "decimal128(12, 4)"), ("id", "int64"))
    assert arrow_schema(typed).field("id").type == pa.int64() and fit.typed(wide).table_rule.route.column_types == ()


def test_a_shard_widened_past_its_recorded_sink_type_keeps_its_own_type():
    """A DDL made the shard's column wider than the routed table's: its writes are refused (and it
    freezes), rather than cast to a type that cannot hold them."""
    recorded = replace(ROUTE, column_types=(("id", "int64"),))
    widened = TableSchema(A, (Column("id", "decimal", "decimal(30,0)", False, numeric_precision=30, numeric_scale=0), V),
                          ("id",), table_rule=TableRule(route=recorded))
    assert arrow_schema(widened).field("id").type == pa.decimal128(30, 0)


def test_a_shard_fits_columns_written_before_only_where_its_type_widens_into_theirs():
    written = [shard_schema(A)]  # id INT: the sink table's id is int32
    fit = fit_shards(written, [TableSchema(B, (Column("id", "bigint", "bigint(20)", False), V), ("id",),
                                           table_rule=TableRule(route=ROUTE))])
    assert fit.unfit == {B: "column id is bigint(20) (int64 in the sink) in shop_2.orders, which the sink table's "
                            "int32 cannot hold"}
    narrow = TableSchema(B, (Column("id", "smallint", "smallint(6)", False), V), ("id",), table_rule=TableRule(route=ROUTE))
    fit = fit_shards(written, [narrow])
    assert fit.unfit == {} and fit.typed(narrow).table_rule.route.column_types == (("id", "int32"),)


def test_shards_whose_keys_differ_do_not_fit():
    other = TableSchema(B, (ID, V), ("id", "v"), table_rule=TableRule(route=ROUTE))
    assert fit_shards([], [shard_schema(A), other]).unfit == {B: "shop_2.orders has key (id, v) and shop_1.orders (id)"}


def test_shards_whose_column_no_one_type_holds_cannot_share_a_sink_table():
    text = TableSchema(B, (ID, Column("v", "int", "int(11)", True)), ("id",), table_rule=TableRule(route=ROUTE))
    assert fit_shards([], [shard_schema(A), text]).problems == [
        "column v is int(11) (int32 in the sink) in shop_2.orders and varchar(20) (string) in shop_1.orders, which "
        "no one type holds"]


def test_a_widened_chunk_key_encodes_its_rows_within_their_splits_range(sink):
    """The shard's DECIMAL(10,2) key is DECIMAL(12,4) in the routed table: a row's _cdc_chunk comes
    from its own value, as the split's bounds do, so the split's range holds it."""
    key = Column("id", "decimal", "decimal(10,2)", False, numeric_precision=10, numeric_scale=2)
    schema = TableSchema(A, (key, V), ("id",), table_rule=TableRule(
        route=replace(ROUTE, column_types=(("id", "decimal128(12, 4)"),))))
    writer = SinkWriter(sink, schema, "id", KeyOrdering(key))
    start, end = writer.split_range(SnapshotSplit(A, 0, "id", Decimal("1.00"), Decimal("2.00")))
    data = rows_to_data_table(schema, [{"id": Decimal("1.50"), "v": "x"}])
    assert data.schema.field("id").type == pa.decimal128(12, 4)
    [chunk] = writer.stamped(data, AT).column("_cdc_chunk").to_pylist()
    assert start <= chunk < end
