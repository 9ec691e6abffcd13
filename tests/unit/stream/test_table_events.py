"""The event table's rows that are not DDL, through the stream's rules (stream/applier.py): a table
that fails, binlog lost to a purge, tables activated and staged splits applied while streaming, and
tables removed from the pipeline."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.model.records import BinlogPurged, TableFailed
from airflow_provider_mysqlcdc.cdc.model.records import TableEventKind as Kind
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.state.registry import captured_tables
from airflow_provider_mysqlcdc.state.staged import write_staged
from airflow_provider_mysqlcdc.stream.events import StagedSplitReady, TablesActivated

from .harness import (
    Pipeline,
    T,
    U,
    changes,
    column,
    ddl,
    delete,
    insert,
    off,
    schema,
    staged_rows,
    table_change,
    update,
)


def test_a_table_that_failed_on_the_executors_keeps_its_changes_before_and_the_others_go_on(tmp_path):
    p = Pipeline(tmp_path, schema(T), schema(U))
    p.batch(changes(schema(T), insert(T, 1, id=1, v="kept")),
            TableFailed(T, off(2), "ValueError: a value that cannot be typed"),
            changes(schema(U), insert(U, 3, id=1, v="u")))
    p.batch(changes(schema(T), insert(T, 4, id=2, v="after")), changes(schema(U), insert(U, 5, id=2, v="u2")))
    assert p.rows(T) == {1: {"id": 1, "v": "kept"}}
    assert sorted(p.rows(U)) == [1, 2]
    assert p.drift(T) == [(Kind.FAILED, off(2))] and p.drift(U) == []


def test_a_change_the_sink_refuses_freezes_its_table_at_that_change_after_the_ones_before(tmp_path, sink_format):
    """A CHECK constraint of the sink table refuses one change of a unit: the unit's changes before it
    are merged (by halving), the table stops there, and the other table's changes land."""
    if not sink_format.startswith("delta"):
        pytest.skip("CHECK constraints are Delta's: an Iceberg table has none to refuse a row by")
    p = Pipeline(tmp_path, schema(T), schema(U))
    p.snapshot(T, {"id": 1, "v": "a"})
    DeltaTable(p.sink.table_uri(T)).alter.add_constraint({"small_ids": "id < 100"})
    p.batch(changes(schema(T), insert(T, 1, id=2, v="b"), insert(T, 2, id=3, v="c"), insert(T, 3, id=500, v="no"),
                    insert(T, 4, id=4, v="after")),
            changes(schema(U), insert(U, 5, id=1, v="u")))
    assert p.rows(T) == {1: {"id": 1, "v": "a"}, 2: {"id": 2, "v": "b"}, 3: {"id": 3, "v": "c"}}
    assert p.drift(T) == [(Kind.FAILED, off(3))] and "failed validation" in _reason(p, T)
    assert p.rows(U) == {1: {"id": 1, "v": "u"}}


def test_binlog_lost_to_a_purge_freezes_exactly_the_tables_that_needed_it(tmp_path):
    p = Pipeline(tmp_path, schema(T), schema(U))
    p.batch(BinlogPurged(off(1), off(5), (T,)), changes(schema(T), insert(T, 6, id=1, v="t")),
            changes(schema(U), insert(U, 7, id=1, v="u")))
    assert p.drift(T) == [(Kind.BINLOG_PURGED, off(5))] and p.drift(U) == []
    assert p.rows(U) == {1: {"id": 1, "v": "u"}}
    assert p.sink.column_names(T) == []  # nothing of T was written


def test_a_purge_gap_without_named_tables_freezes_those_whose_splits_were_read_before_it(tmp_path):
    p = Pipeline(tmp_path, schema(T), schema(U))
    later = FinishedSplit(SnapshotSplit(U, 0, "id"), off(9))  # U was read again after the gap
    p.generation = p.state.commit(captured_tables([p.splits[0], later])).number
    p.batch(BinlogPurged(off(1), off(5)))
    assert p.drift(T) == [(Kind.BINLOG_PURGED, off(5))] and p.drift(U) == []


