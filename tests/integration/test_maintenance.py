"""Sink table maintenance (``MySqlCdcMaintenanceOperator``, run by ``dag.test()`` of the maintenance
example DAG) with a real stream: while a continuous stream applies a writer's changes batch after
batch, maintenance compacts, checkpoints and vacuums every Delta table (compacts and expires the
snapshots of every Iceberg table), done by the stream between two batches at the task's request;
without a stream, the task does it itself. Either way the tables stay exact, their file counts are
bounded, and time travel within the retention still works.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.protocol.envelope import decode
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.maintenance import MaintenanceReport
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.arrow_rows import arrow_to_rows
from airflow_provider_mysqlcdc.sinks.changelog import CHANGELOG_SUFFIX
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.iceberg.maintenance import expirable
from airflow_provider_mysqlcdc.state.lease import StreamLeases
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.dag_runner import example_dag_env, run_dag
from devtools.snapshot import snapshot_tables
from devtools.spark_submit import SparkSubmit
from devtools.verify import differences, read_delta, source_rows
from devtools.workload import SAMPLE_TABLES, create_sample_tables

from .helpers import assert_same_rows, delta_rows

pytestmark = pytest.mark.integration

DAG_ID = "mysqlcdc_maintenance_example"
RETENTION_S = 15.0


class Inserter:
    """Inserts a few new orders at a time, and now and then updates one: each stream batch then
    leaves a new small file in the table (a merge of new keys rewrites no file)."""

    def __init__(self, conn, table: TableId, first_id: int):
        self.conn, self.table, self.next_id = conn, table, first_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Inserter":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        rounds = 0
        while not self._stop.wait(0.05):
            with self.conn.cursor() as cur:
                ids = range(self.next_id, self.next_id + 3)
                cur.executemany(f"INSERT INTO {self.table.quoted} (id, customer, amount, status) VALUES "
                                "(%s, %s, %s, 'new')", [(i, f"c{i}", i % 1000) for i in ids])
                if rounds % 5 == 4:  # rewrites the file holding it: that file leaves the table
                    cur.execute(f"UPDATE {self.table.quoted} SET status = 'paid' WHERE id = %s", (self.next_id - 7,))
            self.next_id += 3
            rounds += 1


class VersionRecorder:
    """Reads every version of a Delta table as it appears (polled), keyed rows by version."""

    def __init__(self, uri: str, schema):
        self.uri, self.schema = uri, schema
        self.rows: dict[int, dict] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "VersionRecorder":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                version = DeltaTable(self.uri).version()
                if version not in self.rows:
                    rows = arrow_to_rows(read_delta(self.uri, version=version), self.schema)
                    self.rows[version] = {self.schema.key_of(r): r for r in rows}
            except Exception:  # noqa: BLE001 - a version vacuum removed meanwhile: not recorded
                continue


def _wait(condition, what: str, timeout_s: float = 180, proc=None, log: Path | None = None):
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the stream ended while waiting for {what}: {log.read_text()[-3000:] if log else ''}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory) -> Path:
    """One Airflow home for the module's DAG runs: its metadata database is migrated once."""
    return tmp_path_factory.mktemp("airflow")


def _maintain(airflow_home: Path, cdc_user, table: TableId, lake: Path, state_dir: Path,
              sink_format: str = "delta") -> MaintenanceReport:
    env = example_dag_env(airflow_home, cdc_user, [table], sink_root=lake, state_dir=state_dir,
                          split_rows=1000, chunk_rows=1000)
    env["MYSQLCDC_VACUUM_RETENTION_HOURS"] = str(RETENTION_S / 3600)
    env["MYSQLCDC_SINK_FORMAT"] = sink_format
    result = run_dag(DAG_ID, env, timeout_s=600)
    assert result["state"] == "success", result["output"][-4000:]
    return decode(MaintenanceReport, result["xcoms"]["maintain[-1]"], "the maintenance task's XCom")


