"""Rows read under an older shape of a table, brought to the current one (sinks/arrow_rows.py)."""

from __future__ import annotations

import pyarrow as pa

from airflow_provider_mysqlcdc.sinks.arrow_rows import conform_to


def test_columns_are_matched_by_name_missing_ones_are_null_and_vanished_ones_reported():
    staged = pa.table({"id": pa.array([1, 2], pa.int32()), "label": ["a", "b"], "qty": pa.array([3, 4], pa.int32())})
    target = pa.schema([pa.field("id", pa.int64()), pa.field("qty", pa.int64()), pa.field("tag", pa.string())])
    data, vanished = conform_to(staged, target)
    assert data.schema == target and vanished == ["label"]
    assert data.to_pylist() == [{"id": 1, "qty": 3, "tag": None}, {"id": 2, "qty": 4, "tag": None}]
