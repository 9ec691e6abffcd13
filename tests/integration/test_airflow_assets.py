"""The sink's tables as Airflow Assets under a real scheduler (``airflow standalone``): the example
pipeline's chunks and stream add an asset event per table they changed, the watcher of a table's
asset reports a continuous stream's batches, and the downstream example DAG, scheduled on one
table's asset, runs on them and reads how fresh the table is."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.assets.sink_tables import table_asset_uri
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.devtools.airflow_standalone import AirflowStandalone
from airflow_provider_mysqlcdc.devtools.dag_runner import example_dag_env
from airflow_provider_mysqlcdc.devtools.workload import SAMPLE_TABLES, create_sample_tables
from airflow_provider_mysqlcdc.pipeline import group_id_for
from airflow_provider_mysqlcdc.state.lease import StreamLeases
from airflow_provider_mysqlcdc.state.registry import PipelineState

pytestmark = pytest.mark.integration

DAG_ID = "mysqlcdc_example"
DOWNSTREAM = "mysqlcdc_downstream_example"


@pytest.mark.usefixtures("reap_spark")
def test_chunks_and_stream_runs_emit_asset_events_per_changed_table_that_trigger_a_downstream_dag(
        mysql_server, cdc_user, database, tmp_path):
    conn = mysql_server.connect()
    watched, other = create_sample_tables(conn, database, rows_per_table=400, seed=8, tables=SAMPLE_TABLES[:2])
    lake = tmp_path / "lake"
    env = example_dag_env(tmp_path / "airflow", cdc_user, [watched, other], sink_root=lake,
                          state_dir=tmp_path / "state", split_rows=250, chunk_rows=250)
    (tmp_path / "tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "tmp")
    watched_uri, other_uri = table_asset_uri(str(lake), watched), table_asset_uri(str(lake), other)
    with AirflowStandalone(env) as airflow:
        airflow.wait_for_dag(DAG_ID)
        airflow.wait_for_dag(DOWNSTREAM)
        first = airflow.trigger(DAG_ID)
        airflow.wait_until(lambda: airflow.dag_run_state(DAG_ID, first) in ("success", "failed"), 600, "run 1 ends")
        assert airflow.dag_run_state(DAG_ID, first) == "success"
        snapshot_events = airflow.wait_until(lambda: airflow.asset_events(source_dag_id=DAG_ID, source_run_id=first),
                                             60, "the snapshot's asset events")
        # one event per chunk (two of 250 rows per table), none from the stream: it had nothing to apply
        assert sorted((e["uri"], e["extra"]["kind"]) for e in snapshot_events) == \
            sorted([(watched_uri, "snapshot")] * 2 + [(other_uri, "snapshot")] * 2)
        assert {e["source_task_id"] for e in snapshot_events} == {f"{group_id_for(t.quoted)}.snapshot"
                                                                 for t in (watched, other)}
        for table, uri in ((watched, watched_uri), (other, other_uri)):
            assert sum(e["extra"]["rows_changed"] for e in snapshot_events if e["uri"] == uri) == _rows(conn, table)
        snapshot_seen = airflow.wait_until(lambda: _seen(airflow, "snapshot"), 300, "the downstream DAG runs")
        assert {e["table"] for e in snapshot_seen} == {str(watched)}  # the other table's events trigger nothing

        with conn.cursor() as cur:  # only the watched table changes before run 2
            cur.execute(f"DELETE FROM {watched.quoted} LIMIT 7")
        head = current_offset(conn)
        second = airflow.trigger(DAG_ID)
        airflow.wait_until(lambda: airflow.dag_run_state(DAG_ID, second) in ("success", "failed"), 600, "run 2 ends")
        assert airflow.dag_run_state(DAG_ID, second) == "success"
        [stream_event] = airflow.wait_until(lambda: airflow.asset_events(source_dag_id=DAG_ID, source_run_id=second),
                                            60, "the stream's asset event")
        assert stream_event["uri"] == watched_uri and stream_event["source_task_id"] == "stream"
        generation = PipelineState(str(tmp_path / "state" / DAG_ID)).latest_number()
        assert stream_event["extra"] == {"table": str(watched), "kind": "stream", "rows_changed": 7,
                                         "binlog_offset": stream_event["extra"]["binlog_offset"],
                                         "generation": generation}
        assert (stream_event["extra"]["binlog_offset"]["file"], stream_event["extra"]["binlog_offset"]["position"]) \
            == (head.file, head.position)
        seen = airflow.wait_until(lambda: _seen(airflow, "stream"), 300, "the downstream DAG runs on the stream's event")
        runs = airflow.dag_runs(DOWNSTREAM)
    # a run consumes every event of its asset since the previous run (a chunk's may still be among them)
    assert stream_event["extra"] in seen and {e["table"] for e in seen} == {str(watched)}
    assert runs and all(r["run_type"] == "asset_triggered" and r["state"] == "success" for r in runs)


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
