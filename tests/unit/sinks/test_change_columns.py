"""A table's changes as Arrow columns: typed on the executor, filtered and reduced per key on the driver."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, Operation
from airflow_provider_mysqlcdc.cdc.model.schema import RESERVED_COLUMN_PREFIX, Column, TableId, TableSchema
from airflow_provider_mysqlcdc.sinks.arrow_rows import METADATA_COLUMNS, data_schema
from airflow_provider_mysqlcdc.sinks.change_columns import (
    CHANGE_FIELDS,
    LOG_FIELDS,
    TableChanges,
    change_columns,
    changes_after,
    changes_before,
    conform_changes,
    last_change_per_key,
    position_at,
)
from airflow_provider_mysqlcdc.sinks.changelog import changelog_rows

T = TableId("db", "t")
ID = Column("id", "int", "int(11)", False)
V = Column("v", "varchar", "varchar(10)", True)
BIG = Column("big", "bigint", "bigint(20) unsigned", True, unsigned=True)
SCHEMA = TableSchema(T, (ID, V, BIG), ("id",))


def _change(op: Operation, key: int, position: int, row: int = 0, part: int = 0, *, v: str | None = "x",
            file: str = "b.000001", epoch: int = 0) -> ChangeRecord:
    image = {"id": key, "v": v, "big": 2 ** 64 - 1}
    return ChangeRecord(op, T, image if op is Operation.DELETE else None, None if op is Operation.DELETE else image,
                        BinlogOffset(file, position, epoch=epoch), row, part, timestamp_ms=position)


def test_columns_are_typed_like_the_sink_by_the_decoding_side_schema():
    changes = change_columns(SCHEMA, [_change(Operation.CREATE, 1, 100), _change(Operation.DELETE, 2, 200)])

    assert changes.schema.field("id").type == pa.int32()
    assert changes.schema.field("big").type == pa.decimal128(20, 0)
    assert changes.column("big").to_pylist() == [decimal.Decimal(2 ** 64 - 1)] * 2
    assert changes.column("_cdc_op").to_pylist() == ["c", "d"]
    assert changes.column("id").to_pylist() == [1, 2]  # a delete's image is its before image


def test_values_arrow_does_not_take_as_they_are_are_converted_for_their_column_type():
    """TIME's timedelta as microseconds, a DECIMAL wider than Arrow's as its text, beside NULLs and
    beside values taken as they are (a column of plain values never goes through a converter)."""
    time, wide = Column("tm", "time", "time(6)", True), Column("w", "decimal", "decimal(65,30)", True, numeric_scale=30)
    schema = TableSchema(T, (ID, V, BIG, time, wide), ("id",))
    records = [_change(Operation.CREATE, key, 100 + key) for key in (1, 2, 3)]
    records[0].after.update(tm=dt.timedelta(hours=-838, microseconds=-1), w=decimal.Decimal("12345678901234567890123456789012345.123456789012345678901234567890"))
    records[1].after.update(tm=None, w=None)
    records[2].after.update(tm=dt.timedelta(seconds=1), w=decimal.Decimal("-0.000000000000000000000000000001"))
    changes = change_columns(schema, records)
    assert changes.schema.field("tm").type == pa.int64() and changes.schema.field("w").type == pa.string()
    assert changes.column("tm").to_pylist() == [-838 * 3600 * 1_000_000 - 1, None, 1_000_000]
    assert changes.column("w").to_pylist() == ["12345678901234567890123456789012345.123456789012345678901234567890", None,
                                               "-0.000000000000000000000000000001"]
    assert changes.column("v").to_pylist() == ["x"] * 3


def test_values_the_schema_does_not_fit_are_inferred_and_cast_by_the_driver():
    """Changes written before an ALTER the executor's schema already reflects: v was an INT then."""
    records = [_change(Operation.CREATE, 1, 100, v=None)]
    records[0].after["v"] = 12
    changes = change_columns(SCHEMA, records)
    assert changes.schema.field("v").type == pa.int64()  # not the schema's string: inferred

    older = TableSchema(T, (ID, Column("v", "int", "int(11)", True), BIG), ("id",))
    conformed, unknown = conform_changes(changes, data_schema(older))
    assert conformed.schema.field("v").type == pa.int32() and conformed.column("v").to_pylist() == [12]
    assert unknown == []


def test_only_the_columns_the_images_hold_are_built_and_the_writer_reports_the_ones_it_lacks():
    record = _change(Operation.CREATE, 1, 100)
    del record.after["big"]
    record.after["added"] = dt.date(2024, 1, 2)
    changes = change_columns(SCHEMA, [_change(Operation.CREATE, 2, 90), record])

    assert "big" in changes.column_names and changes.column("big").to_pylist()[1] is None
    assert changes.schema.field("added").type == pa.date32()
    conformed, unknown = conform_changes(changes.slice(1), data_schema(SCHEMA))
    assert unknown == ["added"] and conformed.column("big").to_pylist() == [None]
    assert change_columns(SCHEMA, [_change(Operation.CREATE, 2, 90)]).column_names[:3] == ["id", "v", "big"]