def _expirable_now(table) -> list[int]:
    """The table's snapshots that stopped being current longer ago than the retention (and a second)."""
    return expirable([(e.snapshot_id, e.timestamp_ms) for e in table.metadata.snapshot_log],
                     [(s.snapshot_id, s.timestamp_ms) for s in table.snapshots()], table.current_snapshot().snapshot_id,
                     (time.time() - RETENTION_S - 1) * 1000)


def _first_removal(uri: str) -> float | None:
    """When the first commit that took a file out of the table landed (seconds), None before one: a
    data file removed and not added back (a copy-on-write merge's rewrite), or a file's deletion vector
    replaced by a newer one (a merge-on-read merge: the older vector file leaves)."""
    log = Path(uri) / "_delta_log"
    for version in range(DeltaTable(uri).version() + 1):
        actions = [json.loads(line) for line in (log / f"{version:020d}.json").read_text().splitlines() if line]
        added = {a["add"]["path"] for a in actions if "add" in a}
        if any("remove" in a and (a["remove"]["path"] not in added or a["remove"].get("deletionVector"))
               for a in actions):
            return next(a["commitInfo"]["timestamp"] for a in actions if "commitInfo" in a) / 1000
    return None


def _files(uri: str) -> int:
    return len(DeltaTable(uri).file_uris())


@contextlib.contextmanager
def _running_stream(tmp_path: Path, cdc_user, state: PipelineState, lake: Path, sink_format: str = "delta"):
    """A continuous stream of the pipeline, with its changelog, its own clustering off (every batch
    leaves its files, for maintenance to compact); stopped through its lease at the end, which it must
    end cleanly on."""
    job = StreamJob(state=state.location, sink=SinkSpec(str(lake), sink_format), mode="continuous", trigger_interval_s=0.3, changelog=True, cluster_after_files=0)
    (tmp_path / "stream.json").write_text(job.to_json())
    log = tmp_path / "stream.log"
    proc = SparkSubmit(master="local[2]", work_dir=tmp_path / "spark").start(
        "binlog_stream.py", ["--job", str(tmp_path / "stream.json")],
        cdc_user.to_private_file(tmp_path / "secrets" / "source.json"), log)
    try:
        yield proc, log
        assert proc.poll() is None, "a batch failed: " + log.read_text()[-3000:]  # none lost or failed either
    finally:
        lease = StreamLeases(state).current()
        if lease:
            StreamLeases(state).request_stop(lease.lease.number, "the test is done")
        proc.wait(120)
    assert proc.returncode == 0, log.read_text()[-3000:]


