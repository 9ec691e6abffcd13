"""Row changes through the stream's rules (stream/applier.py): merged by key in binlog order, once."""

from __future__ import annotations

from .harness import Pipeline, T, U, changes, delete, insert, schema, update


def test_inserts_updates_and_deletes_are_merged_by_key_in_binlog_order(tmp_path):
    p = Pipeline(tmp_path, schema(T))
    p.snapshot(T, {"id": 1, "v": "a"}, {"id": 2, "v": "b"})
    p.batch(changes(schema(T), insert(T, 1, id=3, v="c"), update(T, 2, {"id": 1, "v": "a"}, {"id": 1, "v": "a2"}),
                    delete(T, 3, id=2, v="b"), update(T, 4, {"id": 3, "v": "c"}, {"id": 3, "v": "c2"})))
    assert p.rows(T) == {1: {"id": 1, "v": "a2"}, 3: {"id": 3, "v": "c2"}}


def test_an_update_that_changes_the_key_removes_the_old_row_and_adds_the_new(tmp_path):
    """The reader gives such an update as a delete and an insert of one row of one event (parts 0, 1)."""
    p = Pipeline(tmp_path, schema(T))
    p.snapshot(T, {"id": 1, "v": "a"}, {"id": 2, "v": "b"})
    p.batch(changes(schema(T), delete(T, 1, id=1, v="a"), insert(T, 1, part=1, id=7, v="a"),
                    delete(T, 2, id=7, v="a"), insert(T, 2, part=1, id=1, v="back")))
    assert p.rows(T) == {1: {"id": 1, "v": "back"}, 2: {"id": 2, "v": "b"}}


def test_a_replayed_batch_applies_nothing_twice_even_by_a_restarted_stream(tmp_path):
    p = Pipeline(tmp_path, schema(T))
    first = (changes(schema(T), insert(T, 1, id=1, v="a"), update(T, 2, {"id": 1, "v": "a"}, {"id": 1, "v": "b"})),)
    p.batch(*first)
    p.batch(changes(schema(T), update(T, 3, {"id": 1, "v": "b"}, {"id": 1, "v": "c"})))
    p.applier = p.new_applier()
    replayed = p.batch(*first, batch_id=0)
    assert p.rows(T) == {1: {"id": 1, "v": "c"}}
    assert replayed.changes == 2  # offered again, and refused by the sink's recorded position


def test_a_run_longer_than_max_apply_changes_commits_in_units(tmp_path):
    p = Pipeline(tmp_path, schema(T), schema(U), max_apply_changes=2)
    done = p.batch(changes(schema(T), *(insert(T, n, id=n, v=str(n)) for n in range(1, 6))),
                   changes(schema(U), insert(U, 6, id=1, v="u")))
    assert done.changes == 6 and done.merged_tables == {T, U}
    assert sorted(p.rows(T)) == [1, 2, 3, 4, 5] and p.rows(U) == {1: {"id": 1, "v": "u"}}
    assert p.merges(T) == 3 and p.merges(U) == 1  # 2 + 2 + 1 of T; U's one with T's last