def test_changes_after_a_position_compare_offset_then_row_then_part():
    records = [_change(Operation.CREATE, k, pos, row, part) for k, (pos, row, part) in
               enumerate([(100, 0, 0), (200, 0, 0), (200, 1, 0), (200, 1, 1), (200, 2, 0), (300, 0, 0)])]
    changes = change_columns(SCHEMA, records)

    assert changes_after(changes, None).num_rows == 6
    after = changes_after(changes, records[3].order_key)
    assert after.column("id").to_pylist() == [4, 5]
    assert changes_after(changes, records[0].order_key).column("id").to_pylist() == [1, 2, 3, 4, 5]
    assert changes_after(changes, records[5].order_key).num_rows == 0
    assert [position_at(changes, i) for i in range(6)] == [r.order_key for r in records]


def test_positions_and_offsets_keep_the_server_epoch():
    records = [_change(Operation.CREATE, 1, 100, file="b.000007", epoch=2)]
    changes = change_columns(SCHEMA, records)
    piece = TableChanges(T, changes)

    assert position_at(changes, 0) == records[0].order_key
    assert piece.last_offset == records[0].offset and piece.last_offset.epoch == 2
    assert changes_before(changes, BinlogOffset("b.000099", 4, epoch=1)).num_rows == 0


def test_changes_before_an_offset_leave_out_the_event_ending_there():
    records = [_change(Operation.CREATE, 1, 100), _change(Operation.CREATE, 2, 110), _change(Operation.CREATE, 3, 110, row=1),
               _change(Operation.CREATE, 4, 120)]
    changes = change_columns(SCHEMA, records)

    assert changes_before(changes, records[1].offset).column("id").to_pylist() == [1]
    assert changes_before(changes, records[3].offset).column("id").to_pylist() == [1, 2, 3]


def test_the_last_change_of_each_key_is_kept_in_binlog_order():
    records = [_change(Operation.CREATE, 1, 100, v="a"), _change(Operation.CREATE, 2, 110),
               _change(Operation.UPDATE, 1, 120, v="b"), _change(Operation.DELETE, 2, 130),
               _change(Operation.CREATE, 3, 140), _change(Operation.UPDATE, 1, 150, v="c")]
    latest = last_change_per_key(change_columns(SCHEMA, records), ["id"])

    assert latest.column("id").to_pylist() == [2, 3, 1]
    assert latest.column("_cdc_op").to_pylist() == ["d", "c", "u"]
    assert latest.column("v").to_pylist() == ["x", "x", "c"]


def test_a_composite_key_groups_by_every_key_column():
    schema = TableSchema(T, (ID, Column("v", "varchar", "varchar(10)", False), BIG), ("id", "v"))
    records = [_change(Operation.CREATE, 1, 100, v="a"), _change(Operation.CREATE, 1, 110, v="b"),
               _change(Operation.UPDATE, 1, 120, v="a")]
    latest = last_change_per_key(change_columns(schema, records), schema.key_columns)
    assert latest.column("_cdc_binlog_pos").to_pylist() == [110, 120]


def test_table_changes_cross_as_arrow_ipc_with_their_table():
    odd = TableId("we.ird`db", "t.1")
    changes = change_columns(SCHEMA, [_change(Operation.CREATE, 1, 100)], changelog=True)
    back = TableChanges.from_ipc(TableChanges(odd, changes).to_ipc())

    assert back.table_id == odd
    assert back.data.equals(changes) and back.data.schema.metadata is None


def test_changelog_rows_carry_both_images_as_json():
    record = _change(Operation.UPDATE, 1, 100)
    record.before = {"id": 1, "v": "old", "big": 1}
    rows = changelog_rows(change_columns(SCHEMA, [record], changelog=True)).to_pylist()

    assert rows[0]["op"] == "u" and json.loads(rows[0]["before"]) == {"id": 1, "v": "old", "big": 1}
    assert json.loads(rows[0]["after"])["big"] == 2 ** 64 - 1
    assert rows[0]["event_ts"] == dt.datetime.fromtimestamp(0.1, dt.timezone.utc)
    assert (rows[0]["binlog_file"], rows[0]["binlog_pos"], rows[0]["version"]) == ("b.000001", 100,
                                                                                   record.offset.version)


def test_every_column_the_sink_adds_has_the_prefix_source_columns_may_not_have():
    names = {f.name for f in CHANGE_FIELDS + LOG_FIELDS} | set(METADATA_COLUMNS)
    assert all(n.startswith(RESERVED_COLUMN_PREFIX) for n in names), sorted(names)


def test_a_source_column_with_the_prefix_in_any_case_is_a_problem_that_names_it():
    clash = TableSchema(T, (ID, Column("_CDC_Row", "int", "int(11)", True)), ("id",))
    problem = clash.reserved_name_problem()
    assert problem and "column(s) _CDC_Row" in problem and "RENAME COLUMN `_CDC_Row`" in problem
    assert SCHEMA.reserved_name_problem() is None
