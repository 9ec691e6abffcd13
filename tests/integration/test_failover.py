"""The same point in another server's binlog: a replica holds the primary's transactions under the
same GTIDs at other offsets, and a reader that follows a failover continues from its GTID position.

Two real servers: a primary and a GTID replica that logs what it applies (``log_slave_updates``,
``gtid_strict_mode``), whose binlog files are numbered differently from the primary's.
"""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.binlog.gtid import offset_at_gtid_position, sequences
from airflow_provider_mysqlcdc.cdc.binlog.listing import binlog_events
from airflow_provider_mysqlcdc.cdc.errors import BinlogPurgedError, SourceChangedError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.devtools.throwaway_server import ThrowawayMariaDB

pytestmark = pytest.mark.integration


@pytest.fixture()
def servers(tmp_path):
    primary = ThrowawayMariaDB(base_dir=tmp_path / "primary", server_id=1, failover_ready=True).start()
    replica = ThrowawayMariaDB(base_dir=tmp_path / "replica", server_id=2, failover_ready=True).start()
    try:
        with replica.connect_root() as conn, conn.cursor() as cur:
            for _ in range(3):  # its binlog files are numbered unlike the primary's
                cur.execute("FLUSH BINARY LOGS")
        replica.replicate_from(primary)
        with primary.connect_root() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE shop")
            cur.execute("CREATE TABLE shop.t (id INT PRIMARY KEY, v INT)")
        yield primary, replica
    finally:
        replica.stop()
        primary.stop()


def _write(server: ThrowawayMariaDB, first: int, count: int) -> BinlogOffset:
    """Some transactions and a DDL; returns the server's binlog head after them."""
    with server.connect_root() as conn, conn.cursor() as cur:
        for i in range(first, first + count):
            cur.execute("INSERT INTO shop.t (id, v) VALUES (%s, 0)", (i,))
            cur.execute("UPDATE shop.t SET v = v + 1 WHERE id = %s", (i - 1,))
        cur.execute("ALTER TABLE shop.t ADD COLUMN IF NOT EXISTS c INT")
        return current_offset(conn)


def _gtids_after(server: ThrowawayMariaDB, offset) -> list[dict[int, int]]:
    with server.connect_root() as conn:
        return [sequences(e.info) for e in binlog_events(conn, offset, current_offset(conn))
                if e.kind == "gtid"]


def test_a_gtid_position_is_found_before_the_same_transactions_on_a_replica(servers):
    primary, replica = servers
    first = _write(primary, 1, 20)
    second = _write(primary, 100, 20)
    _write(primary, 200, 5)
    replica.wait_for(primary)
    with replica.connect_root() as conn:
        found = [offset_at_gtid_position(conn, at.gtid_set) for at in (first, second)]
    for at, there in zip((first, second), found):
        assert there.server_id == 2 and sequences(there.gtid_set) == sequences(at.gtid_set)
        assert there.file != at.file, "the test needs coordinates that differ between the servers"
        after = _gtids_after(primary, at)
        assert after and _gtids_after(replica, there) == after


def test_a_replica_lacking_transactions_already_read_is_refused_naming_them(servers):
    primary, replica = servers
    _write(primary, 1, 5)
    replica.wait_for(primary)
    with replica.connect_root() as conn, conn.cursor() as cur:
        cur.execute("STOP SLAVE")
    read_up_to = _write(primary, 100, 5)  # read by a stream on the primary, never received by the replica
    with replica.connect_root() as conn, pytest.raises(SourceChangedError, match="lacks transactions 0-\\*-"):
        offset_at_gtid_position(conn, read_up_to.gtid_set)


def test_a_gtid_position_in_purged_binlog_is_reported_as_purged(servers):
    primary, replica = servers
    early = _write(primary, 1, 5)
    _write(primary, 100, 5)
    replica.wait_for(primary)
    replica.purge_binlogs()
    with replica.connect_root() as conn, pytest.raises(BinlogPurgedError, match="purged"):
        offset_at_gtid_position(conn, early.gtid_set)