def test_maintenance_while_a_stream_runs_bounds_files_keeps_the_sink_exact_and_time_travel(
        mysql_server, cdc_user, database, tmp_path, airflow_home):
    conn = mysql_server.connect()
    [table] = create_sample_tables(conn, database, rows_per_table=500, seed=41, tables=SAMPLE_TABLES[:1])
    schema = load_table_schema(conn, table)
    lake, state_dir = tmp_path / "lake", tmp_path / "state"
    state = PipelineState(str(state_dir / "mysqlcdc_example"))
    snapshot_tables(cdc_user, [table], str(lake), state, split_rows=100)
    uri = open_sink(SinkSpec(str(lake))).table_uri(table)
    with _running_stream(tmp_path, cdc_user, state, lake) as (proc, log):
        with VersionRecorder(uri, schema) as recorder, Inserter(mysql_server.connect(), table, 100_000) as writer:
            # changes to two rows of one snapshot file, in two batches: the second one's merge takes out of
            # the table what the first one left of that file (copy-on-write: the file it rewrote; merge-on-
            # read: the file's first deletion vector), which the vacuum below must delete (inserts only add)
            with conn.cursor() as cur:
                cur.execute(f"SELECT id FROM {table.quoted} ORDER BY id LIMIT 2")
                first_ids = [row[0] for row in cur.fetchall()]
            for key in first_ids:
                with conn.cursor() as cur:
                    cur.execute(f"UPDATE {table.quoted} SET customer = 'rewritten' WHERE id = %s", (key,))
                _wait(lambda: delta_rows(lake, schema)[(key,)]["customer"] == "rewritten",  # noqa: B023
                      f"the update of row {key} in the sink", proc=proc, log=log)
            removed_at = _wait(lambda: _first_removal(uri), "a batch to take a file of the snapshot out", proc=proc,
                               log=log)
            # a batch may rewrite the file holding the newest keys instead of adding one: wait for the files
            before = _wait(lambda: (n := _files(uri)) >= 8 and n, "eight files or more", proc=proc, log=log)
            # that file must have left the table longer ago than the retention
            _wait(lambda: time.time() > removed_at + RETENTION_S + 1, "the rewritten file to age past the retention")
            report = _maintain(airflow_home, cdc_user, table, lake, state_dir)  # the writer and the stream go on
            after = DeltaTable(uri).version()
            _wait(lambda: DeltaTable(uri).version() > after + 2, "batches after maintenance", proc=proc, log=log)
            writer.stop()
        _wait(lambda: differences(source_rows(mysql_server.admin, schema), delta_rows(lake, schema)) is None,
              "the stream to apply every change", proc=proc, log=log)

    assert report.done_by.startswith("the stream ")  # between two of its batches, at the task's request
    mirror, changelog = report.tables
    assert (mirror.table, changelog.table) == (uri, uri + CHANGELOG_SUFFIX)
    assert mirror.files_before >= before >= 8 and mirror.files_after <= 2, mirror  # a file or so per batch, then one
    assert changelog.files_after < changelog.files_before, changelog
    assert mirror.checkpoint_version is not None and mirror.files_vacuumed > 0, mirror
    assert_same_rows(table, source_rows(mysql_server.admin, schema), delta_rows(lake, schema))

    # time travel: every version committed within the retention before the vacuum still reads as it
    # was; versions whose files left the table long before it were vacuumed
    history = {c["version"]: c for c in DeltaTable(uri).history()}
    vacuumed_at = min(c["timestamp"] for c in history.values() if c["operation"] == "VACUUM START") / 1000
    kept = [v for v in recorder.rows if history[v]["timestamp"] / 1000 > vacuumed_at - RETENTION_S + 1]
    gone = [v for v in recorder.rows if v + 1 in history and history[v + 1]["timestamp"] / 1000
            < vacuumed_at - RETENTION_S - 1]
    assert kept and gone, (kept, gone)
    for version in kept:
        rows = arrow_to_rows(read_delta(uri, version=version), schema)
        assert {schema.key_of(r): r for r in rows} == recorder.rows[version], version
    assert any(not _readable(uri, version) for version in gone), gone


def _readable(uri: str, version: int) -> bool:
    try:
        read_delta(uri, version=version)
    except Exception as exc:  # noqa: BLE001 - delta-rs names the missing data file
        assert "not found" in str(exc).lower() or "no such file" in str(exc).lower(), exc
        return False
    return True


def test_maintenance_without_a_stream_is_done_by_the_task(mysql_server, cdc_user, database, tmp_path, airflow_home):
    conn = mysql_server.connect()
    [table] = create_sample_tables(conn, database, rows_per_table=300, seed=43, tables=SAMPLE_TABLES[:1])
    schema = load_table_schema(conn, table)
    lake, state_dir = tmp_path / "lake", tmp_path / "state"
    state = PipelineState(str(state_dir / "mysqlcdc_example"))
    snapshot_tables(cdc_user, [table], str(lake), state, split_rows=30)  # ten files
    uri = open_sink(SinkSpec(str(lake))).table_uri(table)
    with conn.cursor() as cur:  # new keys, a transaction each: every batch's merge adds a file
        for i in range(40):
            cur.execute(f"INSERT INTO {table.quoted} (id, customer) VALUES (%s, 'new')", (200_000 + i,))
    job = StreamJob(state=state.location, sink=SinkSpec(str(lake)), max_batch_events=20, cluster_after_files=0)
    (tmp_path / "stream.json").write_text(job.to_json())
    SparkSubmit(master="local[1]", work_dir=tmp_path / "spark").run(
        "binlog_stream.py", ["--job", str(tmp_path / "stream.json")],
        cdc_user.to_private_file(tmp_path / "secrets" / "source.json"))
    before = _files(uri)

    report = _maintain(airflow_home, cdc_user, table, lake, state_dir)

    assert report.done_by == "this task"
    [mirror] = report.tables
    assert mirror.files_before == before > 10 and mirror.files_after == _files(uri) == 1, mirror
    assert_same_rows(table, source_rows(mysql_server.admin, schema), delta_rows(lake, schema))


