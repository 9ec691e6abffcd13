"""The merges of one unit of a batch, table by table at once where the sink allows it
(sinks/writer.py ``merge_outcomes``): Delta's tables merge in threads of their own, the shards of a
routed table one after another, and an error of one table's merge leaves the others' merges in place
for the replay to skip."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from .harness import Pipeline, T, U, changes, insert, schema
from .test_routes import SINK, A, B, routed


def _watch_merges(p: Pipeline, before_merge=None) -> list[dict[str, Any]]:
    """Record each ``merge_changes`` of the pipeline's sink (its table, thread, and how many merges
    were running when it started), calling ``before_merge(table_id)`` first."""
    seen: list[dict[str, Any]] = []
    running = [0]
    lock = threading.Lock()
    merge_changes = p.sink.merge_changes

    def watched(table_schema, data, **kwargs):
        with lock:
            running[0] += 1
            seen.append({"table": table_schema.table_id, "thread": threading.current_thread(), "running": running[0]})
        try:
            if before_merge is not None:
                before_merge(table_schema.table_id)
            return merge_changes(table_schema, data, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    p.sink.merge_changes = watched
    return seen


def test_merges_into_two_tables_run_at_once_where_the_sink_allows_it(tmp_path):
    p = Pipeline(tmp_path, schema(T), schema(U))
    both_merging = threading.Barrier(2)
    concurrent = p.sink.concurrent_tables
    # each merge waits until the other one is under way too: merges one after another would break the
    # barrier (its timeout only bounds a failing test) and so the batch
    seen = _watch_merges(p, lambda table_id: both_merging.wait(timeout=120) if concurrent else None)
    p.batch(changes(schema(T), insert(T, 1, id=1, v="t")), changes(schema(U), insert(U, 2, id=1, v="u")))
    assert p.rows(T) == {1: {"id": 1, "v": "t"}} and p.rows(U) == {1: {"id": 1, "v": "u"}}
    assert max(s["running"] for s in seen) == (2 if concurrent else 1)


def test_the_shards_of_one_routed_table_are_merged_one_after_another(tmp_path):
    p = routed(tmp_path)
    seen = _watch_merges(p)
    p.batch(changes(p.tables.server[A], insert(A, 1, id=3, v="a")),
            changes(p.tables.server[B], insert(B, 2, id=3, v="b")))
    assert [s["table"] for s in seen] == [A, B]
    assert all(s["thread"] is threading.main_thread() and s["running"] == 1 for s in seen)


def test_an_error_of_one_tables_merge_fails_the_batch_and_its_replay_merges_only_that_table(tmp_path):
    p = Pipeline(tmp_path, schema(T), schema(U))

    def fail_u(table_id):
        if table_id == U:
            raise RuntimeError("the object store is unreachable")

    _watch_merges(p, fail_u)
    batch = (changes(schema(T), insert(T, 1, id=1, v="t")), changes(schema(U), insert(U, 2, id=1, v="u")))
    with pytest.raises(RuntimeError, match="unreachable"):
        p.batch(*batch)
    assert p.rows(T) == {1: {"id": 1, "v": "t"}} and p.rows(U) == {}
    del p.sink.merge_changes  # the store is back
    p.applier = p.new_applier()  # the stream restarted
    p.batch(*batch, batch_id=0)
    assert p.rows(T) == {1: {"id": 1, "v": "t"}} and p.rows(U) == {1: {"id": 1, "v": "u"}}
    assert p.merges(T) == 1 and p.merges(U) == 1


def test_an_error_that_is_not_the_tables_stops_the_merges_not_begun_yet(tmp_path):
    """The shards of a routed table merge one after another: the first one's error leaves the second
    unmerged (no merge, no commit), and the replay merges both, each once."""
    p = routed(tmp_path)

    def fail_a(table_id):
        if table_id == A:
            raise RuntimeError("the object store is unreachable")

    seen = _watch_merges(p, fail_a)
    batch = (changes(p.tables.server[A], insert(A, 1, id=3, v="a")), changes(p.tables.server[B], insert(B, 2, id=3, v="b")))
    with pytest.raises(RuntimeError, match="unreachable"):
        p.batch(*batch)
    assert [s["table"] for s in seen] == [A]
    del p.sink.merge_changes
    p.applier = p.new_applier()
    p.batch(*batch, batch_id=0)
    assert {(r["_cdc_source_database"], r["id"]) for r in p.sink.read(SINK).to_pylist()} >= {("shop_1", 3), ("shop_2", 3)}
