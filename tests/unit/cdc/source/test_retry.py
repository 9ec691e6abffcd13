"""Which source errors are transient, and the retry policy's budget (the real faults: integration/test_transient_faults.py)."""

from __future__ import annotations

import pymysql
import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError, SourceUnavailableError
from airflow_provider_mysqlcdc.cdc.source.retry import RetryPolicy, is_transient


@pytest.mark.parametrize("error", [
    pymysql.err.OperationalError(2003, "Can't connect to MySQL server"),
    pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"),
    pymysql.err.OperationalError(2006, "MySQL server has gone away"),
    pymysql.err.OperationalError(1053, "Server shutdown in progress"),
    ConnectionResetError(104, "Connection reset by peer"),
    BrokenPipeError(32, "Broken pipe"),
])
def test_unreachable_or_lost_connections_are_transient(error):
    assert is_transient(error)


def test_a_transient_cause_makes_the_wrapping_error_transient():
    try:
        try:
            raise pymysql.err.OperationalError(2003, "Can't connect")
        except pymysql.err.OperationalError as exc:
            raise ConfigurationError("Cannot reach the source server") from exc
    except ConfigurationError as wrapped:
        assert is_transient(wrapped)


@pytest.mark.parametrize("error", [
    pymysql.err.OperationalError(1045, "Access denied"),
    pymysql.err.ProgrammingError(1146, "Table doesn't exist"),
    ValueError("a bug"),
])
def test_other_errors_are_not_transient(error):
    assert not is_transient(error)


def test_a_transient_fault_is_retried_until_the_operation_succeeds():
    attempts = []

    def operation() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise pymysql.err.OperationalError(2013, "Lost connection")
        return "done"

    assert RetryPolicy(budget_s=30, first_delay_s=0.01).run(operation, "reading") == "done"
    assert len(attempts) == 3


def test_an_error_that_is_not_transient_fails_at_once():
    attempts = []

    def operation() -> None:
        attempts.append(1)
        raise pymysql.err.OperationalError(1045, "Access denied")

    with pytest.raises(pymysql.err.OperationalError, match="Access denied"):
        RetryPolicy(budget_s=30, first_delay_s=0.01).run(operation, "reading")
    assert len(attempts) == 1


def test_a_fault_outlasting_the_budget_says_so():
    def operation() -> None:
        raise pymysql.err.OperationalError(2003, "Can't connect")

    with pytest.raises(SourceUnavailableError, match=r"connecting: .*longer than the retry budget of 0s.*retry_budget_s"):
        RetryPolicy(budget_s=0.05, first_delay_s=0.01).run(operation, "connecting")
