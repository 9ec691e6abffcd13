"""Stopping the driver loop (spark/stream_job.py ``stop_loop``): its deadline is armed once, and a
loop that returned in time is never ended by it."""

from __future__ import annotations

import threading

from airflow_provider_mysqlcdc.spark import stream_job
from airflow_provider_mysqlcdc.spark.stream_job import LoopStop, stop_loop


def _deadlines() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "mysqlcdc-stop-deadline"]


def test_a_loop_that_returns_in_time_is_not_ended_and_a_repeated_request_arms_no_second_deadline(monkeypatch):
    exits: list[int] = []
    monkeypatch.setattr(stream_job.os, "_exit", exits.append)
    stopping = LoopStop()

    stop_loop(stopping, grace_s=5.0)
    stop_loop(stopping, grace_s=5.0)  # the lease keeper asks again at every look
    [deadline] = _deadlines()
    stopping.finished.set()  # the loop returned
    deadline.join(10)

    assert stopping.is_set() and not deadline.is_alive() and exits == []


def test_a_loop_that_does_not_return_in_time_ends_the_process(monkeypatch):
    ended = threading.Event()
    monkeypatch.setattr(stream_job.os, "_exit", lambda code: ended.set())
    monkeypatch.setattr(stream_job.logging, "shutdown", lambda: None)

    stop_loop(LoopStop(), grace_s=0.05)

    assert ended.wait(10)
