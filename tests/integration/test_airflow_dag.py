"""The example DAG through a pipeline's whole life, with dag.test() and Airflow's REST API: real
MariaDB under concurrent writes on every table throughout, real spark-submit per chunk, a real
continuous stream (killed with -9 once), real Delta tables and, in a second run of the whole life,
real Iceberg tables (``sink_format``), real Airflow metadata DB.

1. run 1 snapshots table A (named when the DAG is parsed); the stream is not running yet;
2. one chunk of run 1 is cleared through ``clearTaskInstances``: only it (and downstream) re-runs,
   and the registry takes its new high watermark;
3. a continuous stream starts; run 2 adds B through the ``tables`` param while the stream is
   killed -9 (during the chunk jobs, and again in the middle of the micro-batch activating B),
   each time restarted from its checkpoint;
4. run 3 adds C, re-snapshots A whole and a key range of B (the stream killed -9 between two
   staged-split commits); a column of B is renamed while streaming (schema drift: run 4 re-snapshots
   B by itself);
5. after the writers stop, an available-now run catches up: every sink table equals its source,
   every applied staged file was released, and the password appeared in no argv, Spark
   environment, log, XCom, event log or file.

Airflow runs the DAG from the provider as users install it: the wheel, in a fresh virtualenv with
no checkout beside it (test_wheel_install.py); the Spark programs it submits are the wheel's.

(A table left out of a run keeps its sink as it was: test_stream_table_ddl.py; named again, it is
re-snapshotted staged: test_registry.py.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.preflight import run_preflight
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.progress import StreamOffsetProgress
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.iceberg.sink import IcebergSink
from airflow_provider_mysqlcdc.state.registry import STREAM_OFFSET, PipelineState
from airflow_provider_mysqlcdc.status import pipeline_status
from devtools.dag_runner import catch_up_stream, clear_and_resume, example_dag_env, mark_running, run_dag
from devtools.spark_submit import SparkSubmit
from devtools.verify import read_delta, source_rows
from devtools.workload import SAMPLE_TABLES, RandomWriters, create_sample_tables

from .helpers import SecretWatch, assert_same_rows, delta_rows, files_holding, transactions_between

pytestmark = pytest.mark.integration

TABLES = SAMPLE_TABLES[:3]


def _name(table: TableId) -> str:
    return f"`{table.database}`.`{table.table}`"


def _assert_run_succeeded(result: dict) -> None:
    assert result["state"] == "success", result["output"][-4000:]
    assert all(ti["state"] in ("success", "skipped") for ti in result["tis"]), result["tis"]


#: the lifecycle is Airflow's and the pipeline's, not the table format's: it runs on Delta alone (four
#: and a half minutes a run). Iceberg's side of the same steps is proven by test_iceberg_sink.py's DAG
#: run and streams, test_torture.py's faults, DDL and re-snapshots, and the DDL, failover and
#: added-columns tests, each on Iceberg too
@pytest.mark.parametrize("sink_format", ["delta"])
def test_pipeline_lifecycle_adds_clears_resnapshots_and_stays_exact(mysql_server, cdc_user, database, tmp_path,
                                                                    request, installed_wheel, sink_format):
    conn = mysql_server.connect()
    a, b, c = create_sample_tables(conn, database, rows_per_table=1500, seed=21, tables=TABLES)
    with conn.cursor() as cur:  # a column the writers never touch, renamed while streaming (step 5)
        cur.execute(f"ALTER TABLE {b.quoted} ADD COLUMN label VARCHAR(20) NULL")
        cur.execute(f"UPDATE {b.quoted} SET label = 'first'")
    schemas = run_preflight(cdc_user, [a, b, c]).schemas
    lake, state_dir = tmp_path / "lake", tmp_path / "state"
    # 5 splits per table, 2 chunks (spark-submits) per table
    env = example_dag_env(tmp_path / "airflow", cdc_user, [a], sink_root=lake, state_dir=state_dir,
                          split_rows=300, chunk_rows=900, python=str(installed_wheel.python),
                          dags_folder=installed_wheel.example_dags)
    # the DAG's Spark jobs go through an Airflow spark connection, with event logs on (searched for secrets)
    events = tmp_path / "spark-events"
    events.mkdir()
    env.update(MYSQLCDC_SINK_FORMAT=sink_format,
               AIRFLOW_CONN_MYSQLCDC_SPARK=json.dumps({"conn_type": "spark", "host": "local[2]"}),
               MYSQLCDC_SPARK_CONN_ID="mysqlcdc_spark",
               MYSQLCDC_SPARK_CONF=json.dumps({"spark.eventLog.enabled": True, "spark.eventLog.dir": str(events)}))
    state = PipelineState(str(state_dir / "mysqlcdc_example"))
    submit = SparkSubmit(master="local[2]", work_dir=tmp_path / "spark")
    source_file = cdc_user.to_private_file(tmp_path / "secrets" / "source.json")
    started = time.monotonic()

    def step(name: str) -> None:
        print(f"[{time.monotonic() - started:5.0f}s] {name}", flush=True)

    job = StreamJob(state=state.location, sink=SinkSpec(str(lake), sink_format), mode="continuous", trigger_interval_s=0.5)
    (tmp_path / "stream.json").write_text(job.to_json())

    current: list[subprocess.Popen] = []
    request.addfinalizer(lambda: current and current[0].poll() is None and os.killpg(current[0].pid, signal.SIGKILL))

    def start_stream() -> subprocess.Popen:
        current[:] = [submit.start("binlog_stream.py", ["--job", str(tmp_path / "stream.json")], source_file,
                                   tmp_path / "stream.log")]
        return current[0]

    def kill_when_logged(text: str) -> threading.Thread:
        """From now on, watch the stream's log; kill -9 the stream the moment it logs ``text``."""
        log_path = tmp_path / "stream.log"
        position = log_path.stat().st_size if log_path.exists() else 0

        def watch() -> None:
            deadline, pending = time.monotonic() + 300, ""
            with open(log_path, errors="replace") as log:
                log.seek(position)
                while time.monotonic() < deadline:
                    pending += log.readline()
                    if pending.endswith("\n"):
                        if text in pending:
                            os.killpg(current[0].pid, signal.SIGKILL)
                            watcher.killed = True
                            return
                        pending = ""
                    else:
                        time.sleep(0.01)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.killed = False
        watcher.start()
        return watcher

    def kill_once_planned(stream: subprocess.Popen, plan: str, timeout_s: float = 600) -> None:
        """Kill -9 ``stream`` once a run's plan task named ``plan...`` recorded its plan: its chunk
        jobs run then, and nothing of that run is registered before they end (a fixed delay let a
        fast run land first, and the stream activated the new table before it was killed)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            runs = state.storage.list_names("progress", "runs")
            if any(n.startswith(plan) for run in runs for n in state.storage.list_names("progress", "runs", run)):
                os.killpg(stream.pid, signal.SIGKILL)
                return
            time.sleep(0.2)

    def wait_for_stream(generation: int, position: BinlogOffset | None = None) -> None:
        """Until the stream has processed a batch of ``generation`` (and up to ``position``)."""
        deadline = time.monotonic() + 240
        while True:
            done = state.read_progress(StreamOffsetProgress, STREAM_OFFSET)
            if done and done.offset.generation >= generation and (position is None or done.offset.offset >= position):
                return
            assert current[0].poll() is None and time.monotonic() < deadline, "the stream did not get there"
            time.sleep(0.5)

    def restart_after(watcher: threading.Thread, what: str) -> subprocess.Popen:
        watcher.join(timeout=300)
        assert watcher.killed, f"the stream never logged what it should have been killed at ({what})"
        current[0].wait()
        step(f"stream killed -9 {what}; restarting")
        return start_stream()

    watch = SecretWatch(cdc_user.password).start()
    request.addfinalizer(watch.stop)
    with RandomWriters(mysql_server.admin, database, writers=2, seed=210, pause_s=0.02, tables=TABLES) as writers:
        # 1. the first run snapshots A
        run1 = run_dag("mysqlcdc_example", env, conf={"stream_mode": "skip"})
        _assert_run_succeeded(run1)
        group = f"{database}__{TABLES[0].name}"
        chunks = run1["xcoms"][f"{group}.plan[-1]"]
        mapped = [ti for ti in run1["tis"] if ti["task_id"] == f"{group}.snapshot"]
        assert len(chunks) >= 2 and len(mapped) == len(chunks), (chunks, mapped)
        assert sorted(ti["label"] for ti in mapped) == sorted(ch["label"] for ch in chunks)
        assert all(ti["label"].startswith(f"{a} chunk ") for ti in mapped)
        for ti in mapped:
            finished = run1["xcoms"][f"{group}.snapshot[{ti['map_index']}]"]["finished_splits"]
            assert finished and all(f["high_watermark"]["position"] > 0 for f in finished)
            assert not any(f.get("staged") for f in finished), "a new table is written directly"
        assert run1["xcoms"]["collect_splits[-1]"]["generation"] == 1

        step("run 1 done")
        # 2. clear one chunk through the REST API: it alone re-runs, staged, and its new HW lands
        before = {f.split.index: f for f in state.latest().tables[a].splits}
        cleared = clear_and_resume("mysqlcdc_example", run1["run_id"], f"{group}.snapshot", 1, env)
        _assert_run_succeeded(cleared)
        assert sorted(map(tuple, cleared["cleared"])) == sorted(
            [(f"{group}.snapshot", 1), ("collect_splits", -1), ("stream", -1)])
        tries = {(ti["task_id"], ti["map_index"]): ti["try_number"] for ti in cleared["tis"]}
        assert tries[(f"{group}.snapshot", 1)] == 2 and tries[(f"{group}.snapshot", 0)] == 1
        redone = cleared["xcoms"][f"{group}.snapshot[1]"]["finished_splits"]
        after = {f.split.index: f for f in state.latest().tables[a].splits}
        assert state.latest().number == 2
        for f in redone:
            index = f["split"]["index"]
            assert after[index].staged and after[index].high_watermark > before[index].high_watermark
        assert all(after[i] == before[i] for i in before if i not in {f["split"]["index"] for f in redone})

        step("clear + resume done")
        # 3. the stream runs; B is added while the stream is killed -9 (and restarted afterwards)
        stream = start_stream()
        kill = threading.Thread(target=kill_once_planned, args=(stream, "plan-param_tables."), daemon=True)
        kill.start()
        run2 = run_dag("mysqlcdc_example", env, conf={"tables": [_name(b)], "stream_mode": "skip"})
        kill.join()
        assert stream.poll() is not None, "run 2 ended before the stream was killed during its chunk jobs"
        stream.wait()
        _assert_run_succeeded(run2)
        assert len([ti for ti in run2["tis"] if ti["task_id"] == "param_tables.snapshot"]) >= 2
        assert f"{group}.snapshot" not in {ti["task_id"] for ti in run2["tis"] if ti["state"] == "success"}, \
            "a captured table was read again"
        assert set(state.latest().tables) == {a, b}
        watcher = kill_when_logged("registry changes activated for")
        start_stream()
        stream = restart_after(watcher, "in the middle of the micro-batch activating B")

        step("run 2 done")
        # 4. add C; re-snapshot A whole and a key range of B
        # (bigger chunks from here on, through the param: the writers keep growing the tables)
        watcher = kill_when_logged("applied staged split")
        run3 = run_dag("mysqlcdc_example", env, conf={
            "tables": [_name(b), _name(c)], "stream_mode": "skip", "chunk_rows": 3000,
            "resnapshot": [_name(a), {"table": _name(b), "from": 400, "to": 800}]})
        _assert_run_succeeded(run3)
        plans = {p["table"]: p for g in ("param_tables", group) for p in run3["xcoms"][f"{g}.plan[-1]:tables"]["plans"]}
        assert plans[a.quoted]["action"] == "resnapshot" and plans[c.quoted]["action"] == "snapshot"
        assert plans[b.quoted]["action"] == "resnapshot-splits" and 1 <= len(plans[b.quoted]["splits"]) < 5
        registry = state.latest()
        assert all(f.staged for f in registry.tables[a].splits)
        assert not any(f.staged for f in registry.tables[c].splits)
        stream = restart_after(watcher, "between two staged-split commits")

        step("run 3 done")
        # 5. rename a column of B while streaming: rows the stream does not touch again would keep the
        # value under the old name, so the stream records schema drift and the next run re-snapshots B
        with conn.cursor() as cur:
            cur.execute(f"ALTER TABLE {b.quoted} RENAME COLUMN label TO tag")
        wait_for_stream(state.latest().number, current_offset(conn))
        run4 = run_dag("mysqlcdc_example", env, conf={"tables": [_name(b), _name(c)], "stream_mode": "skip",
                                                      "chunk_rows": 3000})
        _assert_run_succeeded(run4)
        plans = {p["table"]: p["action"] for p in run4["xcoms"]["param_tables.plan[-1]:tables"]["plans"]}
        assert plans[b.quoted] == "resnapshot", "schema drift of B did not re-snapshot it"
        assert "schema drift" in run4["output"]
        stream_pid = stream.pid
        stats = writers.stop()
        step("run 4 done")

    assert stream.poll() is None, (tmp_path / "stream.log").read_text()[-3000:]
    os.killpg(stream_pid, signal.SIGTERM)
    stream.wait()
    catch_up_stream(cdc_user, state.location, lake, tmp_path / "catch-up", sink_format=sink_format)
    step("caught up")
    schemas = run_preflight(cdc_user, [a, b, c]).schemas  # B's column is called tag now
    sink = open_sink(SinkSpec(str(lake), sink_format))
    assert "tag" in sink.column_names(b)
    for table in (a, b, c):
        assert_same_rows(table, source_rows(mysql_server.admin, schemas[table]),
                         delta_rows(lake, schemas[table], sink_format=sink_format))
        _assert_no_row_went_back(sink, schemas[table])
    status = pipeline_status(state.location, cdc_user)
    assert set(status["tables"]) == {str(a), str(b), str(c)} and status["stream"]["changes_total"] > 0
    # writers stopped before the catch-up run, which read up to the head: no transaction left behind
    # (the head may have moved by a Binlog_checkpoint event the server writes on its own)
    committed = BinlogOffset(status["stream_offset"]["offset"]["file"], int(status["stream_offset"]["offset"]["pos"]))
    assert transactions_between(cdc_user, committed, current_offset(conn)) == 0, status
    assert status["latest_run"]["tables"][str(b)]["done"] == status["latest_run"]["tables"][str(b)]["chunks"] >= 1
    # every staged split file was applied, so the stream released it (state/cleanup.py)
    staged = {f.staged for n in range(1, state.latest_number() + 1)
              for f in state.load(n).finished_splits if f.staged}
    assert staged and not [u for u in staged if os.path.exists(u)], "applied staged files were kept"
    # the source password reached no process argument or Spark environment, no log, XCom (the
    # metadata DB), Spark event log, state, checkpoint or sink file
    assert not watch.stop() and watch.samples > 20, (watch.found, watch.samples)
    runs = (run1, cleared, run2, run3, run4)
    assert not [r["run_id"] for r in runs if cdc_user.password in r["output"] + json.dumps(r["xcoms"])]
    # healthy runs log no error: a group with nothing to read (param_tables in run 1, A in run 2) has no
    # chunk results, and collect must not ask for them (Airflow logs each missing XCom as an error)
    assert not [r["run_id"] for r in runs if "XCom not found" in r["output"]]
    # the Spark programs the tasks submitted are the wheel's (the DAG ran in no checkout's folder)
    assert str(installed_wheel.example_dags.parent / "spark" / "jobs" / "snapshot_chunk.py") in run1["output"]
    assert any(events.iterdir()), "the jobs did not get the spark_conf of the DAG (no event log)"
    assert not files_holding(cdc_user.password, tmp_path)
    print(f"\n{stats.transactions} transactions during the life of the pipeline; registry generation "
          f"{status['generation']}")


def _assert_no_row_went_back(sink, schema) -> None:
    """Across every commit of the sink table (each Delta version, each Iceberg snapshot), each key's
    ``_cdc_version`` (the binlog offset of the state it shows) never decreases: no re-snapshot or
    replay took a row back to an older state."""
    columns = [*schema.key_columns, "_cdc_version"]
    last: dict[tuple, int] = {}
    for commit, rows in _every_commit(sink, schema.table_id, columns):
        for row in rows.to_pylist():
            key = tuple(row[k] for k in schema.key_columns)
            assert row["_cdc_version"] >= last.get(key, 0), f"{schema.table_id} {key} went back at commit {commit}"
            last[key] = row["_cdc_version"]


def _every_commit(sink, table_id: TableId, columns: list[str]):
    """(commit, the table's ``columns`` as of it), oldest first, for each commit the table keeps."""
    if isinstance(sink, IcebergSink):
        table = sink.open_table(table_id)
        for snapshot in sorted(table.snapshots(), key=lambda s: s.sequence_number or 0):
            yield snapshot.snapshot_id, table.scan(snapshot_id=snapshot.snapshot_id, selected_fields=tuple(columns)).to_arrow()
        return
    uri = sink.table_uri(table_id)
    for version in range(DeltaTable(uri).version() + 1):
        yield version, read_delta(uri, version=version, columns=columns)


def test_bad_table_fails_the_plan_task_before_any_spark_job(mysql_server, cdc_user, database, tmp_path):
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{database}`.nokey (a INT, b INT)")
    env = example_dag_env(tmp_path / "airflow", cdc_user, [TableId(database, "nokey")], sink_root=tmp_path / "lake",
                          state_dir=tmp_path / "state", split_rows=400, chunk_rows=1200)
    result = run_dag("mysqlcdc_example", env)
    assert result["state"] == "failed"
    states = {ti["task_id"]: ti["state"] for ti in result["tis"]}
    assert states[f"{database}__nokey.plan"] == "failed"
    assert states["stream"] != "success" and states["collect_splits"] != "success"
    assert not (tmp_path / "lake").exists(), "a Spark job ran although the plan failed"
    # dag.test() prints the task logs
    assert f"Table {database}.nokey has no primary key" in result["output"] and "ADD PRIMARY KEY" in result["output"]

    # a run next to a running one (a backfill's max_active_runs applies apart from the DAG's) stops at plan
    mark_running("mysqlcdc_example", result["run_id"], env)
    overlapping = run_dag("mysqlcdc_example", env)
    assert overlapping["state"] == "failed"
    assert {ti["state"] for ti in overlapping["tis"] if ti["task_id"].endswith(".plan")} == {"failed"}
    assert "1 other run(s) of DAG 'mysqlcdc_example' are running" in overlapping["output"]
    assert "has no primary key" not in overlapping["output"], "the overlap must be refused before anything else"
