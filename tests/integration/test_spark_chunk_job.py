"""The chunk job under spark-submit (local mode): parallel partitions per split, Delta output, retries.

Writers run throughout. Every table's splits are read by spark-submit of spark_jobs/snapshot_chunk.py
(several partitions per split), some splits a second time; then the filtered binlog is merged into
the Delta tables, which must equal the source exactly. The partitions' executors write the data
files; the driver rewrites those the split's window touches.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.cdc.binlog.split_filter import FinishedSplitFilter
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
from airflow_provider_mysqlcdc.cdc.planning.splitter import SplitOptions, TableSplitter
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.cdc.source.preflight import run_preflight
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.protocol.jobs import ChunkJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_change_batch
from devtools.spark_submit import SparkSubmit
from devtools.verify import source_rows
from devtools.workload import SAMPLE_TABLES, RandomWriters, create_sample_tables

from .helpers import assert_same_rows, delta_rows

pytestmark = pytest.mark.integration

# an integer key and a string key under a case-insensitive collation (composite keys: the lifecycle
# test's chunk tasks, test_airflow_dag.py)
CHUNKED = (SAMPLE_TABLES[0], SAMPLE_TABLES[2])


def test_chunk_job_snapshot_then_binlog_equals_source(mysql_server, cdc_user, database, tmp_path):
    rng = random.Random(5)
    conn = mysql_server.connect()
    tables = create_sample_tables(conn, database, rows_per_table=3000, seed=5, tables=CHUNKED)
    lake = str(tmp_path / "lake")
    source_file = cdc_user.to_private_file(tmp_path / "secrets" / "source.json")
    submit = SparkSubmit(master="local[2]", work_dir=tmp_path / "spark")
    finished: list[FinishedSplit] = []
    with RandomWriters(mysql_server.admin, database, writers=2, seed=50, pause_s=0.002, tables=CHUNKED) as writers:
        report = run_preflight(cdc_user, tables)
        jobs = []
        for table_id, schema in report.schemas.items():
            splits = TableSplitter(cdc_user.connect(), schema, SplitOptions(split_rows=700)).split()
            retried = rng.sample(splits, 1)  # one split per table is read twice
            jobs.append(ChunkJob(table=f"`{table_id.database}`.`{table_id.table}`", splits=splits + retried, sink=SinkSpec(lake), partitions_per_split=3))
        results = []
        for number, job in enumerate(jobs):
            job_file = tmp_path / f"job{number}.json"
            job_file.write_text(job.to_json())
            results.append(submit.run("snapshot_chunk.py", ["--job", str(job_file)], source_file))
        writers.stop()
    end = current_offset(conn)

    merged = 0
    for result in results:
        assert result["rows"] > 0 and result["seconds"] > 0
        merged += result["binlog_events_merged"]
        latest = {}
        for data in result["finished_splits"]:
            f = FinishedSplit.from_dict(data)
            assert f.partitions >= 2 or f.rows < 10
            latest[f.split.index] = f  # a retried split's later result wins
        finished += latest.values()

    _stream(cdc_user, report, finished, lake, end)
    assert merged > 0  # some window changes touched partitions, whose files the driver wrote again
    for table_id, schema in report.schemas.items():
        delta = delta_rows(lake, schema)
        assert_same_rows(table_id, source_rows(mysql_server.admin, schema), delta)


def _stream(cdc_user, report, finished: list[FinishedSplit], lake: str, end) -> list[ChangeRecord]:
    """Apply the binlog up to ``end`` as the stream does (the finished-split rule, merges by key and
    version); the changes applied."""
    sink = open_sink(SinkSpec(lake))
    writers_by_table = {}
    for table_id, schema in report.schemas.items():
        chunk_key = report.chunk_keys[table_id]
        writers_by_table[table_id] = SinkWriter(sink, schema, chunk_key, KeyOrdering(schema.column(chunk_key), cdc_user.connect))
    split_filter = FinishedSplitFilter(finished, {t: w.ordering for t, w in writers_by_table.items()})
    reader = BinlogReader.for_schemas(cdc_user, list(report.schemas.values()), start=split_filter.start_offset(), end=end)
    records = [r for r in reader if isinstance(r, ChangeRecord)]
    emitted = [r for r, keep in zip(records, split_filter.filter(records)) if keep]
    for batch_id, start in enumerate(range(0, len(emitted), 500)):
        apply_change_batch(writers_by_table, emitted[start:start + 500], app_id="t", batch_id=batch_id)
    return emitted


def test_an_at_least_once_chunk_job_reads_no_window_and_the_stream_from_its_low_watermarks_converges(
        mysql_server, cdc_user, database, tmp_path):
    """Flink CDC's backfill skip: each split is positioned at its low watermark with no binlog read;
    the stream applies every change of the split after it, some of which its rows already hold, and
    the mirror still ends equal to the source."""
    conn = mysql_server.connect()
    tables = create_sample_tables(conn, database, rows_per_table=3000, seed=6, tables=CHUNKED[:1])
    lake = str(tmp_path / "lake")
    submit = SparkSubmit(master="local[2]", work_dir=tmp_path / "spark")
    with RandomWriters(mysql_server.admin, database, writers=2, seed=51, pause_s=0.002, tables=CHUNKED[:1]) as writers:
        report = run_preflight(cdc_user, tables)
        [(table_id, schema)] = report.schemas.items()
        splits = TableSplitter(cdc_user.connect(), schema, SplitOptions(split_rows=700)).split()
        job = ChunkJob(table=table_id.quoted, splits=splits, sink=SinkSpec(lake), partitions_per_split=3, snapshot_consistency="at-least-once")
        (tmp_path / "job.json").write_text(job.to_json())
        result = submit.run("snapshot_chunk.py", ["--job", str(tmp_path / "job.json")],
                            cdc_user.to_private_file(tmp_path / "secrets" / "source.json"))
        read_until = current_offset(conn)  # every split's SELECT ran before this
        writers.stop()
    end = current_offset(conn)
    finished = [FinishedSplit.from_dict(data) for data in result["finished_splits"]]
    assert len(finished) == len(splits) and result["binlog_events_merged"] == 0
    assert all(f.high_watermark == f.low_watermark for f in finished), finished  # no window was read
    assert "at least once, the stream applies its changes after its low watermark" in submit.last_log

    applied = _stream(cdc_user, report, finished, lake, end)
    # the writers changed the splits while they were read: the stream applied those changes again
    assert any(r.offset <= read_until for r in applied), "no change while the splits were read: nothing proven"
    assert_same_rows(table_id, source_rows(mysql_server.admin, schema), delta_rows(lake, schema))


def test_the_executors_write_a_quiet_splits_data_files_and_one_commit_adds_them(mysql_server, cdc_user,
                                                                                 database, tmp_path):
    """No row of a split no change touched passes through the driver: each partition's file, named
    by the executor that wrote it, is what the split's commit adds."""
    [table] = create_sample_tables(mysql_server.connect(), database, rows_per_table=900, seed=6, tables=CHUNKED[:1])
    schema = run_preflight(cdc_user, [table]).schemas[table]
    splits = TableSplitter(cdc_user.connect(), schema, SplitOptions(split_rows=450)).split()
    lake = str(tmp_path / "lake")
    (tmp_path / "job.json").write_text(ChunkJob(table=str(table), splits=splits, sink=SinkSpec(lake), partitions_per_split=3).to_json())
    result = SparkSubmit(master="local[2]", work_dir=tmp_path / "spark").run(
        "snapshot_chunk.py", ["--job", str(tmp_path / "job.json")], cdc_user.to_private_file(tmp_path / "secrets" / "s.json"))
    uri = open_sink(SinkSpec(lake)).table_uri(table)
    history = DeltaTable(uri).history()
    commits = [h for h in history if h["operation"] == "WRITE"]
    assert len(commits) == len(splits) and result["binlog_events_merged"] == 0
    files = pa.table(DeltaTable(uri).get_add_actions(flatten=True)).column("path").to_pylist()
    partitions = [(f["split"]["index"], f["partitions"]) for f in result["finished_splits"]]
    assert sorted(name.rsplit("-", 1)[0] for name in files) == sorted(
        f"chunk-{split}-{part}" for split, count in partitions for part in range(count))
    assert_same_rows(table, source_rows(mysql_server.admin, schema), delta_rows(lake, schema))
