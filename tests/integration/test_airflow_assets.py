"""The sink's tables as Airflow Assets, and their OpenLineage, under a real scheduler (``airflow
standalone``): the example pipeline's chunks and stream add an asset event per table they changed,
the watcher of a table's asset reports a continuous stream's batches, and the downstream example
DAG, scheduled on one table's asset, runs on them and reads how fresh the table is. The same runs
report lineage through the OpenLineage provider's file transport: MySQL tables in, Delta tables out."""

from __future__ import annotations

import html
import json
import os
import signal
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_mysqlcdc.assets.sink_tables import table_asset_uri
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.pipeline import group_id_for
from airflow_provider_mysqlcdc.state.lease import StreamLeases
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.airflow_standalone import AirflowStandalone
from devtools.browser import dump_dom, screenshot
from devtools.dag_runner import example_dag_env
from devtools.statsd_listener import Metric, StatsdListener
from devtools.workload import SAMPLE_TABLES, create_sample_tables

from .helpers import spark_processes_of

pytestmark = pytest.mark.integration

DAG_ID = "mysqlcdc_example"
DOWNSTREAM = "mysqlcdc_downstream_example"


@dataclass
class TwoRuns:
    """What the example pipeline's two runs under one ``airflow standalone`` left: run 1 snapshots
    two tables (two chunks each), run 2's stream applies 7 deletes of the watched one."""

    conn: Any
    watched: TableId
    other: TableId
    lake: Path
    state: PipelineState
    first: str
    second: str
    snapshot_events: list[dict]
    snapshot_rows: dict[TableId, int]  # each table's rows when it was snapshotted
    stream_event: dict
    head: BinlogOffset  # the binlog head when run 2 started (all its changes before it)
    snapshot_seen: list[dict]  # what the downstream DAG's run on the snapshot events reported
    stream_seen: list[dict]  # ... on the stream's event
    downstream_runs: list[dict]
    lineage_file: Path  # OpenLineage's file transport: one JSON event per line
    schemas: dict[TableId, Any]  # each table's schema when it was snapshotted
    statsd: list[Metric]  # every metric Airflow's StatsD client sent during both runs
    plugins: list[dict]  # the plugins the API server loaded
    page: str  # the plugin's page (/mysqlcdc/) as headless Chromium rendered it
    ui: str  # Airflow's own UI at the plugin's navigation entry, rendered the same way
    screenshots: dict[str, Path]
    forged: int  # the HTTP status of the page for a request with a forged token

    def lineage(self, run_id: str, task_id: str, event_type: str) -> list[dict]:
        """The OpenLineage events of ``event_type`` of the task's instances in the DAG run."""
        events = [json.loads(line) for line in self.lineage_file.read_text().splitlines() if line.strip()]
        return [e for e in events if e["eventType"] == event_type and e["job"]["name"] == f"{DAG_ID}.{task_id}"
                and e["run"]["facets"].get("airflow", {}).get("dagRun", {}).get("run_id") == run_id]


