"""Cutting a binlog range into decode pieces from a window of listed events (binlog/ranges.py).

The range's own tests run on a server (tests/integration/test_binlog_reader.py); MariaDB opens a
transaction with its GTID event, so the MySQL layout (a GTID event, then BEGIN) is built here."""

from __future__ import annotations

from airflow_provider_mysqlcdc.cdc.binlog.ranges import first_cut_in_window
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset

from .listings import listed_events as _events


def test_a_window_that_begins_at_a_mysql_begin_cuts_in_the_next_transaction_from_its_gtid_event():
    window = _events(("query", "BEGIN"), ("table_map", ""), ("write_rows_v1", ""), ("xid", "COMMIT"),
                     ("gtid", "SET @@SESSION.GTID_NEXT= 'uuid:8'"), ("query", "BEGIN"), ("table_map", ""),
                     ("write_rows_v1", ""), ("xid", "COMMIT"))
    cut, transaction = first_cut_in_window(window, BinlogOffset("binlog.000001", 10**6))
    assert transaction == window[4].start  # the GTID event, not the BEGIN after it
    assert cut == window[7].end


def test_a_window_that_begins_inside_a_transaction_cuts_in_the_next_one():
    window = _events(("write_rows_v1", ""), ("xid", "COMMIT"), ("gtid", "BEGIN GTID 0-1-9"), ("table_map", ""),
                     ("update_rows_v1", ""), ("xid", "COMMIT"))
    assert first_cut_in_window(window, BinlogOffset("binlog.000001", 10**6)) == (window[4].end, window[2].start)


def test_a_window_inside_one_transaction_or_past_the_end_has_no_cut():
    inside = _events(("write_rows_v1", ""), ("write_rows_v1", ""), ("write_rows_v1", ""))
    assert first_cut_in_window(inside, BinlogOffset("binlog.000001", 10**6)) is None
    window = _events(("xid", "COMMIT"), ("gtid", "BEGIN GTID 0-1-9"), ("table_map", ""), ("write_rows_v1", ""))
    assert first_cut_in_window(window, window[3].end) is None  # the cut would end at the range's end
