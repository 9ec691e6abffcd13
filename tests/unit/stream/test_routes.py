"""Shards routed into one sink table (sinks/routing.py) through the stream's rules: what the stream
does for one shard (a staged re-snapshot, a TRUNCATE, a DROP) touches its rows only, and each shard
applies what comes after its own position."""

from __future__ import annotations

import dataclasses

from airflow_provider_mysqlcdc.cdc.model.records import TableEventKind as Kind
from airflow_provider_mysqlcdc.cdc.model.rules import Route, TableRule
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.state.staged import write_staged
from airflow_provider_mysqlcdc.stream.events import StagedSplitReady

from .harness import Pipeline, changes, column, ddl, insert, off, schema, staged_rows, table_change, update

A, B = TableId("shop_1", "orders"), TableId("shop_2", "orders")
SINK = TableId("shop", "orders")


def shard(table_id: TableId) -> TableSchema:
    return dataclasses.replace(schema(table_id), table_rule=TableRule(route=Route("shop", "orders")))


def routed(tmp_path) -> Pipeline:
    """Shards A and B captured, each holding ids 1 and 2."""
    p = Pipeline(tmp_path, shard(A), shard(B))
    p.snapshot(A, {"id": 1, "v": "a"}, {"id": 2, "v": "a"})
    p.snapshot(B, {"id": 1, "v": "b"}, {"id": 2, "v": "b"})
    return p


def rows(p: Pipeline) -> dict[tuple[str, int], str]:
    data = p.sink.read(SINK).to_pylist()
    return {(r["_cdc_source_database"], r["id"]): r["v"] for r in data}


def test_a_staged_re_snapshot_of_one_shard_lands_after_another_shard_committed_later_positions(tmp_path):
    p = routed(tmp_path)
    p.batch(changes(shard(B), update(B, 8, {"id": 1, "v": "b"}, {"id": 1, "v": "b8"})))
    url = str(tmp_path / "staged" / "a-0.parquet")
    write_staged(url, staged_rows(shard(A), {"id": 1, "v": "read"}, {"id": 3, "v": "read"}))
    p.batch(StagedSplitReady(FinishedSplit(SnapshotSplit(A, 0, "id"), off(3), staged=url), off(5), []))
    assert rows(p) == {("shop_1", 1): "read", ("shop_1", 3): "read", ("shop_2", 1): "b8", ("shop_2", 2): "b"}


def test_a_truncate_of_one_shard_empties_only_its_rows(tmp_path):
    p = routed(tmp_path)
    p.batch(ddl(4, "TRUNCATE TABLE shop_1.orders", table_change(Kind.TRUNCATED, A)),
            changes(shard(A), insert(A, 5, id=7, v="a7")))
    assert rows(p) == {("shop_1", 7): "a7", ("shop_2", 1): "b", ("shop_2", 2): "b"}


def test_a_dropped_shard_keeps_its_rows_frozen_and_the_other_shard_goes_on(tmp_path):
    p = routed(tmp_path)
    p.batch(ddl(4, "DROP TABLE shop_1.orders", table_change(Kind.DROPPED, A)),
            changes(shard(B), insert(B, 5, id=9, v="b9")))
    assert [kind for kind, _ in p.drift(A)] == [Kind.DROPPED] and p.drift(B) == []
    assert rows(p) == {("shop_1", 1): "a", ("shop_1", 2): "a", ("shop_2", 1): "b", ("shop_2", 2): "b", ("shop_2", 9): "b9"}


def test_a_batch_replayed_after_a_crash_between_two_shards_commits_applies_the_second_shards_changes(tmp_path):
    """The first run of batch 0 committed shard B's unit and died before A's: the replay skips B's
    (its position holds them) and applies A's, whose position is behind."""
    p = routed(tmp_path)
    p.batch(changes(shard(B), update(B, 6, {"id": 2, "v": "b"}, {"id": 2, "v": "b6"})), batch_id=0)
    p.applier = p.new_applier()  # the restarted stream
    p.batch(changes(shard(A), update(A, 5, {"id": 2, "v": "a"}, {"id": 2, "v": "a5"})),
            changes(shard(B), update(B, 6, {"id": 2, "v": "b"}, {"id": 2, "v": "b6"})), batch_id=0)
    assert rows(p) == {("shop_1", 1): "a", ("shop_1", 2): "a5", ("shop_2", 1): "b", ("shop_2", 2): "b6"}
    assert p.merges(SINK) == 2


def test_a_column_a_shard_drops_is_drift_when_the_stream_first_meets_the_shard_at_the_drop(tmp_path):
    """The routed table has every shard's columns, so what the shard had before comes from the
    schema the pipeline remembers, not from the table."""
    with_c = dataclasses.replace(shard(A), columns=(*shard(A).columns, column("c")), _by_name={})
    p = Pipeline(tmp_path, with_c, shard(B))
    p.snapshot(A, {"id": 1, "v": "a", "c": 1})
    p.alter(A, shard(A))  # the server's schema after the drop
    p.batch(ddl(3, "ALTER TABLE shop_1.orders DROP COLUMN c", table_change(Kind.ALTERED, A)))
    assert p.drift(A) == [(Kind.ALTERED, off(3))] and p.drift(B) == []
