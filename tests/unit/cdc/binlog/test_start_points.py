"""Where a stream starts without a snapshot (cdc/binlog/start_points.py), the parts decided without
a server: start times and GTID positions as given, and the search over binlog files by the time of
their first transaction (against a real server: tests/integration/test_startup_modes.py)."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.binlog.start_points import (
    is_gtid_position,
    last_starting_at_or_before,
    parse_start_time,
)
from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError


@pytest.mark.parametrize("value, seconds", [
    ("2026-11-26T12:00:00+00:00", 1795694400.0),
    ("2026-11-26T12:00:00Z", 1795694400.0),
    ("2026-11-26T17:30:00+05:30", 1795694400.0),
    (1795694400, 1795694400.0),
    ("1795694400.5", 1795694400.5),
])
def test_a_start_time_is_an_instant(value, seconds):
    assert parse_start_time(value) == seconds


@pytest.mark.parametrize("value, message", [("2026-11-26T12:00:00", "has no time zone"), ("yesterday", "Malformed")])
def test_a_start_time_that_is_no_instant_is_refused(value, message):
    with pytest.raises(ConfigurationError, match=message):
        parse_start_time(value)


@pytest.mark.parametrize("value, gtid", [("0-1-100", True), ("0-1-100,1-2-7", True), (" 0-1-100 ", True),
                                         ("binlog.000042:1234", False), ("0-1", False), ("a-b-c", False)])
def test_a_gtid_position_is_told_from_a_file_position(value, gtid):
    assert is_gtid_position(value) is gtid


#: each file's first transaction time (None: a file without any)
FIRSTS = {"b.1": 100.0, "b.2": 200.0, "b.3": None, "b.4": None, "b.5": 500.0, "b.6": 600.0}


@pytest.mark.parametrize("at, index", [
    (50.0, None),  # before the oldest file's first transaction
    (100.0, 0), (150.0, 0), (199.5, 1),  # binlog times are whole seconds: 199.5 is reached at 200, file 2's start
    (200.0, 1), (499.0, 1),  # files without a transaction are skipped over
    (500.0, 4), (650.0, 5), (10_000.0, 5),
])
def test_the_file_a_time_falls_in_is_the_newest_starting_at_or_before_it(at, index):
    def first(file: str):
        return None if FIRSTS[file] is None else (FIRSTS[file], file)

    assert last_starting_at_or_before(list(FIRSTS), first, at) == index


def test_the_files_are_searched_not_read_one_by_one():
    files = [f"b.{n}" for n in range(1000)]
    looked: set[str] = set()

    def first(file: str):
        looked.add(file)
        return float(int(file[2:]) * 10), file

    assert last_starting_at_or_before(files, first, 4321.0) == 432
    assert len(looked) <= 11
