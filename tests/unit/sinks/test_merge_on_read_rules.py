"""What merge-on-read decides the same way in every format (sinks/merge_on_read.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_mysqlcdc.sinks.merge_on_read import Decision, Matches, carried_columns, decide, rewrites


def changes(*rows: tuple[int, str, int]) -> pa.Table:
    """Change rows of (key, op, version)."""
    return pa.table({"id": [r[0] for r in rows], "_cdc_op": [r[1] for r in rows],
                     "_cdc_version": pa.array([r[2] for r in rows], pa.int64())})


def held(*rows: tuple[int, str, int, int]) -> Matches:
    """Table rows holding a changed key: (change row, file, position, version)."""
    return Matches.joined([(path, np.array([r[0]]), np.array([r[2]]), np.array([r[3]])) for r in rows
                           for path in [r[1]]])


def test_a_newer_change_replaces_its_row_an_older_one_is_dropped_and_a_new_key_is_inserted():
    batch = changes((1, "u", 10), (2, "u", 10), (3, "c", 10), (4, "d", 10), (5, "d", 10))
    decision = decide(batch, held((0, "a", 7, 5), (1, "a", 8, 20), (3, "b", 0, 5)))
    assert decision == Decision({"a": [7], "b": [0]}, {0: ("a", 7), 3: ("b", 0)}, [0, 2])


def test_a_change_as_old_as_one_of_its_rows_is_dropped_whole():
    decision = decide(changes((1, "u", 10)), held((0, "a", 1, 5), (0, "b", 2, 10)))
    assert decision == Decision({}, {}, [])


@pytest.mark.parametrize("physical, before, now, rewritten", [
    (100, 0, 49, False), (100, 0, 50, True), (100, 60, 79, False), (100, 60, 80, True), (10, 9, 10, True),
])
def test_a_file_is_rewritten_once_a_batch_deletes_half_its_live_rows_or_all_of_them(physical, before, now, rewritten):
    assert rewrites(physical, before, now) is rewritten


def test_an_update_carries_the_columns_the_changes_lack_from_its_row_and_an_insert_leaves_them_null():
    batch = changes((1, "u", 10), (2, "c", 10))
    decision = decide(batch, held((0, "a", 3, 5)))
    old = pa.table({"gone": ["x0", "x1", "x2", "x3"]})
    carried = carried_columns(batch, decision, [pa.field("gone", pa.string())],
                              lambda path, positions: old.take(pa.array(positions)))
    assert carried["gone"].to_pylist() == ["x3", None]


def test_a_column_the_old_rows_file_lacks_is_carried_as_null():
    batch = changes((1, "u", 10))
    decision = decide(batch, held((0, "a", 0, 5)))
    carried = carried_columns(batch, decision, [pa.field("added_later", pa.int64())],
                              lambda path, positions: pa.table({"other": [1]}))
    assert carried["added_later"].to_pylist() == [None]
