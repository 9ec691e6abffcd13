"""Binlog purged under the stream, on a MariaDB of the test's own (PURGE BINARY LOGS).

By default the stream stops with an error naming the missing file and offset and the way out. With
``on_binlog_purged="resnapshot"`` it goes on: exactly the tables that needed the purged binlog are
recorded (and frozen), whether the gap is at the start of a micro-batch or in the re-read of a
table being added, and the next run re-snapshots them; afterwards the sink equals the source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from airflow_provider_mysqlcdc.cdc.errors import SparkJobFailed
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.reading.split_reader import SplitReader
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.planning.changes import decide_action
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter
from airflow_provider_mysqlcdc.state.drift import pending_drift, read_drift
from airflow_provider_mysqlcdc.state.registry import PipelineState, captured_tables
from devtools.snapshot import stage_whole_table
from devtools.spark_submit import SparkSubmit
from devtools.throwaway_server import ThrowawayMariaDB
from devtools.verify import Rows, source_rows

from .helpers import assert_same_rows, delta_rows

pytestmark = pytest.mark.integration


@dataclass
class PurgeHistory:
    default_error: str = ""
    purged_file: str = ""
    sink: dict[str, dict[str, Rows]] = field(default_factory=dict)  # by moment, by table
    source: dict[str, dict[str, Rows]] = field(default_factory=dict)
    snapshot_of_a: Rows = field(default_factory=dict)
    drift_kinds: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    decisions: dict[str, dict[str, str]] = field(default_factory=dict)


def _read(source, schema: TableSchema) -> tuple[FinishedSplit, list[dict]]:
    with SplitReader(source, schema) as reader:
        result = reader.read(SnapshotSplit(schema.table_id, 0, "id"))
    return result.finished, result.rows


@pytest.fixture(scope="module")
def purge(tmp_path_factory) -> PurgeHistory:
    tmp = tmp_path_factory.mktemp("purge")
    server = ThrowawayMariaDB(base_dir=tmp / "mariadb").start()
    try:
        yield _run_history(server, tmp)
    finally:
        server.stop()


def _run_history(server: ThrowawayMariaDB, tmp) -> PurgeHistory:
    h = PurgeHistory()
    source = server.root_config()
    conn = server.connect_root()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE purging")
        for name in "abc":
            cur.execute(f"CREATE TABLE purging.{name} (id INT PRIMARY KEY, v VARCHAR(30))")
            cur.executemany(f"INSERT INTO purging.{name} VALUES (%s, 'initial')", [(i,) for i in range(50)])
    schemas = {n: load_table_schema(conn, TableId("purging", n)) for n in "abc"}
    lake, state = str(tmp / "lake"), PipelineState(str(tmp / "state"))
    sink = open_sink(SinkSpec(lake))

    def direct(name: str) -> FinishedSplit:
        finished, rows = _read(source, schemas[name])
        sink.prepare(schemas[name])
        with SplitReader(source, schemas[name]) as reader:
            SinkWriter(sink, schemas[name], "id", reader.ordering("id")).write_split(finished, rows)
        return finished

    def write(label: str) -> None:
        with conn.cursor() as cur:
            for name in "abc":
                cur.execute(f"UPDATE purging.{name} SET v = %s WHERE id %% 4 = 0", (label,))
                cur.execute(f"INSERT INTO purging.{name} VALUES (%s, %s)", (1000 + len(label), label))
                cur.execute(f"DELETE FROM purging.{name} WHERE id = %s", (len(label),))

    def observe(moment: str) -> None:
        h.sink[moment] = {n: delta_rows(lake, s) for n, s in schemas.items() if n in "ab" or moment == "end"}
        h.source[moment] = {n: source_rows(source, s) for n, s in schemas.items()}
        drift = read_drift(state)
        h.drift_kinds[moment] = {t.table: [e.kind.value for e in events] for t, events in drift.items()}

    a = direct("a")
    h.snapshot_of_a = source_rows(source, schemas["a"])
    c = direct("c")  # read now, registered only once the stream is past the purge
    write("lost")  # in the binlog that is purged next: only a and c needed it
    h.purged_file = server.purge_binlogs()
    b = direct("b")
    state.commit(captured_tables([a, b]))
    write("after the purge")

    submit = SparkSubmit(master="local[1]", work_dir=tmp / "spark")
    source_file = source.to_private_file(tmp / "secrets" / "source.json")
    job_file = tmp / "stream.json"

    def stream(on_binlog_purged: str) -> None:
        job_file.write_text(StreamJob(state=state.location, sink=SinkSpec(lake), on_binlog_purged=on_binlog_purged).to_json())
        submit.run("binlog_stream.py", ["--job", str(job_file)], source_file)

    with pytest.raises(SparkJobFailed) as failure:
        stream("fail")
    h.default_error = str(failure.value)
    stream("resnapshot")
    observe("gap at a batch start")

    def next_run(moment: str, added: dict[TableId, CapturedTable] | None = None) -> None:
        registry, drift = state.latest(), read_drift(state)
        tables = dict(registry.tables)
        h.decisions[moment] = {}
        for table_id, captured in registry.tables.items():
            action, _ = decide_action(table_id, captured, [], "initial",
                                      drifted=bool(pending_drift(drift, table_id, captured)))
            h.decisions[moment][table_id.table] = action
            if action == "resnapshot":
                tables[table_id] = CapturedTable("id", [stage_whole_table(source, state, schemas[table_id.table])])
        tables.update(added or {})
        state.commit(tables)

    next_run("after the first gap", {TableId("purging", "c"): CapturedTable("id", [c])})
    write("streamed")
    stream("resnapshot")
    observe("gap in an activation")
    next_run("after the activation gap")
    write("at the end")
    stream("resnapshot")
    observe("end")
    return h


def test_by_default_the_stream_stops_naming_the_missing_file_and_the_way_out(purge):
    assert f"Binlog file {purge.purged_file} (needed from offset {purge.purged_file}:" in purge.default_error
    assert "on_binlog_purged='resnapshot'" in purge.default_error


def test_only_the_tables_that_needed_the_purged_binlog_are_recorded(purge):
    assert purge.drift_kinds["gap at a batch start"] == {"a": ["binlog-purged"]}


def test_a_table_that_lost_changes_keeps_its_last_state_until_re_snapshotted(purge):
    table = TableId("purging", "a")
    assert_same_rows(table, purge.snapshot_of_a, purge.sink["gap at a batch start"]["a"])


def test_a_table_whose_splits_came_after_the_purge_streams_on(purge):
    moment = "gap at a batch start"
    assert_same_rows(TableId("purging", "b"), purge.source[moment]["b"], purge.sink[moment]["b"])


def test_a_table_added_behind_a_purge_is_recorded_in_its_activation(purge):
    assert purge.drift_kinds["gap in an activation"]["c"] == ["binlog-purged"]
    assert purge.decisions["after the activation gap"]["c"] == "resnapshot"


def test_the_next_run_re_snapshots_exactly_those_tables_and_the_sink_equals_the_source(purge):
    assert purge.decisions["after the first gap"] == {"a": "resnapshot", "b": "keep"}
    for name in "abc":
        assert_same_rows(TableId("purging", name), purge.source["end"][name], purge.sink["end"][name])
