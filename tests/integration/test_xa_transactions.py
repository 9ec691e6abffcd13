"""XA transactions: their rows are written to the binlog at XA PREPARE and happen only at XA COMMIT.

The reader emits a prepared transaction's rows at its commit's offset and never after XA ROLLBACK,
whether it read the prepare itself (held, or read again when large), starts between the prepare and
the commit (found in the server's binlog listing, also across binlog files), or ends before the
outcome. The stream (one module history: prepares read by one stream run, their outcomes by the
next, a transaction prepared across the snapshot) leaves the sink equal to the source.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from airflow_provider_mysqlcdc.cdc.binlog import reader as reader_module
from airflow_provider_mysqlcdc.cdc.binlog.ranges import batch_end
from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader, TransactionCommitted
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, Operation
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.snapshot import snapshot_tables
from devtools.throwaway_server import close_session
from devtools.verify import read_delta, source_rows

from .helpers import assert_same_rows, delta_rows, run_stream

pytestmark = pytest.mark.integration


def xa(mysql_server, xid: str, *statements: str, outcome: str | None = "PREPARE") -> None:
    """One XA transaction on a connection of its own: ``statements``, then XA END and ``outcome``
    (PREPARE leaves it prepared, 'COMMIT ONE PHASE' commits it at once). The session is ended:
    MariaDB keeps a prepared transaction after it, for any session to finish."""
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"XA START {xid}")
        for statement in statements:
            cur.execute(statement)
        cur.execute(f"XA END {xid}")
        cur.execute(f"XA {outcome.split()[0]} {xid} {' '.join(outcome.split()[1:])}")
    close_session(conn, mysql_server.connect())


def finish(mysql_server, verb: str, xid: str) -> None:
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"XA {verb} {xid}")
    conn.close()


@pytest.fixture()
def table(mysql_server, database):
    table = TableId(database, "t")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, v INT)")
        cur.execute(f"INSERT INTO {table.quoted} SELECT seq, seq FROM `{database}`.seq_1_to_20")
    yield table
    with conn.cursor() as cur:  # a test that failed midway leaves no prepared transaction behind
        cur.execute("XA RECOVER")
        for _, gtrid_length, bqual_length, data in cur.fetchall():
            data = data if isinstance(data, bytes) else data.encode()
            gtrid, bqual = data[:gtrid_length], data[gtrid_length:gtrid_length + bqual_length]
            cur.execute(f"XA ROLLBACK X'{gtrid.hex()}',X'{bqual.hex()}'")


def changes(cdc_user, table: TableId, start: BinlogOffset, end: BinlogOffset, **kwargs) -> list[ChangeRecord]:
    schema = load_table_schema(cdc_user.connect(), table)
    return [i for i in BinlogReader.for_schemas(cdc_user, [schema], start=start, end=end, **kwargs)
            if isinstance(i, ChangeRecord)]


def commit_offsets(cdc_user, start: BinlogOffset, end: BinlogOffset) -> list[BinlogOffset]:
    conn = cdc_user.connect()
    from airflow_provider_mysqlcdc.cdc.binlog.listing import binlog_events
    return [e.end for e in binlog_events(conn, start, end) if e.kind == "query" and e.info.startswith("XA COMMIT")]


def test_a_rolled_back_xa_transaction_is_never_emitted(mysql_server, cdc_user, table):
    start = current_offset(mysql_server.connect())
    xa(mysql_server, "'rb'", f"UPDATE {table.quoted} SET v = -1 WHERE id <= 10",
       f"INSERT INTO {table.quoted} VALUES (1001, 1)")
    finish(mysql_server, "ROLLBACK", "'rb'")
    end = current_offset(mysql_server.connect())
    assert changes(cdc_user, table, start, end) == []


def test_a_committed_xa_transaction_is_emitted_at_its_commit_in_its_order(mysql_server, cdc_user, table):
    start = current_offset(mysql_server.connect())
    xa(mysql_server, "'cm'", f"UPDATE {table.quoted} SET v = -1 WHERE id <= 3",
       f"UPDATE {table.quoted} SET v = -2 WHERE id = 2", f"UPDATE {table.quoted} SET id = 102 WHERE id = 3")
    with mysql_server.connect().cursor() as cur:  # an ordinary transaction between prepare and commit
        cur.execute(f"UPDATE {table.quoted} SET v = 50 WHERE id = 5")
    finish(mysql_server, "COMMIT", "'cm'")
    end = current_offset(mysql_server.connect())
    records = changes(cdc_user, table, start, end)
    [commit] = commit_offsets(cdc_user, start, end)
    assert records[0].after == {"id": 5, "v": 50} and records[0].offset < commit  # in binlog order of commits
    xa_records = records[1:]
    assert all(r.offset == commit for r in xa_records)
    assert [(r.op, r.image["id"], r.image["v"]) for r in xa_records] == [
        (Operation.UPDATE, 1, -1), (Operation.UPDATE, 2, -1), (Operation.UPDATE, 3, -1), (Operation.UPDATE, 2, -2),
        (Operation.DELETE, 3, -1), (Operation.CREATE, 102, -1)]
    assert [r.order_key for r in xa_records] == sorted(r.order_key for r in xa_records)
    assert len({r.order_key for r in xa_records}) == len(xa_records)


def test_a_reader_ending_between_prepare_and_commit_emits_nothing_of_it(mysql_server, cdc_user, table):
    start = current_offset(mysql_server.connect())
    xa(mysql_server, "'open'", f"UPDATE {table.quoted} SET v = -1 WHERE id <= 10")
    prepared = current_offset(mysql_server.connect())
    finish(mysql_server, "COMMIT", "'open'")
    end = current_offset(mysql_server.connect())
    assert changes(cdc_user, table, start, prepared) == []
    assert [r.image["v"] for r in changes(cdc_user, table, prepared, end)] == [-1] * 10


def test_a_reader_starting_after_the_prepare_finds_it_in_an_earlier_binlog_file(mysql_server, cdc_user, table):
    xa(mysql_server, "X'0102',X'03',7", f"UPDATE {table.quoted} SET v = -7 WHERE id IN (4, 6)",
       f"DELETE FROM {table.quoted} WHERE id = 8")
    xa(mysql_server, "'again'", f"UPDATE {table.quoted} SET v = -9 WHERE id = 9")  # one prepared again below
    finish(mysql_server, "COMMIT", "'again'")
    xa(mysql_server, "'again'", f"UPDATE {table.quoted} SET v = -10 WHERE id = 10")
    with mysql_server.connect().cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
    start = current_offset(mysql_server.connect())
    finish(mysql_server, "COMMIT", "X'0102',X'03',7")
    finish(mysql_server, "COMMIT", "'again'")
    end = current_offset(mysql_server.connect())
    records = changes(cdc_user, table, start, end)
    assert [(r.op, r.image["id"], r.image["v"]) for r in records] == [
        (Operation.UPDATE, 4, -7), (Operation.UPDATE, 6, -7), (Operation.DELETE, 8, 8), (Operation.UPDATE, 10, -10)]
    assert records[0].offset.file == start.file


def test_a_large_prepared_transaction_is_read_again_at_its_commit(mysql_server, cdc_user, table, monkeypatch):
    monkeypatch.setattr(reader_module, "HELD_XA_ROWS", 5)
    start = current_offset(mysql_server.connect())
    xa(mysql_server, "'small'", f"UPDATE {table.quoted} SET v = -1 WHERE id <= 4")
    xa(mysql_server, "'large'", f"UPDATE {table.quoted} SET v = -2 WHERE id BETWEEN 11 AND 20")
    finish(mysql_server, "COMMIT", "'large'")
    finish(mysql_server, "COMMIT", "'small'")
    end = current_offset(mysql_server.connect())
    schema = load_table_schema(cdc_user.connect(), table)
    reader = BinlogReader.for_schemas(cdc_user, [schema], start=start, end=end)
    items = list(reader)
    records = [i for i in items if isinstance(i, ChangeRecord)]
    assert [(r.image["id"], r.image["v"]) for r in records] == [(i, -2) for i in range(11, 21)] + [
        (i, -1) for i in range(1, 5)]
    # the reader went on after the large one's commit: the small one's commit, and nothing twice
    commits = [i.offset for i in items if isinstance(i, TransactionCommitted)]
    assert commits == sorted(set(commits)) and commits[-1] == end


def test_xa_commit_one_phase_is_an_ordinary_commit(mysql_server, cdc_user, table):
    start = current_offset(mysql_server.connect())
    xa(mysql_server, "'one'", f"INSERT INTO {table.quoted} VALUES (500, 5)", outcome="COMMIT ONE PHASE")
    end = current_offset(mysql_server.connect())
    assert [(r.op, r.after) for r in changes(cdc_user, table, start, end)] == [(Operation.CREATE, {"id": 500, "v": 5})]


def test_a_micro_batch_never_ends_inside_an_xa_group(mysql_server, cdc_user, table):
    conn = mysql_server.connect()
    start = current_offset(conn)
    xa(mysql_server, "'cut'", *[f"UPDATE {table.quoted} SET v = v + 1 WHERE id = {i}" for i in range(1, 11)])
    head = current_offset(conn)
    # a limit of one byte ends the batch at the first group's end: the prepare event, not XA END before it
    end = batch_end(conn, start, head, max_bytes=1)
    assert end == head
    finish(mysql_server, "ROLLBACK", "'cut'")


def test_pieces_of_a_range_cut_inside_an_xa_group_emit_it_once_at_its_commit(mysql_server, cdc_user, table):
    from airflow_provider_mysqlcdc.cdc.binlog.ranges import plan_decode_ranges

    conn = mysql_server.connect()
    start = current_offset(conn)
    xa(mysql_server, "'pieces'", *[f"UPDATE {table.quoted} SET v = 100 + v WHERE id = {i}" for i in range(1, 21)])
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table.quoted} VALUES (600, 6)")
    finish(mysql_server, "COMMIT", "'pieces'")
    end = current_offset(conn)
    ranges = plan_decode_ranges(conn, start, end, pieces=4, min_bytes=0)
    assert len(ranges) == 4, ranges
    records = []
    for piece in ranges:
        records += changes(cdc_user, table, piece.read_from, piece.end, decode_after=piece.decode_after)
    records.sort(key=lambda r: r.order_key)
    assert [r.image["id"] for r in records] == [600] + list(range(1, 21))
    assert [r.image["v"] for r in records[1:]] == [100 + i for i in range(1, 21)]


# --- the stream ---------------------------------------------------------------------------------------
@dataclass
class History:
    tables: list[TableId]
    lake: str
    runs: list[dict]


def _run_stream(cdc_user, tmp, state: PipelineState, lake: str) -> dict:
    return run_stream(cdc_user, tmp, StreamJob(state=state.location, sink=SinkSpec(lake), changelog=True))


@pytest.fixture(scope="module")
def history(mysql_server, cdc_user, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("xa")
    database = f"cdc_xa_{uuid.uuid4().hex[:8]}"
    t, u = TableId(database, "t"), TableId(database, "u")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
        for table in (t, u):
            cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, v INT)")
            cur.execute(f"INSERT INTO {table.quoted} SELECT seq, seq FROM `{database}`.seq_1_to_40")
    # prepared before the snapshot, still open at its watermarks: the snapshot cannot see it
    xa(mysql_server, "'across'", f"UPDATE {u.quoted} SET v = -1 WHERE id <= 5", f"DELETE FROM {u.quoted} WHERE id = 6")
    state, lake = PipelineState(str(tmp / "state")), str(tmp / "lake")
    snapshot_tables(cdc_user, [t, u], lake, state)
    # the reproduction: prepared, a stream run, rolled back, another run
    xa(mysql_server, "'rb'", f"UPDATE {t.quoted} SET v = -1 WHERE id <= 10", f"INSERT INTO {t.quoted} VALUES (1001, 1)")
    xa(mysql_server, "'cm'", f"UPDATE {t.quoted} SET v = -2 WHERE id BETWEEN 21 AND 25",
       f"INSERT INTO {t.quoted} VALUES (1002, 2)")
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {t.quoted} SET v = 3 WHERE id = 30")
    runs = [_run_stream(cdc_user, tmp, state, lake)]
    finish(mysql_server, "ROLLBACK", "'rb'")
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
    finish(mysql_server, "COMMIT", "'cm'")
    finish(mysql_server, "COMMIT", "'across'")
    xa(mysql_server, "'one'", f"INSERT INTO {u.quoted} VALUES (1003, 3)", outcome="COMMIT ONE PHASE")
    xa(mysql_server, "'same'", f"UPDATE {u.quoted} SET v = -4 WHERE id = 30")  # prepared and committed in one run
    finish(mysql_server, "COMMIT", "'same'")
    runs.append(_run_stream(cdc_user, tmp, state, lake))
    yield History([t, u], lake, runs)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE `{database}`")


def test_the_stream_applies_committed_xa_transactions_and_never_rolled_back_ones(mysql_server, history):
    for table in history.tables:
        schema = load_table_schema(mysql_server.connect(), table)
        assert_same_rows(table, source_rows(mysql_server.admin, schema), delta_rows(history.lake, schema))


def test_the_changelog_records_an_xa_transactions_changes_at_its_commit_and_none_rolled_back(history):
    import json


    t = history.tables[0]
    log = read_delta(f"{history.lake}/{t.database}/{t.table}__changelog").to_pylist()
    images = [json.loads(row["after"] or row["before"]) for row in log]
    assert not [i for i in images if i["id"] == 1001 or i["v"] == -1], "a rolled-back change reached the changelog"
    committed = [row for row, image in zip(log, images) if image["v"] == -2 or image["id"] == 1002]
    assert len(committed) == 6
    assert len({(row["binlog_file"], row["binlog_pos"]) for row in committed}) == 1  # all at the XA COMMIT
    assert sorted(row["row_in_event"] for row in committed) == list(range(6))
