"""Offsets know which binlog they belong to: a reset or another server's binlog is refused clearly.

The stream's offsets carry the MariaDB GTID position at the offset and the server id. After
``RESET MASTER`` the binlog starts again at file 1, and once it has grown past the stream's
position, that position exists again in a different binlog: the stream must say so (with the way
out) before it writes anything, not read the middle of an unrelated event stream.
"""

from __future__ import annotations

import json
import threading

import pytest

from airflow_provider_mysqlcdc.cdc.errors import SourceChangedError, SparkJobFailed
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.server import check_same_binlog, current_offset
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, stream_only_split
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.spark_submit import SparkSubmit
from devtools.throwaway_server import ThrowawayMariaDB

pytestmark = pytest.mark.integration


@pytest.fixture()
def server(tmp_path):
    server = ThrowawayMariaDB(base_dir=tmp_path / "mariadb").start()
    try:
        yield server
    finally:
        server.stop()


def _write(conn, table: TableId, first: int, count: int) -> None:
    with conn.cursor() as cur:
        for start in range(first, first + count, 100):
            cur.execute(f"INSERT INTO {table.quoted} SELECT seq, REPEAT('x', 200) FROM shop.seq_{start}_to_{start + 99}")


def test_an_offset_is_refused_by_a_reset_binlog_grown_past_it(server):
    conn = server.connect_root()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE shop")
        cur.execute("CREATE TABLE shop.t (id INT PRIMARY KEY, pad VARCHAR(200))")
    _write(conn, TableId("shop", "t"), 1, 300)
    offset = current_offset(conn)
    assert offset.gtid_set and offset.server_id is not None
    check_same_binlog(conn, offset, exact=True)  # the binlog it was read from
    with conn.cursor() as cur:
        cur.execute("RESET MASTER")
    with pytest.raises(SourceChangedError, match="RESET MASTER"):  # nothing written yet: behind
        check_same_binlog(conn, offset)
    _write(conn, TableId("shop", "t"), 1001, 600)
    grown = current_offset(conn)
    assert grown.file == offset.file and grown.position > offset.position and grown.gtid_set
    with pytest.raises(SourceChangedError, match="holds .* there now"):
        check_same_binlog(conn, offset, exact=True)


def test_an_offset_read_under_concurrent_commits_holds_the_gtid_position_of_its_place(server):
    # The position and the GTID position are two reads; a commit between them must not pair a
    # position with a GTID that comes after it (the stream then refused its own offsets).
    conn, writer = server.connect_root(), server.connect_root()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE shop")
        cur.execute("CREATE TABLE shop.t (id INT AUTO_INCREMENT PRIMARY KEY, pad VARCHAR(10))")
    stop = threading.Event()

    def write() -> None:
        with writer.cursor() as cur:
            while not stop.is_set():
                cur.execute("INSERT INTO shop.t (pad) VALUES ('x')")

    thread = threading.Thread(target=write)
    thread.start()
    try:
        offsets = [current_offset(conn) for _ in range(300)]
    finally:
        stop.set()
        thread.join()
    with conn.cursor() as cur:
        mismatched = []
        for offset in offsets:
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (offset.file, offset.position))
            there = cur.fetchone()[0]
            if there != offset.gtid_set:
                mismatched.append(f"{offset}: read {offset.gtid_set}, binlog holds {there}")
    assert len({o.gtid_set for o in offsets}) > 10, "the writer did not commit while offsets were read"
    assert not mismatched, mismatched[:5]


def test_a_stream_refuses_to_continue_on_a_reset_binlog_and_writes_nothing(server, tmp_path):
    conn = server.connect_root()
    table = TableId("shop", "t")
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE shop")
        cur.execute("CREATE TABLE shop.t (id INT PRIMARY KEY, pad VARCHAR(200))")
    start = current_offset(conn)
    _write(conn, table, 1, 200)
    state = PipelineState(str(tmp_path / "state"))
    state.commit({table: CapturedTable("id", [stream_only_split(table, "id", start)])})
    lake = str(tmp_path / "lake")
    (tmp_path / "stream.json").write_text(StreamJob(state=state.location, sink=SinkSpec(lake)).to_json())
    source_file = server.root_config().to_private_file(tmp_path / "secrets" / "source.json")
    submit = SparkSubmit(master="local[1]", work_dir=tmp_path / "spark")
    submit.run("binlog_stream.py", ["--job", str(tmp_path / "stream.json")], source_file)
    processed = json.loads((tmp_path / "state" / "progress" / "stream-offset.json").read_text())["offset"]
    assert processed.get("gtid") and processed.get("server_id") is not None, processed
    rows_before = open_sink(SinkSpec(lake)).read(table).num_rows

    with conn.cursor() as cur:
        cur.execute("RESET MASTER")
        cur.execute("DELETE FROM shop.t")
    _write(conn, table, 5001, 900)  # the new binlog grows past the stream's position
    assert current_offset(conn) > BinlogOffset(processed["file"], int(processed["pos"]))
    with pytest.raises(SparkJobFailed, match="RESET MASTER"):
        submit.run("binlog_stream.py", ["--job", str(tmp_path / "stream.json")], source_file)
    assert open_sink(SinkSpec(lake)).read(table).num_rows == rows_before == 200