def test_a_staged_split_replaces_its_range_with_its_rows_and_the_changes_after_it(tmp_path):
    """A re-snapshot of a table the stream writes: its rows as of the split's high watermark, brought
    forward by its range's changes up to the batch start, in one commit."""
    p = Pipeline(tmp_path, schema(T))
    p.snapshot(T, {"id": 1, "v": "old"}, {"id": 2, "v": "old"}, {"id": 3, "v": "gone from the source"})
    url = str(tmp_path / "staged" / "t-0.parquet")
    write_staged(url, staged_rows(schema(T), {"id": 1, "v": "read"}, {"id": 2, "v": "read"}))
    split = FinishedSplit(SnapshotSplit(T, 0, "id"), off(3), staged=url)
    p.batch(StagedSplitReady(split, off(5), [update(T, 4, {"id": 2, "v": "read"}, {"id": 2, "v": "later"})]),
            changes(schema(T), insert(T, 6, id=7, v="new"), delete(T, 7, id=1, v="read")))
    assert p.rows(T) == {2: {"id": 2, "v": "later"}, 7: {"id": 7, "v": "new"}}


def test_a_staged_split_of_a_frozen_table_is_not_applied(tmp_path):
    p = Pipeline(tmp_path, schema(T))
    p.snapshot(T, {"id": 1, "v": "old"})
    url = str(tmp_path / "staged" / "t-0.parquet")
    write_staged(url, staged_rows(schema(T), {"id": 1, "v": "read"}))
    p.batch(TableFailed(T, off(1), "ValueError: bad"),
            StagedSplitReady(FinishedSplit(SnapshotSplit(T, 0, "id"), off(3), staged=url), off(5), []))
    assert p.rows(T) == {1: {"id": 1, "v": "old"}}


def test_the_re_snapshot_of_a_table_frozen_by_a_type_change_lands_in_the_new_type(tmp_path):
    """The remembered schema bridged the change for the changes before it (the plan keeps it); the
    whole re-snapshot's activation takes the server's schema and replaces the sink table."""
    p = Pipeline(tmp_path, schema(T, column("w")))
    p.snapshot(T, {"id": 1, "v": "a", "w": 1})
    p.alter(T, schema(T, column("w", "varchar")))
    p.batch(changes(schema(T, column("w")), insert(T, 1, id=2, v="b", w=2)),
            ddl(2, "ALTER TABLE t MODIFY w VARCHAR(20)", table_change(Kind.ALTERED, T)))
    assert p.drift(T) == [(Kind.TYPE_CHANGED, off(2))]
    url = str(tmp_path / "staged" / "t-0.parquet")  # the next run's re-snapshot, read after the statement
    write_staged(url, staged_rows(p.tables.server[T], {"id": 1, "v": "a", "w": "one"}, {"id": 2, "v": "b", "w": "2"}))
    resnapshot = FinishedSplit(SnapshotSplit(T, 0, "id"), off(3), staged=url)
    p.generation = p.state.commit(captured_tables([resnapshot])).number
    p.batch(TablesActivated({T: "id"}, whole=(T,)), StagedSplitReady(resnapshot, off(5), []),
            changes(p.tables.server[T], insert(T, 6, id=3, v="c", w="three")))
    assert p.rows(T) == {1: {"id": 1, "v": "a", "w": "one"}, 2: {"id": 2, "v": "b", "w": "2"},
                         3: {"id": 3, "v": "c", "w": "three"}}
    assert p.known.remembered(T) == p.tables.server[T]


def test_the_first_activation_keeps_the_remembered_schema_for_changes_before_a_later_ddl(tmp_path):
    """The first snapshot is activated whole too: its changes before a DDL the server already shows
    are written under the schema they were made with, and the DDL freezes the table when reached."""
    p = Pipeline(tmp_path, schema(T, column("w")))
    p.alter(T, schema(T, column("w", "varchar")))
    p.batch(TablesActivated({T: "id"}, whole=(T,)), changes(schema(T, column("w")), insert(T, 1, id=1, v="a", w=1)),
            ddl(2, "ALTER TABLE t MODIFY w VARCHAR(20)", table_change(Kind.ALTERED, T)))
    assert p.rows(T) == {1: {"id": 1, "v": "a", "w": 1}}
    assert p.drift(T) == [(Kind.TYPE_CHANGED, off(2))]


def test_a_table_removed_by_a_newer_generation_is_left_out_even_of_a_replayed_batch(tmp_path):
    p = Pipeline(tmp_path, schema(T), schema(U))
    replayed_generation = p.generation
    p.state.commit(captured_tables([p.splits[1]]))  # the user removed T
    done = p.applier.apply_batch(replayed_generation, [changes(schema(T), insert(T, 1, id=1, v="t")),
                                                       changes(schema(U), insert(U, 2, id=1, v="u"))], 0)
    assert done.skipped == 1 and done.merged_tables == {U}
    assert p.sink.column_names(T) == [] and p.drift(T) == []


def _reason(p: Pipeline, table) -> str:
    from airflow_provider_mysqlcdc.state.drift import read_drift

    return read_drift(p.state)[table][-1].reason
