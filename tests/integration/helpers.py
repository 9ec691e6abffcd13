"""Assertions shared by the integration tests."""

from __future__ import annotations

from collections.abc import Callable

from airflow_provider_mysqlcdc.cdc.source.schema import TableId
from airflow_provider_mysqlcdc.devtools.verify import Rows, differences


def assert_same_rows(table_id: TableId, expected: Rows, actual: Rows,
                     evidence: Callable[[], str] | None = None) -> None:
    problem = differences(expected, actual)
    if problem is not None:
        raise AssertionError(f"{table_id}: {problem}" + ("\n" + evidence() if evidence else ""))
