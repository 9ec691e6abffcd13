"""XA identifiers and statements as servers write and clients type them, and prepared groups in a
listing of MariaDB's and MySQL's binlog events (cdc/binlog/xa.py)."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.binlog.listing import closes_transaction, opens_transaction
from airflow_provider_mysqlcdc.cdc.binlog.xa import Xid, parse_xa_statement, prepared_groups
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset

from .listings import listed_events as _events


@pytest.mark.parametrize("text, xid", [
    ("X'7262',X'',1", Xid(b"rb")),
    ("'rb'", Xid(b"rb")),
    ("'rb', 'branch'", Xid(b"rb", b"branch")),
    ("'rb','',7", Xid(b"rb", b"", 7)),
    ("X'0102',X'03',7", Xid(b"\x01\x02", b"\x03", 7)),
    ("0x0102", Xid(b"\x01\x02")),
    ("'a''b'", Xid(b"a'b")),
    ('"q"', Xid(b"q")),
])
def test_xids_in_every_written_form_are_one_identifier(text, xid):
    assert Xid.parse(text) == xid
    assert Xid.parse(str(xid)) == xid  # the server's form round-trips


@pytest.mark.parametrize("text", ["", "rb", "'rb' 'x'", "1, 'a'", "'a', 'b', 'c'"])
def test_malformed_xids_are_none(text):
    assert Xid.parse(text) is None


def test_xa_statements_are_recognised_with_their_verb_and_one_phase():
    assert parse_xa_statement("XA COMMIT X'636d',X'',1") == parse_xa_statement("xa commit 'cm'")
    assert parse_xa_statement("XA COMMIT 'cm' ONE PHASE").one_phase
    assert parse_xa_statement("XA BEGIN 'x'").verb == "START"
    assert parse_xa_statement("XA END 'x' SUSPEND FOR MIGRATE").verb == "END"
    assert parse_xa_statement("XA ROLLBACK 'x';").verb == "ROLLBACK"
    assert parse_xa_statement("XA RECOVER") is None
    assert parse_xa_statement("XAPREPARE 'x'") is None
    assert parse_xa_statement("UPDATE t SET v = 1") is None


def test_prepared_groups_in_a_mariadb_listing_start_at_their_gtid_event():
    events = _events(("gtid", "BEGIN GTID 0-1-3"), ("write_rows_v1", ""), ("xid", "COMMIT /* xid=8 */"),
                     ("gtid", "XA START X'7262',X'',1 GTID 0-1-4"), ("update_rows_v1", ""),
                     ("query", "XA END X'7262',X'',1"), ("xa_prepare", "XA PREPARE X'7262',X'',1"),
                     ("gtid", "GTID 0-1-5"), ("query", "XA ROLLBACK X'7262',X'',1"))
    [prepared] = prepared_groups(iter(events))
    assert prepared.xid == Xid(b"rb")
    assert (prepared.start, prepared.end) == (BinlogOffset("binlog.000001", 1300), BinlogOffset("binlog.000001", 1700))


def test_prepared_groups_in_a_mysql_listing_start_at_the_gtid_before_xa_start_and_skip_one_phase():
    events = _events(("gtid", "SET @@SESSION.GTID_NEXT= 'u:1'"), ("query", "XA START X'61',X'',1"),
                     ("table_map", ""), ("write_rows", ""), ("query", "XA END X'61',X'',1"),
                     ("xa_prepare", "XA PREPARE X'61',X'',1"),
                     ("anonymous_gtid", "SET @@SESSION.GTID_NEXT= 'ANONYMOUS'"), ("query", "XA START X'62',X'',1"),
                     ("write_rows", ""), ("query", "XA END X'62',X'',1"),
                     ("xa_prepare", "XA COMMIT X'62',X'',1 ONE PHASE"))
    [prepared] = prepared_groups(iter(events))
    assert prepared.xid == Xid(b"a") and prepared.start.position == 1000 and prepared.end.position == 1600


def test_an_xa_group_opens_and_its_prepare_closes_a_transaction_for_batch_ends():
    mariadb_start, mysql_start, xa_end, prepare = _events(
        ("gtid", "XA START X'7262',X'',1 GTID 0-1-4"), ("query", "XA START X'61',X'',1"),
        ("query", "XA END X'61',X'',1"), ("xa_prepare", "XA PREPARE X'61',X'',1"))
    assert opens_transaction(mariadb_start) and opens_transaction(mysql_start)
    assert not closes_transaction(xa_end) and closes_transaction(prepare)
