"""A Spark program whose Python workers fail to start is started again (launch/submit.py
``started_again``); any other failure ends the task at once."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_mysqlcdc.cdc.errors import SparkJobFailed
from airflow_provider_mysqlcdc.launch.submit import START_ATTEMPTS, started_again

log = logging.getLogger(__name__)
WORKERS_LATE = ("Spark program binlog_stream.py failed: StreamingQueryException: ... org.apache.spark.SparkException: "
                "Python worker failed to connect back.")


class Program:
    """A program that fails with ``errors`` in turn, then returns its result."""

    def __init__(self, *errors: Exception):
        self.errors, self.runs = list(errors), 0

    def __call__(self) -> dict:
        self.runs += 1
        if self.errors:
            raise self.errors.pop(0)
        return {"ok": True}


def test_a_program_whose_python_workers_did_not_connect_back_is_started_again(caplog):
    program, pauses = Program(SparkJobFailed(WORKERS_LATE), RuntimeError("Timed out while waiting for the Python "
                                                                         "worker to connect back after 10000 ms")), []
    assert started_again(program, "Spark program binlog_stream.py", log=log, sleep=pauses.append) == {"ok": True}
    assert program.runs == 3 and len(pauses) == 2
    assert "binlog_stream.py: Spark's Python workers did not start (Python worker failed to connect back); " \
           "starting it again in 5s (try 2 of 3)" in caplog.text


def test_any_other_failure_is_raised_at_once():
    program = Program(SparkJobFailed("Spark program snapshot_chunk.py failed: PreflightError: no such table"))
    with pytest.raises(SparkJobFailed, match="no such table"):
        started_again(program, "Spark program snapshot_chunk.py", log=log, sleep=lambda _: None)
    assert program.runs == 1


def test_workers_that_never_start_fail_the_task_after_the_last_try():
    program = Program(*[SparkJobFailed(WORKERS_LATE)] * START_ATTEMPTS)
    with pytest.raises(SparkJobFailed, match="connect back"):
        started_again(program, "Spark program binlog_stream.py", log=log, sleep=lambda _: None)
    assert program.runs == START_ATTEMPTS
