"""Activating a newer registry generation (stream/activation.py), apart from Spark and the server:
which tables are announced and whole, which splits are staged or behind the batch's start, what a
purge of the re-read costs, and where each re-read change and DDL goes. Integer chunk keys order
without a database."""

from __future__ import annotations

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import (
    BinlogPurged,
    ChangeRecord,
    Operation,
    SchemaChangeEvent,
    TableChange,
    TableEventKind,
    TableTruncated,
)
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, Generation
from airflow_provider_mysqlcdc.sinks.arrow_rows import merge_changes_into_table, rows_to_data_table
from airflow_provider_mysqlcdc.stream.activation import Replay, plan_activation
from airflow_provider_mysqlcdc.stream.positions import watermarks_to_translate

OLD, NEW, STAGED = TableId("db", "old"), TableId("db", "new"), TableId("db", "staged")
ID = Column(name="id", data_type="int", column_type="int", nullable=False)
START = BinlogOffset("binlog.000002", 1000)


def at(pos: int, file_no: int = 2, epoch: int = 0) -> BinlogOffset:
    return BinlogOffset(f"binlog.{file_no:06}", pos, epoch=epoch)


def split(table: TableId, index: int, start, end, hw: BinlogOffset, staged: str | None = None) -> FinishedSplit:
    return FinishedSplit(SnapshotSplit(table, index, "id", start, end), hw, staged=staged)


def generation(number: int, *splits: FinishedSplit) -> Generation:
    tables: dict[TableId, CapturedTable] = {}
    for f in splits:
        tables.setdefault(f.split.table_id, CapturedTable("id", [])).splits.append(f)
    return Generation(number, tables)


def change(table: TableId, key: int, offset: BinlogOffset) -> ChangeRecord:
    return ChangeRecord(Operation.UPDATE, table, {"id": key}, {"id": key}, offset)


#: OLD was streamed before and one of its splits is re-snapshotted (staged) behind START; NEW is a
#: new table read in two splits, one behind START and one after it
OLD_0, OLD_1 = split(OLD, 0, None, 100, at(100)), split(OLD, 1, 100, None, at(100))
OLD_1_AGAIN = split(OLD, 1, 100, None, at(500), staged="file:///staged/old-1.parquet")
NEW_0, NEW_1 = split(NEW, 0, None, 50, at(300)), split(NEW, 1, 50, None, at(1200))
BEFORE = generation(1, OLD_0, OLD_1)
AFTER = generation(2, OLD_0, OLD_1_AGAIN, NEW_0, NEW_1)


def test_the_tables_of_added_splits_are_announced_and_whole_only_where_every_split_is_new():
    plan = plan_activation(AFTER, BEFORE, START, {})
    assert plan.activated.chunk_keys == {NEW: "id", OLD: "id"}
    assert plan.activated.whole == (NEW,)
    assert sorted(f.split.split_id for f in plan.added) == sorted(f.split.split_id for f in (OLD_1_AGAIN, NEW_0, NEW_1))


def test_only_added_splits_read_before_the_start_are_read_again_from_the_earliest_of_them():
    plan = plan_activation(AFTER, BEFORE, START, {})
    assert sorted(f.split.split_id for f in plan.behind) == sorted([OLD_1_AGAIN.split.split_id, NEW_0.split.split_id])
    assert plan.replay_from == at(300)
    assert list(plan.staged) == [OLD_1_AGAIN.split.split_id]


def test_nothing_is_read_again_when_every_added_split_was_read_after_the_start():
    plan = plan_activation(generation(2, OLD_0, OLD_1, NEW_1), BEFORE, START, {})
    assert plan.behind == [] and plan.replay_from is None


def test_the_batchs_placed_watermarks_decide_what_is_behind():
    plan = plan_activation(AFTER, BEFORE, START, {NEW_1.split.split_id: at(900)})
    assert NEW_1.split.split_id in {f.split.split_id for f in plan.behind}


def test_a_purge_of_the_re_read_costs_exactly_the_tables_whose_splits_needed_it():
    plan = plan_activation(AFTER, BEFORE, START, {})
    lost = plan.lost_to(BinlogPurged(at(300), at(400)))  # NEW_0 (h=300) needed it, OLD's staged split (h=500) not
    assert lost == BinlogPurged(at(300), at(400), (NEW,))
    rest = plan.without(lost.tables)
    assert {f.split.table_id for f in rest.added} == {OLD} and rest.replay_from == at(500)
    assert rest.activated == plan.activated  # still announced: the next run re-snapshots it


