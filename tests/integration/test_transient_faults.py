"""Transient source faults, on a MariaDB of the test's own that it stops and starts again.

The core: opening a connection rides out a restart within the retry budget and fails clearly past
it; the binlog reader reconnects after a restart and hands out every change once. The stream, under
spark-submit in continuous mode: a restart of the server is ridden out (the sink stays exact and
the stream keeps running), and an outage longer than the budget stops it with an error saying so.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.cdc.errors import SourceUnavailableError
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from devtools.throwaway_server import ThrowawayMariaDB
from devtools.verify import source_rows

from .helpers import delta_rows

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def own_server(tmp_path_factory):
    server = ThrowawayMariaDB(base_dir=tmp_path_factory.mktemp("restartable-mariadb"))
    server.start()
    yield server
    server.stop()


def _restart_later(server: ThrowawayMariaDB, after_s: float) -> threading.Thread:
    """The outage itself: the server comes back ``after_s`` seconds from now."""
    thread = threading.Timer(after_s, server.start)
    thread.start()
    return thread


def test_connecting_rides_out_a_server_restart(own_server, caplog):
    own_server.stop()
    comeback = _restart_later(own_server, 2.0)
    conn = own_server.root_config().with_retry(60).connect()
    comeback.join()
    conn.close()
    assert "retrying in" in caplog.text


def test_an_outage_longer_than_the_retry_budget_fails_clearly(own_server):
    own_server.stop()
    try:
        with pytest.raises(SourceUnavailableError, match=r"unreachable for \d+s, longer than the retry budget of 2s"):
            own_server.root_config().with_retry(2).connect()
    finally:
        own_server.start()


def test_the_binlog_reader_resumes_after_a_restart_with_every_change_once(own_server, caplog):
    source = own_server.root_config().with_retry(60)
    conn = own_server.connect_root()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS faults")
        cur.execute("CREATE TABLE faults.t (id INT PRIMARY KEY, v TEXT)")
    start = current_offset(conn)
    rows, per_txn = 20_000, 500  # ~20 MB of binlog: more than the socket buffers hold when the server stops
    with conn.cursor() as cur:
        for first in range(0, rows, per_txn):
            cur.execute("BEGIN")
            cur.executemany("INSERT INTO faults.t VALUES (%s, REPEAT('x', 1000))", [(first + i,) for i in range(per_txn)])
            cur.execute("COMMIT")
    end = current_offset(conn)
    schema = load_table_schema(conn, TableId("faults", "t"))
    conn.close()
    ids, comeback = [], None
    for record in BinlogReader.for_schemas(source, [schema], start=start, end=end):
        if isinstance(record, ChangeRecord):
            ids.append(record.after["id"])
            if len(ids) == 1250:  # in the middle of a transaction
                own_server.stop()
                comeback = _restart_later(own_server, 1.0)
    comeback.join()
    assert "reading the binlog at" in caplog.text and "retrying in" in caplog.text, "the reader never reconnected"
    assert ids == list(range(rows))


@dataclass
class Outages:
    exact_after_restart: bool
    alive_after_restart: bool
    retried: bool
    exit_code: int | None
    log: str


@pytest.fixture(scope="module")
def stream_outages(own_server, tmp_path_factory) -> Outages:
    """A continuous stream with a 20 s retry budget: the server restarts (down until the stream has
    noticed), writes go on, the sink catches up; then the server stays down for good."""
    from airflow_provider_mysqlcdc.cdc.model.split import SnapshotSplit
    from airflow_provider_mysqlcdc.cdc.reading.split_reader import SplitReader
    from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
    from airflow_provider_mysqlcdc.sinks.factory import open_sink
    from airflow_provider_mysqlcdc.sinks.writer import SinkWriter
    from airflow_provider_mysqlcdc.state.registry import PipelineState, captured_tables
    from devtools.spark_submit import SparkSubmit

    tmp = tmp_path_factory.mktemp("stream-outage")
    source = own_server.root_config()
    conn = own_server.connect_root()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS outage")
        cur.execute("CREATE TABLE outage.t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.executemany("INSERT INTO outage.t VALUES (%s, 'initial')", [(i,) for i in range(100)])
    table = TableId("outage", "t")
    schema = load_table_schema(conn, table)
    conn.close()
    lake, sink = str(tmp / "lake"), open_sink(SinkSpec(str(tmp / "lake")))
    sink.prepare(schema)
    with SplitReader(source, schema) as reader:
        result = reader.read(SnapshotSplit(table, 0, "id"))
        SinkWriter(sink, schema, "id", reader.ordering("id")).write_split(result.finished, result.rows)
    PipelineState(str(tmp / "state")).commit(captured_tables([result.finished]))
    job = StreamJob(state=str(tmp / "state"), sink=SinkSpec(lake), mode="continuous", trigger_interval_s=0.5, retry_budget_s=20)
    (tmp / "stream.json").write_text(job.to_json())
    log_file = tmp / "stream.log"
    submit = SparkSubmit(master="local[1]", work_dir=tmp / "spark")
    proc = submit.start("binlog_stream.py", ["--job", str(tmp / "stream.json")],
                        source.to_private_file(tmp / "secrets" / "source.json"), log_file)

    def write(first: int) -> None:
        conn = own_server.connect_root()
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO outage.t VALUES (%s, 'written')", [(first + i,) for i in range(50)])
            cur.execute("UPDATE outage.t SET v = 'updated' WHERE id % 3 = 0")
            cur.execute("DELETE FROM outage.t WHERE id % 7 = 0")
        conn.close()

    def wait_for(condition, what: str, timeout_s: float = 180) -> bool:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if proc.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True

    def exact() -> bool:
        try:
            return delta_rows(lake, schema) == source_rows(source, schema)
        except Exception:  # noqa: BLE001 - the table may be between commits, or the server down
            return False

    try:
        write(1000)
        assert wait_for(exact, "the first changes"), log_file.read_text()[-3000:]
        own_server.stop()
        retried = wait_for(lambda: "retrying in" in log_file.read_text(), "the stream noticing the outage")
        own_server.start()
        write(2000)
        exact_after = wait_for(exact, "catching up after the restart")
        alive = proc.poll() is None
        own_server.stop()  # for longer than the budget
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
        own_server.start()
    return Outages(exact_after, alive, retried, proc.returncode, log_file.read_text())


def test_a_continuous_stream_rides_out_a_server_restart(stream_outages):
    assert stream_outages.retried, stream_outages.log[-3000:]
    assert stream_outages.exact_after_restart and stream_outages.alive_after_restart, stream_outages.log[-3000:]


def test_a_stream_stops_with_a_clear_error_when_the_source_stays_away(stream_outages):
    assert stream_outages.exit_code not in (0, None)
    assert "longer than the retry budget of 20s" in stream_outages.log, stream_outages.log[-3000:]
