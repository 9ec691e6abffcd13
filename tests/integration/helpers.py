"""Assertions shared by the integration tests."""

from __future__ import annotations

from airflow_provider_mysqlcdc.cdc.source.schema import TableId
from airflow_provider_mysqlcdc.devtools.verify import Rows, differences


def assert_same_rows(table_id: TableId, expected: Rows, actual: Rows) -> None:
    problem = differences(expected, actual)
    assert problem is None, f"{table_id}: {problem}"
