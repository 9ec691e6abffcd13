"""A micro-batch's rows: inline up to a budget, then through spill files, read back in binlog order."""

from __future__ import annotations

import dataclasses
from collections import namedtuple

import pytest

from airflow_provider_mysqlcdc.cdc.errors import InternalError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, Operation
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.spark.batch_rows import (
    SPILLED,
    RowEmitter,
    batch_items,
    piece_rows,
    row_key,
    spill_urls,
)
from airflow_provider_mysqlcdc.stream.events import PieceRead, reading_summary
from airflow_provider_mysqlcdc.stream.reading import PIECE, ChangeTyping, ReadItem, marker

Row = namedtuple("Row", "version row part kind count ts_ms gen payload")
TABLE = TableId("db", "t")


def _records(first_position: int, count: int) -> list[ChangeRecord]:
    return [ChangeRecord(Operation.CREATE, TABLE, None, {"id": i, "pad": "x" * 200},
                         BinlogOffset("b.000001", first_position + i),
                         timestamp_ms=i) for i in range(count)]


def _items(runs: list[list[ChangeRecord]], typing: ChangeTyping | None = None) -> list[ReadItem]:
    typing = typing or ChangeTyping()
    items = [item for run in runs for item in typing.changes(run, [True] * len(run))]
    return items + [marker(runs[-1][-1].offset.version + 1, 0, "ddl", "a DDL marker")]


def _emit(emitter: RowEmitter, runs: list[list[ChangeRecord]]) -> list[Row]:
    return [Row(*r) for r in emitter.rows(_items(runs))]


def test_rows_beyond_the_inline_budget_travel_in_spill_files_and_come_back_in_order(tmp_path):
    runs = [_records(100 + 10 * n, 10) for n in range(20)]
    rows = _emit(RowEmitter(3, spill_folder=str(tmp_path / "spill"), inline_bytes=5000), runs)

    inline = [r for r in rows if r.kind != SPILLED]
    assert 0 < sum(len(r.payload) for r in inline if r.kind == "changes") < 5000 + 4000  # one run may cross it
    assert [r.kind for r in rows].count(SPILLED) == 1 and all(r.gen == 3 for r in rows)
    assert len(spill_urls(rows)) == 1 and list((tmp_path / "spill").iterdir())

    items = list(batch_items(sorted(rows, key=row_key)))
    positions = [p for i in items[:-1] for p in i.data.column("_cdc_binlog_pos").to_pylist()]
    assert positions == [r.offset.position for run in runs for r in run]
    assert items[-1] == "a DDL marker"


def test_without_a_spill_folder_every_row_is_inline(tmp_path):
    rows = _emit(RowEmitter(1), [_records(100, 5), _records(200, 5)])
    assert [r.kind for r in rows] == ["changes", "changes", "ddl"]
    items = list(batch_items(rows))
    assert [i.data.num_rows for i in items[:-1]] == [5, 5] and items[-1] == "a DDL marker"


def test_rows_out_of_binlog_order_are_refused_not_applied(tmp_path):
    rows = _emit(RowEmitter(1), [_records(100, 5), _records(200, 5)])
    with pytest.raises(InternalError, match="out of binlog order"):
        list(batch_items([rows[1], rows[0]]))


def test_a_run_of_several_tables_makes_one_row_per_table_in_the_order_of_their_first_change():
    other = TableId("db", "u")
    run = _records(100, 6)
    run[1] = dataclasses.replace(run[1], table_id=other)
    run[4] = dataclasses.replace(run[4], table_id=other)
    rows = [Row(*r) for r in RowEmitter(1).rows(ChangeTyping().changes(run, [True, True, True, True, False, True]))]

    assert [(r.version, r.count) for r in rows] == [(run[0].offset.version, 4), (run[1].offset.version, 1)]
    items = list(batch_items(rows))
    assert [i.table_id for i in items] == [TABLE, other]
    assert items[0].data.column("_cdc_binlog_pos").to_pylist() == [100, 102, 103, 105]
    assert items[0].data.column("id").to_pylist() == [0, 2, 3, 5]


def test_a_pieces_timings_travel_inline_past_the_budget_and_are_taken_out_before_the_items(tmp_path):
    typing = ChangeTyping()
    items = _items([_records(100 + 10 * n, 10) for n in range(20)], typing)
    timings = PieceRead("b.000001:100", "b.000001:400", 1000.0, 0.25, 1.5, typing.changes_sent)
    items.append(ReadItem((0, 0, 0), PIECE, timings, 0))
    rows = [Row(*r) for r in RowEmitter(3, spill_folder=str(tmp_path / "spill"), inline_bytes=5000).rows(items)]

    kept, pieces = piece_rows(sorted(rows, key=row_key))
    assert pieces == [timings] and timings.changes == 200
    assert SPILLED in [r.kind for r in kept] and "piece" not in [r.kind for r in kept]
    items = list(batch_items(kept))
    assert sum(i.data.num_rows for i in items[:-1]) == 200 and items[-1] == "a DDL marker"


def test_the_reading_summary_says_when_the_pieces_began_their_set_up_their_reading_and_their_changes():
    pieces = [PieceRead("b.1:4", "b.1:900", 101.10, 0.05, 1.20, 27_000),
              PieceRead("b.1:900", "b.1:2000", 101.15, 0.31, 1.41, 28_437)]
    assert reading_summary(pieces, 100.0) == ("2 piece(s) began 1.10-1.15s into the batch, set up in 0.05-0.31s, "
                                              "read in 1.20-1.41s, ended 2.35-2.87s into it (55437 changes)")
    assert reading_summary(pieces[:1], 100.0).startswith("1 piece(s) began 1.10s into the batch, set up in 0.05s")
    assert reading_summary([], 100.0) == ""


def test_a_tables_changes_under_two_table_maps_in_one_run_travel_as_runs_of_their_own_each_with_its_schema():
    """Changes written before and after a DDL the reader did not see between them: each run of them
    is typed by, and carries, the schema as of it; the table's runs stay in binlog order."""
    from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableSchema

    known = TableSchema(TABLE, (Column("id", "int", "int(11)", False), Column("n", "bigint", "bigint(20)", True)),
                        ("id",))
    before = TableSchema(TABLE, (Column("id", "int", "int", True), Column("pad", "varchar", "varchar", True,
                                                                          collation="utf8mb4_bin")), ("id",))
    after = TableSchema(TABLE, (Column("id", "int", "int", True), Column("n", "bigint", "bigint", True)), ("id",))
    run = _records(100, 5)
    for i, record in enumerate(run):
        record.schema = before if i in (0, 1, 4) else after
        if record.schema is after:
            record.after = {"id": i, "n": 2**40}
    typed = ChangeTyping(schemas={TABLE: known}).changes(run, [True] * 5)
    items = list(batch_items([Row(*r) for r in RowEmitter(1).rows(typed)]))

    assert [(i.data.column("id").to_pylist(), i.schema.column_names) for i in items] == [
        ([0, 1], ("id", "pad")), ([2, 3], ("id", "n")), ([4], ("id", "pad"))]
    assert items[1].schema == known  # the server's columns and types: the captured schema itself
    assert items[1].data.schema.field("n").type == "int64" and items[0].data.schema.field("pad").type == "string"
