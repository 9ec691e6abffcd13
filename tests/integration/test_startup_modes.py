"""Startup modes that stream a new table without a snapshot from a point the server finds
(cdc/binlog/start_points.py): the first transaction at or after a time (binlog files searched by
their first transaction's time), the oldest binlog file left, a MariaDB GTID position. Event times
are set with ``SET TIMESTAMP`` (what the binlog records), in the future of every other test's events,
so no test waits for the clock."""

from __future__ import annotations

import time

import pytest

from airflow_provider_mysqlcdc.cdc.binlog.listing import binlog_events
from airflow_provider_mysqlcdc.cdc.binlog.ranges import batch_end, listed_batch_end
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import binlog_files, current_offset, gtid_position_at
from airflow_provider_mysqlcdc.planning.changes import next_tables
from airflow_provider_mysqlcdc.planning.planner import Planner, PlanSettings
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.verify import sink_rows

from .helpers import run_stream

pytestmark = pytest.mark.integration


def at(conn, when: float, *statements: str) -> None:
    """``statements`` committed with binlog time ``when``."""
    with conn.cursor() as cur:
        cur.execute(f"SET TIMESTAMP = {when}")
        for statement in statements:
            cur.execute(statement)
        cur.execute("SET TIMESTAMP = DEFAULT")
    conn.commit()


def next_transaction_start(conn, offset):
    """Where the first transaction at or after ``offset`` starts (its GTID event; the server may write
    a Binlog_checkpoint event after a rotation first), or the head when none follows."""
    head = current_offset(conn)
    event = next((e for e in binlog_events(conn, offset, head) if e.kind == "gtid"), None)
    return (event.file, event.position) if event else (head.file, head.position)


def plan_stream_start(cdc_user, state: PipelineState, table: TableId, **settings):
    run = Planner(cdc_user, state).plan([table], PlanSettings.parse(split_rows=100, chunk_rows=100, **settings),
                                        state.latest())
    [plan] = run.plans
    return plan, run


@pytest.fixture
def table(mysql_server, database) -> TableId:
    table = TableId(database, "events")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, v VARCHAR(20))")
    conn.commit()
    return table


def test_timestamp_mode_streams_a_new_table_from_the_first_transaction_at_or_after_the_time(
        mysql_server, cdc_user, table, tmp_path):
    conn = mysql_server.connect()
    base = float(int(time.time()) + 100_000)  # after every event other tests wrote
    at(conn, base + 100, f"INSERT INTO {table.quoted} VALUES (1, 'a'), (2, 'b')")
    conn.cursor().execute("FLUSH BINARY LOGS")
    at(conn, base + 150, f"UPDATE {table.quoted} SET v = 'b2' WHERE id = 2")
    conn.cursor().execute("FLUSH BINARY LOGS")
    rotated = current_offset(conn)
    at(conn, base + 200, f"INSERT INTO {table.quoted} VALUES (3, 'c')")
    expected_start = next_transaction_start(conn, rotated)
    at(conn, base + 250, f"UPDATE {table.quoted} SET v = 'a2' WHERE id = 1")
    conn.cursor().execute("FLUSH BINARY LOGS")
    at(conn, base + 300, f"INSERT INTO {table.quoted} VALUES (4, 'd')", f"DELETE FROM {table.quoted} WHERE id = 3")

    state = PipelineState(str(tmp_path / "state"))
    plan, _ = plan_stream_start(cdc_user, state, table, startup_mode="timestamp", start_time=base + 199.5)
    assert plan.action == "stream-only"
    assert (plan.stream_from.file, plan.stream_from.position) == expected_start

    state.commit(next_tables(state.latest(), [plan], [], exact=True))
    lake = tmp_path / "lake"
    run_stream(cdc_user, tmp_path, StreamJob(state=state.location, sink=SinkSpec(str(lake))))
    rows = sink_rows(lake, load_table_schema(conn, table))
    # the changes from base + 200 on: row 3 inserted and deleted, row 1 updated, row 4 inserted
    assert {key: row["v"] for key, row in rows.items()} == {(1,): "a2", (4,): "d"}


def test_earliest_mode_starts_at_the_oldest_binlog_file_left(mysql_server, cdc_user, table, tmp_path):
    plan, _ = plan_stream_start(cdc_user, PipelineState(str(tmp_path / "state")), table, startup_mode="earliest")
    oldest = binlog_files(mysql_server.connect())[0]
    assert (plan.stream_from.file, plan.stream_from.position) == (oldest, 4)
    assert plan.stream_from.server_id is not None


def test_a_gtid_start_offset_is_the_binlog_offset_holding_exactly_that_position(mysql_server, cdc_user, table,
                                                                                tmp_path):
    conn = mysql_server.connect()
    at(conn, time.time(), f"INSERT INTO {table.quoted} VALUES (10, 'x')")
    there = current_offset(conn)
    at(conn, time.time(), f"INSERT INTO {table.quoted} VALUES (11, 'y')")
    plan, _ = plan_stream_start(cdc_user, PipelineState(str(tmp_path / "state")), table, startup_mode="offset",
                                start_offset=there.gtid_set)
    assert (plan.stream_from.file, plan.stream_from.position) == next_transaction_start(conn, there)
    assert plan.stream_from.gtid_set == there.gtid_set


def test_every_gtid_position_read_from_the_server_is_written_in_domain_order(mysql_server, cdc_user, table, tmp_path):
    """The server orders domains differently in ``@@gtid_binlog_pos`` and ``BINLOG_GTID_POS``: the head,
    the position at an offset, a batch end (skipped to or listed) and a planned start all write one text."""
    if not mysql_server.info.is_mariadb:
        pytest.skip("GTID domains are MariaDB's")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")  # a fresh file: its GTID list names the domains of earlier tests
        for n, domain in enumerate([3, 1, 2, 0, 3]):
            cur.execute(f"SET SESSION gtid_domain_id = {domain}")
            cur.execute(f"INSERT INTO {table.quoted} VALUES ({n}, 'd{domain}')")
        cur.execute("SET SESSION gtid_domain_id = 0")
    there = current_offset(conn)
    at(conn, time.time(), f"INSERT INTO {table.quoted} VALUES (10, 'x')")
    head = current_offset(conn)
    plan, _ = plan_stream_start(cdc_user, PipelineState(str(tmp_path / "state")), table, startup_mode="offset",
                                start_offset=there.gtid_set)
    domains = [int(g.split("-")[0]) for g in there.gtid_set.split(",")]
    assert domains == sorted(domains) and {0, 1, 2, 3} <= set(domains)
    texts = {"head": there.gtid_set, "position at": gtid_position_at(conn, there), "planned": plan.stream_from.gtid_set,
             "listed": listed_batch_end(conn, there, head, max_events=1).gtid_set,
             "skipped": batch_end(conn, there, head, max_events=1).gtid_set}
    assert texts["listed"] == current_offset(conn).gtid_set == head.gtid_set
    assert len({texts["head"], texts["position at"], texts["planned"]}) == 1 and texts["skipped"] == texts["listed"], texts
