"""Table-level DDL while streaming, on a real server, with the stream under spark-submit.

One scripted history (the module fixture) runs every statement form against its own table, with
two stream runs around a "next DAG run" (the plan's decisions, staged re-snapshots, a new registry
generation); each test then checks one behaviour of it:

- ``TRUNCATE`` in each form empties the sink, but only of rows older than it: a split read after
  it keeps its rows, and a TRUNCATE in an activation's re-read gap applies to a table added
  directly and to a staged re-snapshot alike;
- ``DROP TABLE``, ``RENAME TABLE``, ``CREATE OR REPLACE TABLE`` and a drop plus re-create: the
  stream keeps going, the sink keeps the table's last state, the state says what happened, and the
  next run re-snapshots a table that exists again (a dropped one stays as it was);
- a partition truncation (rows gone without row events) is recorded and re-snapshotted.

The history runs once into each table format.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest

from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.reading.split_reader import SplitReader
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema, table_exists
from airflow_provider_mysqlcdc.planning.changes import decide_action
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.base import Sink
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter
from airflow_provider_mysqlcdc.state.drift import pending_drift, read_drift
from airflow_provider_mysqlcdc.state.registry import PipelineState, captured_tables
from airflow_provider_mysqlcdc.state.schemas import KnownSchemas
from airflow_provider_mysqlcdc.status import pipeline_status
from devtools.snapshot import stage_whole_table
from devtools.spark_submit import SparkSubmit
from devtools.verify import Rows, source_rows
from devtools.verify import sink_rows as sink_table_rows

from .helpers import assert_same_rows

pytestmark = pytest.mark.integration

CAPTURED_FIRST = ["trunc_plain", "trunc_hw", "dropped", "renamed", "replaced", "recreated", "parted", "staged_re",
                  "uncaptured"]


@dataclass
class History:
    database: str
    lake: str
    sink_format: str
    state: PipelineState
    schemas: dict[str, TableSchema]
    after_first_run: dict[str, Rows] = field(default_factory=dict)
    after_second_run: dict[str, Rows] = field(default_factory=dict)
    source_after_first_run: dict[str, Rows] = field(default_factory=dict)
    source_after_second_run: dict[str, Rows] = field(default_factory=dict)
    last_state: dict[str, Rows] = field(default_factory=dict)  # just before a drop/rename/replace
    decisions: dict[str, str] = field(default_factory=dict)
    status_after_first_run: dict = field(default_factory=dict)
    status_after_second_run: dict = field(default_factory=dict)

    def table(self, name: str) -> TableId:
        return TableId(self.database, name)


def _read(cdc_user, schema: TableSchema, split: SnapshotSplit) -> tuple[FinishedSplit, list[dict]]:
    with SplitReader(cdc_user, schema) as reader:
        result = reader.read(split)
    return result.finished, result.rows


def _write_direct(sink: Sink, cdc_user, schema: TableSchema, split: SnapshotSplit) -> FinishedSplit:
    finished, rows = _read(cdc_user, schema, split)
    sink.prepare(schema)
    with SplitReader(cdc_user, schema) as reader:
        SinkWriter(sink, schema, "id", reader.ordering("id")).write_split(finished, rows)
    return finished


@pytest.fixture(scope="module", params=["delta", "iceberg"])
def history(mysql_server, cdc_user, tmp_path_factory, request) -> History:
    tmp = tmp_path_factory.mktemp("table-ddl")
    database = f"cdc_ddl_{uuid.uuid4().hex[:8]}"
    admin = mysql_server.connect()
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
    conn = mysql_server.connect(database)
    with conn.cursor() as cur:
        for name in CAPTURED_FIRST + ["late_added", "renamed_src"]:
            partitions = (" PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (20), "
                          "PARTITION p1 VALUES LESS THAN MAXVALUE)") if name == "parted" else ""
            cur.execute(f"CREATE TABLE `{name}` (id INT PRIMARY KEY, v VARCHAR(40)){partitions}")
            cur.executemany(f"INSERT INTO `{name}` VALUES (%s, %s)", [(i, f"{name} {i}") for i in range(1, 41)])
    schemas = {n: load_table_schema(conn, TableId(database, n)) for n in CAPTURED_FIRST + ["late_added"]}
    h = History(database, str(tmp / "lake"), request.param, PipelineState(str(tmp / "state")), schemas)
    known = KnownSchemas(h.state)
    for schema in schemas.values():
        known.remember(schema)  # what the plan does for every table it plans
    sink = open_sink(SinkSpec(h.lake, h.sink_format))

    # generation 1; trunc_hw's first split is read before a TRUNCATE, its second after it
    finished = [_write_direct(sink, cdc_user, schemas[n], SnapshotSplit(h.table(n), 0, "id"))
                for n in CAPTURED_FIRST if n != "trunc_hw"]
    finished.append(_write_direct(sink, cdc_user, schemas["trunc_hw"], SnapshotSplit(h.table("trunc_hw"), 0, "id", None, 25)))
    with conn.cursor() as cur:
        cur.execute(f"TRUNCATE TABLE `{database}`.`trunc_hw`")
        cur.executemany("INSERT INTO trunc_hw VALUES (%s, %s)", [(i, f"after truncate {i}") for i in range(1, 61)])
    finished.append(_write_direct(sink, cdc_user, schemas["trunc_hw"], SnapshotSplit(h.table("trunc_hw"), 1, "id", 25, None)))
    h.state.commit(captured_tables(finished))

    # read now, registered only after the first stream run (so that run passes their TRUNCATEs)
    late_added = _write_direct(sink, cdc_user, schemas["late_added"], SnapshotSplit(h.table("late_added"), 0, "id"))
    staged_re = stage_whole_table(cdc_user, h.state, schemas["staged_re"])

    with conn.cursor() as cur:
        cur.execute("UPDATE trunc_plain SET v = 'updated' WHERE id < 10")
        cur.execute("/* cleanup */ TRUNCATE trunc_plain")
        cur.executemany("INSERT INTO trunc_plain VALUES (%s, %s)", [(i, "after truncate") for i in range(100, 111)])
        for name in ("dropped", "renamed", "replaced", "recreated"):
            cur.execute(f"UPDATE `{name}` SET v = 'last words' WHERE id < 5")
            h.last_state[name] = source_rows(mysql_server.admin, schemas[name])
        cur.execute("DROP TABLE IF EXISTS dropped")
        cur.execute("RENAME TABLE renamed TO renamed_old, renamed_src TO renamed")
        cur.execute("UPDATE renamed SET v = 'the other table' WHERE id < 3")
        cur.execute("CREATE OR REPLACE TABLE replaced (id INT PRIMARY KEY, v VARCHAR(40))")
        cur.execute("INSERT INTO replaced VALUES (1, 'fresh')")
        cur.execute("DROP TABLE recreated")
        cur.execute("CREATE TABLE recreated (id INT PRIMARY KEY, v VARCHAR(40))")
        cur.executemany("INSERT INTO recreated VALUES (%s, %s)", [(i, "reborn") for i in range(1, 4)])
        cur.execute("ALTER TABLE parted TRUNCATE PARTITION p0")
        cur.execute("UPDATE parted SET v = 'after partition truncate' WHERE id >= 30")
        cur.execute("TRUNCATE TABLE late_added")
        cur.executemany("INSERT INTO late_added VALUES (%s, %s)", [(i, "after truncate") for i in range(200, 206)])
        cur.execute("TRUNCATE staged_re")
        cur.executemany("INSERT INTO staged_re VALUES (%s, %s)", [(i, "after truncate") for i in range(300, 306)])

    submit = SparkSubmit(master="local[1]", work_dir=tmp / "spark")
    source_file = cdc_user.to_private_file(tmp / "secrets" / "source.json")
    (tmp / "stream.json").write_text(StreamJob(state=h.state.location, sink=SinkSpec(h.lake, h.sink_format)).to_json())

    def run_stream() -> None:
        submit.run("binlog_stream.py", ["--job", str(tmp / "stream.json")], source_file)

    def sink_and_source() -> tuple[dict[str, Rows], dict[str, Rows]]:
        sink_rows = {n: sink_table_rows(h.lake, s, sink_format=h.sink_format) for n, s in schemas.items()}
        source = {n: source_rows(mysql_server.admin, s) for n, s in schemas.items() if table_exists(conn, s.table_id)}
        return sink_rows, source

    run_stream()
    h.after_first_run, h.source_after_first_run = sink_and_source()
    h.status_after_first_run = pipeline_status(h.state.location)

    # the next DAG run: what the plan decides for each captured table, then its snapshots
    registry, drift = h.state.latest(), read_drift(h.state)
    tables = dict(registry.tables)
    for table_id, captured in registry.tables.items():
        action, _ = decide_action(table_id, captured, [], "initial",
                                  drifted=bool(pending_drift(drift, table_id, captured)))
        if action == "resnapshot" and not table_exists(conn, table_id):
            action = "keep (gone)"
        h.decisions[table_id.table] = action
        if action == "resnapshot":
            schema = load_table_schema(conn, table_id)
            known.remember(schema)
            tables[table_id] = CapturedTable("id", [stage_whole_table(cdc_user, h.state, schema)])
    tables[h.table("late_added")] = CapturedTable("id", [late_added])
    tables[h.table("staged_re")] = CapturedTable("id", [staged_re])
    del tables[h.table("uncaptured")]  # the run leaves it out: no longer captured
    h.state.commit(tables)
    with conn.cursor() as cur:
        cur.execute("UPDATE uncaptured SET v = 'after it left the capture' WHERE id < 5")
        cur.execute("UPDATE renamed SET v = 'streamed after the re-snapshot' WHERE id = 10")
        cur.execute("INSERT INTO recreated VALUES (99, 'streamed after the re-snapshot')")
    run_stream()
    h.after_second_run, h.source_after_second_run = sink_and_source()
    h.status_after_second_run = pipeline_status(h.state.location)
    yield h
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{database}`")


def _assert_equal(h: History, name: str, expected: Rows, actual: Rows) -> None:
    assert_same_rows(h.table(name), expected, actual)


def test_truncate_in_every_form_empties_the_sink_and_later_rows_arrive(history):
    for name in ("trunc_plain", "staged_re"):
        _assert_equal(history, name, history.source_after_first_run[name], history.after_first_run[name])
    assert set(history.after_first_run["trunc_plain"]) == {(i,) for i in range(100, 111)}


def test_truncate_keeps_the_rows_of_a_split_read_after_it(history):
    _assert_equal(history, "trunc_hw", history.source_after_first_run["trunc_hw"], history.after_first_run["trunc_hw"])
    assert len(history.after_first_run["trunc_hw"]) == 60


def test_truncate_in_the_activation_gap_applies_to_a_table_added_directly(history):
    _assert_equal(history, "late_added", history.source_after_second_run["late_added"],
                  history.after_second_run["late_added"])


def test_truncate_in_the_activation_gap_applies_to_a_staged_re_snapshot(history):
    _assert_equal(history, "staged_re", history.source_after_second_run["staged_re"],
                  history.after_second_run["staged_re"])


@pytest.mark.parametrize("name", ["dropped", "renamed", "replaced", "recreated"])
def test_a_table_dropped_renamed_or_replaced_keeps_its_last_state_in_the_sink(history, name):
    _assert_equal(history, name, history.last_state[name], history.after_first_run[name])


@pytest.mark.parametrize("name, kinds", [
    ("dropped", ["dropped"]), ("renamed", ["renamed", "replaced"]), ("replaced", ["replaced"]),
    ("recreated", ["dropped", "created"]), ("parted", ["rows-changed"])])
def test_the_state_says_what_happened_to_each_table(history, name, kinds):
    table = history.status_after_first_run["tables"][str(history.table(name))]
    assert [e["kind"] for e in table["drift"]] == kinds
    assert (table["frozen_since"] is not None) == (name != "parted")


def test_the_next_run_re_snapshots_tables_that_exist_again_and_keeps_a_dropped_one(history):
    assert history.decisions == {"trunc_plain": "keep", "trunc_hw": "keep", "staged_re": "keep",
                                 "dropped": "keep (gone)", "renamed": "resnapshot", "replaced": "resnapshot",
                                 "recreated": "resnapshot", "parted": "resnapshot", "uncaptured": "keep"}


@pytest.mark.parametrize("name", ["renamed", "replaced", "recreated", "parted"])
def test_after_the_re_snapshot_the_sink_equals_the_source_and_streams_again(history, name):
    _assert_equal(history, name, history.source_after_second_run[name], history.after_second_run[name])
    table = history.status_after_second_run["tables"][str(history.table(name))]
    assert table["drift"] == [] and table["frozen_since"] is None


def test_a_dropped_table_stays_as_it_was_through_later_runs(history):
    _assert_equal(history, "dropped", history.last_state["dropped"], history.after_second_run["dropped"])
    assert history.status_after_second_run["tables"][str(history.table("dropped"))]["frozen_since"] is not None


def test_the_stream_applied_every_other_table_through_the_ddl(history):
    for name in ("trunc_plain", "trunc_hw", "staged_re", "late_added"):
        _assert_equal(history, name, history.source_after_second_run[name], history.after_second_run[name])
    assert history.after_first_run["parted"][(30,)]["v"] == "after partition truncate"


def test_a_table_left_out_of_the_registry_keeps_its_sink_as_it_was(history):
    assert history.source_after_second_run["uncaptured"] != history.after_first_run["uncaptured"]
    _assert_equal(history, "uncaptured", history.after_first_run["uncaptured"], history.after_second_run["uncaptured"])


def test_schemas_of_tables_gone_from_the_server_are_remembered(history):
    remembered = KnownSchemas(history.state).remembered(history.table("dropped"))
    assert remembered == history.schemas["dropped"]
    sink = open_sink(SinkSpec(history.lake, history.sink_format))
    assert sink.read(history.table("dropped")).num_rows == len(history.last_state["dropped"])
