"""The same point in another server's binlog: a replica holds the primary's transactions under the
same GTIDs at other offsets, and a reader that follows a failover continues from its GTID position.

Two real servers: a primary and a GTID replica that logs what it applies (``log_slave_updates``,
``gtid_strict_mode``), whose binlog files are numbered differently from the primary's.
"""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.binlog.gtid import offset_at_gtid_position
from airflow_provider_mysqlcdc.cdc.binlog.listing import binlog_events
from airflow_provider_mysqlcdc.cdc.errors import BinlogPurgedError, SourceChangedError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.source.server import current_offset, gtid_sequences
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from devtools.throwaway_server import ThrowawayMariaDB

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
        return [gtid_sequences(e.info) for e in binlog_events(conn, offset, current_offset(conn))
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
        assert there.server_id == 2 and gtid_sequences(there.gtid_set) == gtid_sequences(at.gtid_set)
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


# --- the stream follows a failover ------------------------------------------------------------------

@pytest.fixture(params=["delta", "iceberg"])
def failover_pipeline(tmp_path, request):
    """A primary whose binlog files are numbered *above* its replica's (so that every offset read on
    the replica is "older" by file number than those read on the primary), a pipeline capturing
    ``shop.t`` from the primary into a sink of each table format, and a stream run that brought the
    sink up to date there."""
    primary = ThrowawayMariaDB(base_dir=tmp_path / "primary", server_id=1, failover_ready=True).start()
    replica = ThrowawayMariaDB(base_dir=tmp_path / "replica", server_id=2, failover_ready=True).start()
    try:
        with primary.connect_root() as conn, conn.cursor() as cur:
            for _ in range(3):
                cur.execute("FLUSH BINARY LOGS")
            cur.execute("CREATE DATABASE shop")
            for name in ("t", "u"):
                cur.execute(f"CREATE TABLE shop.{name} (id INT PRIMARY KEY, v INT)")
                cur.executemany(f"INSERT INTO shop.{name} VALUES (%s, 0)", [(i,) for i in range(100)])
        replica.replicate_from(primary)
        pipeline = _Pipeline(tmp_path, primary, request.param)
        pipeline.capture_directly("t")
        _change(primary, "t", 1)
        pipeline.stream()
        assert pipeline.sink_equals_source("t")
        yield primary, replica, pipeline
    finally:
        replica.stop()
        primary.stop()


class _Pipeline:
    def __init__(self, tmp_path, server: ThrowawayMariaDB, sink_format: str):
        from airflow_provider_mysqlcdc.sinks.factory import open_sink
        from airflow_provider_mysqlcdc.state.registry import PipelineState
        from devtools.spark_submit import SparkSubmit

        self.tmp, self.lake = tmp_path, str(tmp_path / "lake")
        self.state = PipelineState(str(tmp_path / "state"))
        self.sink_format = sink_format
        self.sink = open_sink(SinkSpec(self.lake, sink_format))
        self.submit = SparkSubmit(master="local[1]", work_dir=tmp_path / "spark")
        self.point_at(server)

    def point_at(self, server: ThrowawayMariaDB) -> None:
        """What a user does after a failover: the connection now reaches the new primary."""
        self.server, self.source = server, server.root_config()
        self.source_file = self.source.to_private_file(self.tmp / "secrets" / "source.json")

    def schema(self, name: str):
        from airflow_provider_mysqlcdc.cdc.model.schema import TableId
        from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema

        with self.server.connect_root() as conn:
            return load_table_schema(conn, TableId("shop", name))

    def capture_directly(self, name: str) -> None:
        """Snapshot a table no stream writes yet into the sink and register it in a new generation."""
        from airflow_provider_mysqlcdc.cdc.model.split import SnapshotSplit
        from airflow_provider_mysqlcdc.cdc.reading.split_reader import SplitReader
        from airflow_provider_mysqlcdc.sinks.writer import SinkWriter
        from airflow_provider_mysqlcdc.state.registry import captured_tables

        schema = self.schema(name)
        with SplitReader(self.source, schema) as reader:
            result = reader.read(SnapshotSplit(schema.table_id, 0, "id"))
            self.sink.prepare(schema)
            SinkWriter(self.sink, schema, "id", reader.ordering("id")).write_split(result.finished, result.rows)
        tables = dict(self.state.latest().tables)
        tables.update(captured_tables([result.finished]))
        self.state.commit(tables)

    def stream(self) -> None:
        from airflow_provider_mysqlcdc.protocol.jobs import StreamJob

        job_file = self.tmp / "stream.json"
        job_file.write_text(StreamJob(state=self.state.location, sink=SinkSpec(self.lake, self.sink_format)).to_json())
        self.submit.run("binlog_stream.py", ["--job", str(job_file)], self.source_file)

    def sink_equals_source(self, name: str) -> bool:
        from devtools.verify import sink_rows, source_rows

        from .helpers import assert_same_rows

        schema = self.schema(name)
        assert_same_rows(schema.table_id, source_rows(self.source, schema),
                         sink_rows(self.lake, schema, sink_format=self.sink_format))
        return True


def _change(server: ThrowawayMariaDB, table: str, round_: int) -> None:
    """Updates, inserts and deletes, each its own transaction."""
    with server.connect_root() as conn, conn.cursor() as cur:
        for i in range(0, 100, 3):
            cur.execute(f"UPDATE shop.{table} SET v = %s WHERE id = %s", (round_, i))
        cur.execute(f"INSERT INTO shop.{table} VALUES (%s, %s)", (1000 + round_, round_))
        cur.execute(f"DELETE FROM shop.{table} WHERE id = %s", (round_ + 1,))


def test_the_stream_follows_a_failover_to_a_replica_with_nothing_lost_or_skipped(failover_pipeline):
    from airflow_provider_mysqlcdc.state.servers import ServerEpochs

    primary, replica, pipeline = failover_pipeline
    _change(primary, "t", 2)  # written on the primary, not streamed before the failover
    replica.wait_for(primary)
    primary.stop()
    replica.promote()
    pipeline.point_at(replica)
    pipeline.capture_directly("u")  # a table snapshotted on the new primary before the stream follows it
    _change(replica, "t", 3)  # at offsets whose file numbers lie below every offset read on the primary
    _change(replica, "u", 3)
    pipeline.stream()
    assert pipeline.sink_equals_source("t") and pipeline.sink_equals_source("u")
    history = ServerEpochs(pipeline.state).history()
    assert [(e.epoch, e.server_id) for e in history] == [(0, 1), (1, 2)]
    _change(replica, "t", 4)  # the batches after the one that crossed over
    _change(replica, "u", 4)
    pipeline.stream()
    assert pipeline.sink_equals_source("t") and pipeline.sink_equals_source("u")


def test_following_a_new_primary_that_lacks_what_the_stream_read_is_refused_and_not_recorded(servers, tmp_path):
    from airflow_provider_mysqlcdc.state.registry import PipelineState
    from airflow_provider_mysqlcdc.state.servers import ServerEpochs

    primary, replica = servers
    _write(primary, 1, 5)
    replica.wait_for(primary)
    with replica.connect_root() as conn, conn.cursor() as cur:
        cur.execute("STOP SLAVE")
    read_up_to = _write(primary, 100, 5)  # where a stream on the primary got to; the replica never receives it
    epochs = ServerEpochs(PipelineState(str(tmp_path / "state")))
    with primary.connect_root() as conn:
        assert epochs.follow(conn, read_up_to) == read_up_to  # the first server: epoch 0, as read
    replica.promote()
    with replica.connect_root() as conn, pytest.raises(SourceChangedError, match="lacks transactions 0-\\*-"):
        epochs.follow(conn, read_up_to)
    assert [(e.epoch, e.server_id) for e in epochs.history()] == [(0, 1)]