def test_maintenance_of_an_iceberg_table_while_a_stream_runs_compacts_expires_snapshots_and_keeps_it_exact(
        mysql_server, cdc_user, database, tmp_path, airflow_home):
    conn = mysql_server.connect()
    [table] = create_sample_tables(conn, database, rows_per_table=500, seed=47, tables=SAMPLE_TABLES[:1])
    schema = load_table_schema(conn, table)
    lake, state_dir = tmp_path / "lake", tmp_path / "state"
    state = PipelineState(str(state_dir / "mysqlcdc_example"))
    snapshot_tables(cdc_user, [table], str(lake), state, split_rows=100, sink_format="iceberg")
    sink = open_sink(SinkSpec(str(lake), "iceberg"))

    def iceberg():
        return sink.open_table(table)  # type: ignore[attr-defined]

    with _running_stream(tmp_path, cdc_user, state, lake, "iceberg") as (proc, log):
        with Inserter(mysql_server.connect(), table, 100_000) as writer:
            before = _wait(lambda: (n := iceberg().inspect.data_files().num_rows) >= 8 and n, "eight files or more",
                           proc=proc, log=log)
            # snapshots that stopped being current longer ago than the retention (expirable's rule), which
            # the maintenance started after this must expire: the first ones, once they age
            old = _wait(lambda: set(_expirable_now(iceberg())), "snapshots replaced longer ago than the retention",
                        proc=proc, log=log)
            report = _maintain(airflow_home, cdc_user, table, lake, state_dir, sink_format="iceberg")
            after = len(iceberg().snapshots())
            _wait(lambda: len(iceberg().snapshots()) > after + 2, "batches after maintenance", proc=proc, log=log)
            writer.stop()
        _wait(lambda: differences(source_rows(mysql_server.admin, schema),
                                  delta_rows(lake, schema, sink_format="iceberg")) is None,
              "the stream to apply every change", proc=proc, log=log)

    assert report.done_by.startswith("the stream ")
    mirror, changelog = report.tables
    assert (mirror.table, changelog.table) == (sink.table_uri(table), sink.table_uri(table) + CHANGELOG_SUFFIX)
    assert mirror.files_before >= before >= 8 and mirror.files_after <= 2, mirror
    assert changelog.files_after < changelog.files_before, changelog  # its small files bin-packed
    # every insert in the changelog once, through the bin-packing that ran between the stream's appends
    logged = sink.read(TableId(table.database, table.table + CHANGELOG_SUFFIX)).to_pylist()
    assert sorted(json.loads(r["after"])["id"] for r in logged if r["op"] == "c") == list(range(100_000, writer.next_id))
    # the snapshots older than the retention were expired; those left can still be read (time travel)
    kept = iceberg().snapshots()
    assert old and not old & {s.snapshot_id for s in kept}, old
    for snapshot in kept[:3] + kept[-3:]:
        assert iceberg().scan(snapshot_id=snapshot.snapshot_id).to_arrow() is not None
    assert_same_rows(table, source_rows(mysql_server.admin, schema), delta_rows(lake, schema, sink_format="iceberg"))