@pytest.fixture(scope="module")
def two_runs(mysql_server, cdc_user, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("assets")
    database = f"assets_{uuid.uuid4().hex[:8]}"
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
    watched, other = create_sample_tables(conn, database, rows_per_table=400, seed=8, tables=SAMPLE_TABLES[:2])
    lake, lineage_file = tmp / "lake", tmp / "openlineage.jsonl"
    env = example_dag_env(tmp / "airflow", cdc_user, [watched, other], sink_root=lake,
                          state_dir=tmp / "state", split_rows=250, chunk_rows=250)
    (tmp / "tmp").mkdir()
    env.update(TMPDIR=str(tmp / "tmp"), AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps(
        {"type": "file", "log_file_path": str(lineage_file), "append": True}))
    try:
        with StatsdListener() as statsd, AirflowStandalone(dict(
                env, AIRFLOW__METRICS__STATSD_ON="True", AIRFLOW__METRICS__STATSD_HOST=statsd.host,
                AIRFLOW__METRICS__STATSD_PORT=str(statsd.port),
                AIRFLOW__MYSQLCDC__STATE_DIRS=str(tmp / "state"))) as airflow:  # the UI plugin's pipelines
            airflow.wait_for_dag(DAG_ID)
            airflow.wait_for_dag(DOWNSTREAM)
            first = airflow.trigger(DAG_ID)
            airflow.wait_until(lambda: airflow.dag_run_state(DAG_ID, first) in ("success", "failed"), 600, "run 1 ends")
            assert airflow.dag_run_state(DAG_ID, first) == "success"
            snapshot_events = airflow.wait_until(
                lambda: airflow.asset_events(source_dag_id=DAG_ID, source_run_id=first), 60, "the snapshot's asset events")
            snapshot_seen = airflow.wait_until(lambda: _seen(airflow, "snapshot"), 300, "the downstream DAG runs")
            snapshot_rows = {t: _rows(conn, t) for t in (watched, other)}
            schemas = {t: load_table_schema(conn, t) for t in (watched, other)}
            with conn.cursor() as cur:  # only the watched table's rows change before run 2
                cur.execute(f"DELETE FROM {watched.quoted} LIMIT 7")
                cur.execute(f"ALTER TABLE {other.quoted} DROP COLUMN note")  # drift: the next run re-snapshots
            head = current_offset(conn)
            second = airflow.trigger(DAG_ID)
            airflow.wait_until(lambda: airflow.dag_run_state(DAG_ID, second) in ("success", "failed"), 600, "run 2 ends")
            assert airflow.dag_run_state(DAG_ID, second) == "success"
            [stream_event] = airflow.wait_until(lambda: airflow.asset_events(source_dag_id=DAG_ID, source_run_id=second),
                                                60, "the stream's asset event")
            stream_seen = airflow.wait_until(lambda: _seen(airflow, "stream"), 300,
                                             "the downstream DAG runs on the stream's event")
            runs = airflow.dag_runs(DOWNSTREAM)
            plugins = airflow.plugins()
            forged = airflow.status_with_token("/mysqlcdc/", "not-a-token")
            page = dump_dom(airflow.signed_in_url("/mysqlcdc/"))
            ui = dump_dom(airflow.signed_in_url("/plugin/mysqlcdc"))
            screenshots = {"page": screenshot(airflow.signed_in_url("/mysqlcdc/"), tmp / "mysqlcdc-page.png"),
                           "ui": screenshot(airflow.signed_in_url("/plugin/mysqlcdc"), tmp / "mysqlcdc-in-airflow.png",
                                            height=1000)}
        yield TwoRuns(conn, watched, other, lake, PipelineState(str(tmp / "state" / DAG_ID)), first, second,
                      snapshot_events, snapshot_rows, stream_event, head, snapshot_seen, stream_seen, runs, lineage_file,
                      schemas, statsd.received(), plugins, page, ui, screenshots, forged)
    finally:
        for line in spark_processes_of(tmp):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")


def test_each_chunk_adds_an_asset_event_per_table_with_the_rows_it_wrote(two_runs):
    r = two_runs
    watched_uri, other_uri = table_asset_uri(str(r.lake), r.watched), table_asset_uri(str(r.lake), r.other)
    # one event per chunk (two of 250 rows per table), none from the stream: it had nothing to apply
    assert sorted((e["uri"], e["extra"]["kind"]) for e in r.snapshot_events) == \
        sorted([(watched_uri, "snapshot")] * 2 + [(other_uri, "snapshot")] * 2)
    assert {e["source_task_id"] for e in r.snapshot_events} == {f"{group_id_for(t.quoted)}.snapshot"
                                                               for t in (r.watched, r.other)}
    for table, uri in ((r.watched, watched_uri), (r.other, other_uri)):
        assert sum(e["extra"]["rows_changed"] for e in r.snapshot_events if e["uri"] == uri) == r.snapshot_rows[table]


def test_a_downstream_dag_runs_only_on_the_events_of_its_table(two_runs):
    assert {e["table"] for e in two_runs.snapshot_seen} == {str(two_runs.watched)}
    assert {e["table"] for e in two_runs.stream_seen} == {str(two_runs.watched)}
    assert two_runs.downstream_runs and all(r["run_type"] == "asset_triggered" and r["state"] == "success"
                                            for r in two_runs.downstream_runs)


def test_a_stream_run_adds_an_event_only_for_the_table_it_changed_with_its_offset(two_runs):
    r = two_runs
    event = r.stream_event
    assert event["uri"] == table_asset_uri(str(r.lake), r.watched) and event["source_task_id"] == "stream"
    assert event["extra"] == {"table": str(r.watched), "kind": "stream", "rows_changed": 7,
                              "binlog_offset": event["extra"]["binlog_offset"], "generation": r.state.latest_number()}
    assert (event["extra"]["binlog_offset"]["file"], event["extra"]["binlog_offset"]["position"]) == \
        (r.head.file, r.head.position)
    # a run consumes every event of its asset since the previous run (a chunk's may still be among them)
    assert event["extra"] in r.stream_seen


def test_snapshot_tasks_report_openlineage_from_mysql_tables_to_delta_tables(two_runs, mysql_server):
    r = two_runs
    for table in (r.watched, r.other):
        task_id = f"{group_id_for(table.quoted)}.snapshot"
        starts, completes = (r.lineage(r.first, task_id, kind) for kind in ("START", "COMPLETE"))
        assert len(starts) == len(completes) == 2  # a mapped task instance per chunk
        source = f"mysql://{mysql_server.admin.host}:{mysql_server.admin.port}"
        sink = os.path.abspath(r.lake) + "/" + "/".join(table.path_segments)
        for event in starts + completes:
            [input_], [output] = event["inputs"], event["outputs"]
            assert (input_["namespace"], input_["name"]) == (source, f"{table.database}.{table.table}")
            assert (output["namespace"], output["name"]) == ("file", sink)
        schema = r.schemas[table]
        [input_], [output] = completes[0]["inputs"], completes[0]["outputs"]
        assert [f["name"] for f in input_["facets"]["schema"]["fields"]] == list(schema.column_names)
        assert [f["type"] for f in input_["facets"]["schema"]["fields"]] == [c.column_type for c in schema.columns]
        lineage = output["facets"]["columnLineage"]["fields"]
        assert set(lineage) == {*schema.column_names, "_cdc_chunk"}
        assert all(lineage[c]["inputFields"] == [{**lineage[c]["inputFields"][0], "namespace": source,
                                                  "name": f"{table.database}.{table.table}", "field": c}]
                   and lineage[c]["inputFields"][0]["transformations"][0]["subtype"] == "IDENTITY"
                   for c in schema.column_names)
        assert sum(e["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] for e in completes) == \
            r.snapshot_rows[table]


def test_the_stream_task_reports_openlineage_of_every_table_with_the_rows_it_changed(two_runs):
    r = two_runs
    [complete] = r.lineage(r.second, "stream", "COMPLETE")
    rows = {o["name"].rsplit("/", 1)[-1]: o.get("outputFacets", {}).get("outputStatistics", {}).get("rowCount")
            for o in complete["outputs"]}
    assert rows == {r.watched.table: 7, r.other.table: 0}
    assert sorted(i["name"] for i in complete["inputs"]) == sorted(f"{t.database}.{t.table}"
                                                                   for t in (r.watched, r.other))
    assert len(r.lineage(r.second, "stream", "START")) == 1


def _statsd(two_runs: TwoRuns, metric: str, table: TableId | None = None) -> list[Metric]:
    """The metrics ``mysqlcdc.<metric>.<pipeline>[.<db>.<table>]`` Airflow's StatsD client sent."""
    name = f"airflow.mysqlcdc.{metric}.{DAG_ID}" + (f".{table.database}.{table.table.replace(' ', '_')}" if table else "")
    return [m for m in two_runs.statsd if m.name == name]


def test_chunk_tasks_send_the_rows_they_snapshotted_per_table_to_statsd(two_runs):
    for table in (two_runs.watched, two_runs.other):
        rows = _statsd(two_runs, "snapshot.rows", table)
        assert len(rows) == 2 and sum(m.value for m in rows) == two_runs.snapshot_rows[table]  # two chunks each
        assert len(_statsd(two_runs, "snapshot.chunk_duration", table)) == 2


def test_the_stream_task_sends_changes_applied_batch_duration_lag_and_bytes_behind(two_runs):
    assert sum(m.value for m in _statsd(two_runs, "stream.changes_applied", two_runs.watched)) == 7
    assert not _statsd(two_runs, "stream.changes_applied", two_runs.other)
    durations = _statsd(two_runs, "stream.batch_duration")
    assert durations and all(m.kind == "ms" and m.value > 0 for m in durations)
    assert _statsd(two_runs, "stream.lag_seconds") and all(m.kind == "g" for m in _statsd(two_runs, "stream.lag_seconds"))
    assert [m.value for m in _statsd(two_runs, "stream.bytes_behind")][-1:] == [0]  # caught up at its end


def test_a_dropped_column_is_sent_as_a_drift_event_and_a_table_pending(two_runs):
    assert [m.value for m in _statsd(two_runs, "drift.events", two_runs.other)] == [1]
    assert _statsd(two_runs, "drift.tables_pending")[-1].value == 1


def test_the_ui_plugin_is_loaded_with_its_app_and_navigation_entry(two_runs):
    [plugin] = [p for p in two_runs.plugins if p["name"] == "mysqlcdc"]
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/mysqlcdc"]
    assert [(v["name"], v["href"]) for v in plugin["external_views"]] == [("MySQL CDC", "/mysqlcdc/")]


def test_the_ui_page_shows_the_pipelines_tables_splits_stream_and_pending_re_snapshot(two_runs):
    page = two_runs.page
    assert f'<h2 id="{DAG_ID}">{DAG_ID}</h2>' in page
    for table in (two_runs.watched, two_runs.other):
        assert html.escape(str(table)) in page and "2 split(s)" in page  # two chunks of 250 rows each
    assert "re-snapshot pending" in page and "note dropped" in page  # the other table's dropped column
    assert "Event-time lag per batch" in page and "behind the head" in page
    assert two_runs.screenshots["page"].stat().st_size > 10_000


def test_the_ui_page_checks_who_asks_with_airflows_auth_manager(two_runs):
    """The test's Airflow signs everyone in as admin (all-admins mode); a forged token is refused."""
    assert two_runs.forged in (401, 403)


def test_airflow_shows_the_page_in_its_navigation(two_runs):
    assert "MySQL CDC" in two_runs.ui  # Airflow's own React UI, at the plugin's route
    assert two_runs.screenshots["ui"].stat().st_size > 10_000


def _seen(airflow: AirflowStandalone, kind: str) -> list[dict] | None:
    """What a successful run of the downstream DAG reported, when it ran on an event of ``kind``."""
    for run in airflow.dag_runs(DOWNSTREAM):
        if run["state"] == "success":
            seen = airflow.xcom(DOWNSTREAM, run["dag_run_id"], "report_freshness", "return_value") or []
            if any(extra.get("kind") == kind for extra in seen):
                return seen
    return None



def _rows(conn, table) -> int:
    with conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {table.quoted}")
        return cur.fetchone()[0]


@pytest.mark.usefixtures("reap_spark")
def test_a_watched_table_gets_an_asset_event_per_batch_of_a_continuous_stream(mysql_server, cdc_user, database,
                                                                               tmp_path):
    """A continuous stream's task ends only with the stream; the asset's watcher (in the triggerer)
    reports its batches while it runs, and the downstream DAG runs on them."""
    conn = mysql_server.connect()
    [watched] = create_sample_tables(conn, database, rows_per_table=50, seed=9, tables=SAMPLE_TABLES[:1])
    env = example_dag_env(tmp_path / "airflow", cdc_user, [watched], sink_root=tmp_path / "lake",
                          state_dir=tmp_path / "state", split_rows=1000, chunk_rows=1000)
    (tmp_path / "tmp").mkdir()
    env.update(TMPDIR=str(tmp_path / "tmp"), MYSQLCDC_WATCH_STREAM_BATCHES="true")
    leases = StreamLeases(PipelineState(str(tmp_path / "state" / DAG_ID)))
    uri = table_asset_uri(str(tmp_path / "lake"), watched)

    def batch_events() -> list[dict]:
        with conn.cursor() as cur:  # a change per look: the watcher reports the changes after its first look
            cur.execute(f"DELETE FROM {watched.quoted} LIMIT 1")
        events = [e for e in airflow.asset_events() or [] if e["uri"] == uri]
        # a trigger's event: Airflow keeps what the trigger fired under "payload"
        return [e for e in events if e["extra"].get("from_trigger") and e["extra"]["payload"]["kind"] == "stream-batch"]

    with AirflowStandalone(env) as airflow:
        airflow.wait_for_dag(DAG_ID)
        airflow.wait_for_dag(DOWNSTREAM)
        run_id = airflow.trigger(DAG_ID, {"stream_mode": "continuous", "startup_mode": "latest"})
        airflow.wait_until(lambda: leases.current() and leases.current().live, 600, "the stream runs")
        [event, *_] = airflow.wait_until(batch_events, 300, "an asset event of a stream batch")
        seen = airflow.wait_until(lambda: _seen(airflow, "stream-batch"), 300, "the downstream DAG runs on it")
        assert airflow.task_state(DAG_ID, run_id, "stream") == "running"  # all while the stream runs
        airflow.mark(DAG_ID, run_id, "stream", "failed")  # its on_kill stops the stream (test_airflow_kill.py)
        airflow.wait_until(lambda: airflow.dag_run_state(DAG_ID, run_id) == "failed", 120, "the run ends")
    assert event["source_dag_id"] is None  # from the watcher, not a task
    extra = event["extra"]["payload"]
    assert extra["table"] == str(watched) and extra["rows_changed"] >= 1
    assert extra["generation"] == PipelineState(str(tmp_path / "state" / DAG_ID)).latest_number()
    assert any(e["kind"] == "stream-batch" for e in seen)