def test_a_re_read_change_after_its_direct_splits_watermark_is_applied_and_one_before_is_not():
    replay = Replay(plan_activation(AFTER, BEFORE, START, {}), {NEW: KeyOrdering(ID), OLD: KeyOrdering(ID)})
    records = [change(NEW, 10, at(300)), change(NEW, 10, at(301)), change(NEW, 60, at(800))]
    # NEW_1 (keys >= 50) was read after START: the stream applies its changes after its watermark itself
    assert replay.changes(records) == [False, True, False]


def test_a_re_read_change_of_a_staged_split_travels_with_it_and_other_splits_count_as_finished_at_the_start():
    replay = Replay(plan_activation(AFTER, BEFORE, START, {}), {NEW: KeyOrdering(ID), OLD: KeyOrdering(ID)})
    staged_change, streamed = change(OLD, 150, at(600)), change(OLD, 5, at(700))
    assert replay.changes([change(OLD, 150, at(450)), staged_change, streamed]) == [False, False, False]
    [ready] = replay.staged_ready()
    assert (ready.split, ready.as_of, ready.changes) == (OLD_1_AGAIN, START, [staged_change])


def test_a_truncate_of_a_staged_splits_table_joins_its_changes_and_other_ddl_travels_with_the_batch():
    replay = Replay(plan_activation(AFTER, BEFORE, START, {}), {NEW: KeyOrdering(ID), OLD: KeyOrdering(ID)})
    both = SchemaChangeEvent("db", "TRUNCATE old; ...", at(600), (TableChange(TableEventKind.TRUNCATED, OLD),
                                                                   TableChange(TableEventKind.TRUNCATED, NEW)))
    assert replay.schema_change(both) == SchemaChangeEvent("db", both.statement, at(600),
                                                           (TableChange(TableEventKind.TRUNCATED, NEW),))
    only_staged = SchemaChangeEvent("db", "TRUNCATE old", at(650), (TableChange(TableEventKind.TRUNCATED, OLD),))
    assert replay.schema_change(only_staged) is None
    [ready] = replay.staged_ready()
    assert ready.changes == [TableTruncated(OLD, at(600)), TableTruncated(OLD, at(650))]


def test_after_a_failover_only_watermarks_read_on_an_earlier_server_that_the_batch_still_compares_are_translated():
    begin = at(100, epoch=1)
    older = generation(1, split(OLD, 0, None, None, at(50, epoch=0)))
    newer = generation(2, split(OLD, 0, None, None, at(50, epoch=0)),  # behind the batch: not compared
                       split(NEW, 0, None, None, at(70, epoch=0)),  # added by the batch: compared
                       split(STAGED, 0, None, None, at(120, epoch=1)))  # on this server already
    assert [f.split.table_id for f in watermarks_to_translate(newer, older, begin, 1)] == [NEW]
    assert watermarks_to_translate(older, older, begin, 0) == []


def test_an_at_least_once_staged_split_converges_when_the_re_read_replays_changes_its_rows_already_hold():
    """A split read at least once is positioned at its low watermark: the re-read gives it every change
    after that, some of which its SELECT saw; merged in binlog order they leave each key's last image."""
    schema = TableSchema(STAGED, (ID, Column(name="v", data_type="int", column_type="int", nullable=True)), ("id",))
    low = at(200)
    staged = FinishedSplit(SnapshotSplit(STAGED, 0, "id"), low, low, staged="file:///staged/staged-0.parquet")
    replay = Replay(plan_activation(generation(2, staged), Generation(1), START, {}),
                    {STAGED: KeyOrdering(ID)})

    def row_change(op: Operation, key: int, before: int | None, after: int | None, pos: int) -> ChangeRecord:
        return ChangeRecord(op, STAGED, None if before is None else {"id": key, "v": before},
                            None if after is None else {"id": key, "v": after}, at(pos))

    # the SELECT ran at 400: it saw the first three changes, not the last two
    changes = [row_change(Operation.CREATE, 1, None, 10, 250), row_change(Operation.UPDATE, 2, 20, 21, 300),
               row_change(Operation.DELETE, 3, 30, None, 350), row_change(Operation.UPDATE, 1, 10, 11, 450),
               row_change(Operation.CREATE, 3, None, 33, 500)]
    assert replay.changes(changes) == [False] * 5  # all kept for the staged split, none applied directly
    selected = rows_to_data_table(schema, [{"id": 1, "v": 10}, {"id": 2, "v": 21}])
    merged = merge_changes_into_table(schema, selected, replay.staged_ready()[0].changes)
    assert sorted(merged.select(["id", "v"]).to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": 11}, {"id": 2, "v": 21}, {"id": 3, "v": 33}]
