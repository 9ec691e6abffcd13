"""The stream job under spark-submit: exactly once into Delta, across kill -9 and restarts.

The snapshot is taken in-process (the chunk job has its own test) and registered as the pipeline's
first generation. Then the stream runs in continuous mode while writers run, is killed with SIGKILL at
random moments (twice) and restarted from its checkpoint; finally an available-now run catches up. The
Delta tables must equal the source, and no table may have committed the same batch twice.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.binlog.framing import FRAMING_VARIABLE
from airflow_provider_mysqlcdc.cdc.binlog.row_decoder import DECODER_VARIABLE
from airflow_provider_mysqlcdc.cdc.errors import SparkJobFailed
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.planning.splitter import SplitOptions, TableSplitter
from airflow_provider_mysqlcdc.cdc.reading.split_reader import SplitReader
from airflow_provider_mysqlcdc.cdc.source.preflight import run_preflight
from airflow_provider_mysqlcdc.protocol.jobs import STREAM_ENGINES, StreamJob
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, stream_only_split
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.changelog import CHANGELOG_SUFFIX
from airflow_provider_mysqlcdc.sinks.clustering import clustering_plan
from airflow_provider_mysqlcdc.sinks.delta.clustering import CLUSTERING_COMMIT, held_files
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter
from airflow_provider_mysqlcdc.state.drift import read_drift
from airflow_provider_mysqlcdc.state.lease import StreamLeases
from airflow_provider_mysqlcdc.state.registry import PipelineState, captured_tables
from devtools.spark_submit import SparkSubmit
from devtools.verify import read_delta, source_rows
from devtools.workload import SAMPLE_TABLES, RandomWriters, create_sample_tables

from .helpers import assert_same_rows, delta_rows

pytestmark = pytest.mark.integration

TABLES = SAMPLE_TABLES[:3]


def _snapshot(cdc_user, report, lake: str, state: Path, split_rows: int = 400) -> PipelineState:
    sink = open_sink(SinkSpec(lake))
    finished = []
    for table_id, schema in report.schemas.items():
        sink.prepare(schema)
        splits = TableSplitter(cdc_user.connect(), schema, SplitOptions(split_rows=split_rows)).split()
        with SplitReader(cdc_user, schema) as reader:
            writer = SinkWriter(sink, schema, report.chunk_keys[table_id], reader.ordering(report.chunk_keys[table_id]))
            for split in splits:
                result = reader.read(split)
                writer.write_split(result.finished, result.rows)
                finished.append(result.finished)
    registry = PipelineState(str(state))
    registry.commit(captured_tables(finished))
    return registry


def _committed_batches(lake: Path) -> dict[str, list[tuple[str, int]]]:
    """Per table, the stream batches its Delta log recorded (each stream's app id and batch version),
    in commit order."""
    versions: dict[str, list[tuple[str, int]]] = {}
    for log_dir in lake.glob("*/*/_delta_log"):
        for commit in sorted(log_dir.glob("*.json")):
            for line in commit.read_text().splitlines():
                action = json.loads(line)
                if "txn" in action and action["txn"]["appId"].startswith("mysqlcdc-"):  # the stream's own
                    versions.setdefault(log_dir.parent.name, []).append((action["txn"]["appId"],
                                                                          action["txn"]["version"]))
    return versions


def _assert_sink_equals_source(mysql_server, report, lake: str) -> None:
    for table_id, schema in report.schemas.items():
        assert_same_rows(table_id, source_rows(mysql_server.admin, schema), delta_rows(lake, schema))


def _killed_at_random(proc, lake: str, log_file: Path, rng: random.Random, committed_before: int) -> None:
    """Kill -9 the running stream ``proc`` somewhere in its micro-batches, once it committed a batch
    more than ``committed_before`` (waits on progress, not on a guess)."""
    deadline = time.monotonic() + 180
    while sum(map(len, _committed_batches(Path(lake)).values())) <= committed_before:
        assert proc.poll() is None and time.monotonic() < deadline, log_file.read_text()[-3000:]
        time.sleep(0.5)
    time.sleep(rng.uniform(1, 8))
    assert proc.poll() is None, log_file.read_text()[-3000:]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_stream_survives_kill_9_on_either_engine_and_stays_exact_and_refuses_a_second_stream(
        mysql_server, cdc_user, database, tmp_path):
    """A Structured Streaming stream is killed -9, a driver-loop stream takes over from it and is killed
    -9 too, and an available-now Structured Streaming run catches up: each engine resumes from the
    other's crash, and every change is in the sink (and its changelog) exactly once."""
    rng = random.Random(17)
    conn = mysql_server.connect()
    tables = create_sample_tables(conn, database, rows_per_table=1000, seed=17, tables=TABLES)
    lake = str(tmp_path / "lake")
    source_file = cdc_user.to_private_file(tmp_path / "secrets" / "source.json")
    submit = SparkSubmit(master="local[2]", work_dir=tmp_path / "spark")
    report = run_preflight(cdc_user, tables)

    with RandomWriters(mysql_server.admin, database, writers=2, seed=170, pause_s=0.01, tables=TABLES) as writers:
        _snapshot(cdc_user, report, lake, tmp_path / "state")
        job = StreamJob(state=str(tmp_path / "state"), sink=SinkSpec(lake), mode="continuous", trigger_interval_s=0.5,
                        changelog=True)
        for index, engine in enumerate(STREAM_ENGINES):
            job.stream_engine = engine
            (tmp_path / "stream.json").write_text(job.to_json())
            log_file = tmp_path / f"stream-{engine}.log"
            committed = sum(map(len, _committed_batches(Path(lake)).values()))
            proc = submit.start("binlog_stream.py", ["--job", str(tmp_path / "stream.json")], source_file, log_file)
            if index == 0:  # a second stream on the same pipeline refuses to start, naming the running one
                deadline = time.monotonic() + 180
                while not any(_committed_batches(Path(lake)).values()):
                    assert proc.poll() is None and time.monotonic() < deadline, log_file.read_text()[-3000:]
                    time.sleep(0.5)
                running = StreamLeases(PipelineState(job.state)).current()
                assert running and running.live and running.heartbeat.app_id, running
                with pytest.raises(SparkJobFailed, match=f"StreamAlreadyRunning.*{running.heartbeat.app_id}"):
                    submit.run("binlog_stream.py", ["--job", str(tmp_path / "stream.json")], source_file)
            _killed_at_random(proc, lake, log_file, rng, committed)
        stats = writers.stop()

    # the killed stream's lease is taken over at once: its driver's process is gone
    job.mode, job.stream_engine = "available-now", STREAM_ENGINES[0]
    (tmp_path / "stream.json").write_text(job.to_json())
    result = submit.run("binlog_stream.py", ["--job", str(tmp_path / "stream.json")], source_file)
    assert result["mode"] == "available-now"
    assert StreamLeases(PipelineState(job.state)).current().released

    _assert_sink_equals_source(mysql_server, report, lake)
    committed = _committed_batches(Path(lake))
    assert len({app for batches in committed.values() for app, _ in batches}) >= 2  # both engines' streams
    for table, batches in committed.items():
        for app in {app for app, _ in batches}:
            versions = [v for a, v in batches if a == app]
            assert versions == sorted(set(versions)), f"{table}: a batch of {app} was committed twice: {versions}"
    sink = open_sink(SinkSpec(lake))
    for table_id in report.schemas:
        changelog = read_delta(sink.table_uri(table_id) + CHANGELOG_SUFFIX).to_pylist()
        coordinates = [(c["version"], c["row_in_event"], c["part"]) for c in changelog]
        assert len(coordinates) == len(set(coordinates)), f"{table_id}: a change is in the changelog twice"
        assert {c["op"] for c in changelog} == {"c", "u", "d"}
    print(f"\n{stats.transactions} transactions while streaming, {len(STREAM_ENGINES)} kill -9, "
          f"batches per table {[len(v) for v in _committed_batches(Path(lake)).values()]}")


def test_added_columns_evolve_delta_and_a_dropped_one_is_drift(mysql_server, cdc_user, database, tmp_path):
    from airflow_provider_mysqlcdc.cdc.model.schema import TableId
    from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema

    conn = mysql_server.connect()
    tables = create_sample_tables(conn, database, rows_per_table=200, seed=3, tables=TABLES[:1])
    table = TableId(database, TABLES[0].name)
    lake = str(tmp_path / "lake")
    source_file = cdc_user.to_private_file(tmp_path / "secrets" / "source.json")
    submit = SparkSubmit(master="local[1]", work_dir=tmp_path / "spark")
    report = run_preflight(cdc_user, tables)
    _snapshot(cdc_user, report, lake, tmp_path / "state")
    job = StreamJob(state=str(tmp_path / "state"), sink=SinkSpec(lake))
    (tmp_path / "stream.json").write_text(job.to_json())
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {table.quoted} SET customer = 'before' WHERE id % 7 = 0")
        cur.execute(f"ALTER TABLE {table.quoted} ADD COLUMN region VARCHAR(20) NULL, ADD COLUMN score BIGINT DEFAULT 5")
        cur.execute(f"UPDATE {table.quoted} SET region = 'emea', score = id * 1000000000 WHERE id % 3 = 0")
        cur.execute(f"INSERT INTO {table.quoted} (id, customer, region) VALUES (100000, 'new', 'apac')")
    submit.run("binlog_stream.py", ["--job", str(tmp_path / "stream.json")], source_file)
    schema = load_table_schema(conn, table)
    assert {"region", "score"} <= set(open_sink(SinkSpec(lake)).read(table).column_names)
    # rows untouched since the ALTER got score's DEFAULT in Delta too (region has none: NULL is right)
    assert_same_rows(table, source_rows(mysql_server.admin, schema), delta_rows(lake, schema))
    assert table not in read_drift(PipelineState(str(tmp_path / "state")))

    # A dropped column is schema drift: the stream goes on and records the table for a re-snapshot.
    # (TRUNCATE: test_stream_table_ddl.py; a type Delta cannot take: test_key_and_type_ddl.py.)
    with conn.cursor() as cur:
        cur.execute(f"ALTER TABLE {table.quoted} DROP COLUMN region")
        cur.execute(f"UPDATE {table.quoted} SET customer = 'after drop' WHERE id = 100000")
    submit.run("binlog_stream.py", ["--job", str(tmp_path / "stream.json")], source_file)
    drift = read_drift(PipelineState(str(tmp_path / "state")))
    assert any("region" in e.reason for e in drift[table]), drift
    assert delta_rows(lake, load_table_schema(conn, table))[(100000,)]["customer"] == "after drop"


def test_the_stream_clusters_the_files_its_merges_leave_and_stays_exact(mysql_server, cdc_user, database, tmp_path):
    """Batches of random changes over tables of several key types, each snapshotted into several
    files: between two batches the stream rewrites in key order the files its merges left (here once
    two need it), and the tables still equal the source, with none left to rewrite at the end."""
    conn = mysql_server.connect()
    tables = create_sample_tables(conn, database, rows_per_table=2000, seed=23, tables=TABLES)
    lake, state_dir = str(tmp_path / "lake"), tmp_path / "state"
    report = run_preflight(cdc_user, tables)
    _snapshot(cdc_user, report, lake, state_dir, split_rows=100)  # about 20 files a table
    RandomWriters(mysql_server.admin, database, tables=TABLES).write(300, seed=4)
    job = StreamJob(state=str(state_dir), sink=SinkSpec(lake), max_batch_events=60, cluster_after_files=2)
    (tmp_path / "stream.json").write_text(job.to_json())
    source_file = cdc_user.to_private_file(tmp_path / "secrets" / "source.json")
    SparkSubmit(master="local[1]", work_dir=tmp_path / "spark").run(
        "binlog_stream.py", ["--job", str(tmp_path / "stream.json")], source_file)

    _assert_sink_equals_source(mysql_server, report, lake)
    sink = open_sink(SinkSpec(lake))
    for table_id in report.schemas:
        table = DeltaTable(sink.table_uri(table_id))
        clusterings = [c for c in table.history() if CLUSTERING_COMMIT in c]
        plan, _ = clustering_plan(held_files(table, sink.table_uri(table_id)))
        assert clusterings and sum(len(group) for group in plan) < 2, (table_id, len(clusterings), plan)


def test_the_stream_is_exact_with_the_pure_python_row_decoder_and_the_library_framing(
        mysql_server, cdc_user, database, tmp_path, monkeypatch):
    """Where the compiled row decoder is not installed its Python twin decodes, and where our own
    framing cannot read python-mysql-replication's frames the binlog: the same random changes stream
    into the same exact tables (the suite's other streams use the compiled decoder and our framing;
    test_row_decoders.py holds every decoder to one result on both framings)."""
    monkeypatch.setenv(DECODER_VARIABLE, "python")
    monkeypatch.setenv(FRAMING_VARIABLE, "library")
    conn = mysql_server.connect()
    tables = create_sample_tables(conn, database, rows_per_table=500, seed=29, tables=TABLES)
    lake, state_dir = str(tmp_path / "lake"), tmp_path / "state"
    report = run_preflight(cdc_user, tables)
    _snapshot(cdc_user, report, lake, state_dir)
    RandomWriters(mysql_server.admin, database, tables=TABLES).write(300, seed=5)
    (tmp_path / "stream.json").write_text(StreamJob(state=str(state_dir), sink=SinkSpec(lake), max_batch_events=200).to_json())
    source_file = cdc_user.to_private_file(tmp_path / "secrets" / "source.json")
    submit = SparkSubmit(master="local[2]", work_dir=tmp_path / "spark")
    submit.run("binlog_stream.py", ["--job", str(tmp_path / "stream.json")], source_file)

    assert "binlog rows decoded by the python decoder" in submit.last_log
    assert "events framed by python-mysql-replication" in submit.last_log
    _assert_sink_equals_source(mysql_server, report, lake)


def test_stream_only_table_starts_at_its_offset_with_state_at_a_url(mysql_server, cdc_user, database, tmp_path):
    """Startup mode latest/offset: no snapshot; exactly the changes after the offset reach the sink.
    The state location is a ``file://`` URL, the form object storage takes (fsspec)."""
    from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
    from airflow_provider_mysqlcdc.cdc.source.server import current_offset

    conn = mysql_server.connect()
    table = create_sample_tables(conn, database, rows_per_table=300, seed=5, tables=TABLES[:1])[0]
    schema = load_table_schema(conn, table)
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {table.quoted} SET customer = 'before the offset' WHERE id % 5 = 0")
    start = current_offset(conn)
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {table.quoted} SET customer = 'after' WHERE id % 7 = 0")
        cur.execute(f"DELETE FROM {table.quoted} WHERE id % 11 = 0")
        cur.execute(f"INSERT INTO {table.quoted} (id, customer) VALUES (90000, 'new')")
    head = current_offset(conn)
    state = "file://" + str(tmp_path / "state")
    PipelineState(state).commit({table: CapturedTable("id", [stream_only_split(table, "id", start)])})
    job = StreamJob(state=state, sink=SinkSpec(str(tmp_path / "lake")), stream_engine="structured-streaming")  # its Spark checkpoint is checked
    (tmp_path / "stream.json").write_text(job.to_json())
    source_file = cdc_user.to_private_file(tmp_path / "secrets" / "source.json")
    SparkSubmit(master="local[1]", work_dir=tmp_path / "spark").run(
        "binlog_stream.py", ["--job", str(tmp_path / "stream.json")], source_file)

    source = source_rows(mysql_server.admin, schema)
    expected = {k: row for k, row in source.items() if (k[0] % 7 == 0) or k[0] == 90000}
    assert expected and all(k[0] % 11 for k in expected)
    assert_same_rows(table, expected, delta_rows(tmp_path / "lake", schema))
    assert (tmp_path / "state" / "checkpoint").is_dir() and (tmp_path / "state" / "progress" / "stream.json").exists()
    processed = json.loads((tmp_path / "state" / "progress" / "stream-offset.json").read_text())["offset"]
    processed_at = BinlogOffset(processed["file"], int(processed["pos"]))
    assert processed["gen"] == 1 and processed_at >= head, (processed, head)


def test_each_batch_logs_how_its_decoding_tasks_spent_its_reading(mysql_server, cdc_user, database, tmp_path):
    """A batch's log line says when its pieces of the binlog range began on the executors, their
    set-up, their reading and the changes they sent: what tells Spark's part of the reading apart from
    the pieces' own (bin/bench's mixed workload reads it)."""
    from airflow_provider_mysqlcdc.cdc.source.server import current_offset

    conn = mysql_server.connect()
    table = create_sample_tables(conn, database, rows_per_table=50, seed=7, tables=TABLES[:1])[0]
    PipelineState(str(tmp_path / "state")).commit(
        {table: CapturedTable("id", [stream_only_split(table, "id", current_offset(conn))])})
    with conn.cursor() as cur:
        changed = cur.execute(f"UPDATE {table.quoted} SET customer = 'read' WHERE id % 2 = 0")
    conn.commit()
    (tmp_path / "stream.json").write_text(StreamJob(state=str(tmp_path / "state"), sink=SinkSpec(str(tmp_path / "lake"))).to_json())
    submit = SparkSubmit(master="local[1]", work_dir=tmp_path / "spark")
    result = submit.run("binlog_stream.py", ["--job", str(tmp_path / "stream.json")],
                        cdc_user.to_private_file(tmp_path / "secrets" / "source.json"))

    batch = re.search(rf"stream batch 0: {changed} changes applied in .*; reading: 1 piece\(s\) began [\d.]+s into the "
                      rf"batch, set up in [\d.]+s, read in [\d.]+s, ended [\d.]+s into it \({changed} changes\)",
                      submit.last_log)
    assert changed and result["changes_applied"] == changed and batch, submit.last_log[-3000:]


def test_an_older_checkpoint_put_back_resumes_exactly_from_the_sink(mysql_server, cdc_user, database, tmp_path):
    """An older copy of a checkpoint plans batches the sink has partly seen, cut differently, under
    batch ids the same checkpoint already used. Each table records the position of its last change,
    so the stream applies exactly what the sink lacks. (A deleted checkpoint, whose batch ids start
    again: the torture run's checkpoint reset, every seed.)"""
    import shutil

    conn = mysql_server.connect()
    tables = create_sample_tables(conn, database, rows_per_table=300, seed=11, tables=TABLES[:2])
    writers = RandomWriters(mysql_server.admin, database, tables=TABLES[:2])
    lake, state_dir = str(tmp_path / "lake"), tmp_path / "state"
    report = run_preflight(cdc_user, tables)
    _snapshot(cdc_user, report, lake, state_dir)
    job = StreamJob(state=str(state_dir), sink=SinkSpec(lake), stream_engine="structured-streaming")  # a Spark checkpoint put back
    (tmp_path / "stream.json").write_text(job.to_json())
    source_file = cdc_user.to_private_file(tmp_path / "secrets" / "source.json")
    submit = SparkSubmit(master="local[1]", work_dir=tmp_path / "spark")

    def stream() -> None:
        submit.run("binlog_stream.py", ["--job", str(tmp_path / "stream.json")], source_file)

    writers.write(80, seed=1)
    stream()
    older = shutil.copytree(state_dir / "checkpoint", tmp_path / "older-checkpoint")
    writers.write(80, seed=2)
    stream()  # the same checkpoint's batch 1: seed 2
    writers.write(80, seed=3)
    shutil.rmtree(state_dir / "checkpoint")
    shutil.copytree(older, state_dir / "checkpoint")  # an older copy put back: its batch 1 reads seeds 2-3
    stream()
    _assert_sink_equals_source(mysql_server, report, lake)


@pytest.mark.parametrize("mode", ["available-now", "continuous"])
def test_a_stream_on_the_driver_engine_whose_spark_context_cannot_start_fails_naming_why(
        mysql_server, cdc_user, database, tmp_path, mode):
    """The driver engine's batches run while its SparkContext starts (spark/starting.py): a context
    that cannot start (here a listener class that does not exist) still fails the program with the
    context's own error, a continuous stream too, instead of the stream running on without its Spark
    application."""
    conn = mysql_server.connect()
    tables = create_sample_tables(conn, database, rows_per_table=50, seed=5, tables=TABLES[:1])
    lake, state_dir = str(tmp_path / "lake"), tmp_path / "state"
    _snapshot(cdc_user, run_preflight(cdc_user, tables), lake, state_dir)
    (tmp_path / "stream.json").write_text(StreamJob(state=str(state_dir), sink=SinkSpec(lake), mode=mode,
                                                    stream_engine="driver").to_json())
    submit = SparkSubmit(master="local[1]", work_dir=tmp_path / "spark",
                         conf={"spark.extraListeners": "org.example.NoSuchListener"})
    with pytest.raises(SparkJobFailed, match="NoSuchListener") as failed:
        submit.run("binlog_stream.py", ["--job", str(tmp_path / "stream.json")],
                   cdc_user.to_private_file(tmp_path / "secrets" / "source.json"), timeout_s=300)
    assert "killed after" not in str(failed.value)  # it ended by itself
    assert StreamLeases(PipelineState(str(state_dir))).current().released  # it let its lease go
