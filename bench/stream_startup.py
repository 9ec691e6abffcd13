"""What an available-now stream costs around its work (``bin/bench --only stream-startup``).

An available-now stream task (one spark-submit) applies 100 row changes of a small table, three
times, each run after 100 new changes. Its phases come from the timestamps and figures of its own
log (spark/stream_job.py writes them for every run, so a task log shows them too):

- JVM and Spark session: from the launch to the stream job's first line;
- preparation: lease, sink positions against the binlog head, spill folders, checkpoint identity;
- the binlog source's set-up: registering and loading the Python data source, which Spark plans in
  a Python worker of its own;
- query start, offsets and planning: Spark's ``latestOffset``, ``getBatch`` and ``queryPlanning``
  of the first batch, and the rest of the time until the batch starts applying;
- the batch: reading the binlog (the Python workers' start included, from Spark's own figures for
  them) and merging into Delta;
- checkpoint: Spark's ``walCommit`` and ``commitOffsets``;
- shutdown: from the batch's end to the process's exit (the query ends, the session stops).

These runs are on Structured Streaming (whose phases these are, and which every earlier run
measured). Then three available-now runs of a 1,000-change backlog on the default path (the driver
engine, launched with the conf an operator's launch gives it), end to end only; then the same three
100-change runs as Spark Connect sessions on a server started beforehand (a stream task with a
``spark_connect`` connection), end to end only: their batches run on the server.
"""

from __future__ import annotations

import datetime as dt
import re
import statistics
import time
from pathlib import Path

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, stream_only_split
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.state.registry import PipelineState
from bench.customer_table import fresh_table
from bench.fixed_cost import connect_runner
from bench.jobs import BASELINE_ENGINE
from devtools.spark_connect_server import SparkConnectServer
from devtools.spark_submit import SparkSubmit
from devtools.throwaway_server import ThrowawayMariaDB

RUNS = 3
CHANGES = 100
#: the backlog of the default path's runs (issue 48: an available-now run of it end to end <= 5 s)
BACKLOG = 1_000
PHASES = ("JVM and Spark session", "preparation", "the binlog source's set-up", "query start, offsets and planning",
          "Python workers' start", "reading the binlog (after the workers' start)", "merging into Delta",
          "the rest of the batch", "checkpoint", "shutdown")

_STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO airflow_provider_mysqlcdc\.[\w.]+: "  # stream_job, applier


def bench_stream_startup(server: ThrowawayMariaDB, work: Path, secrets: Path) -> dict:
    table = TableId("bench", "startup")
    conn = _startup_table(server, table)
    job_file = _stream_job(conn, table, work, "startup", stream_engine=BASELINE_ENGINE)
    # at INFO, so that the executors' Python worker start-up lines ("Times: total = ...") are in its log
    submit = SparkSubmit(master="local[2]", work_dir=work / "spark", conf={"spark.log.level": "INFO"})
    runs = []
    for _ in range(RUNS):
        _change_rows(conn, table, CHANGES)
        launched = time.time()
        result = submit.run("binlog_stream.py", ["--job", str(job_file)], secrets)
        ended = time.time()
        assert result["changes_applied"] == CHANGES, result
        runs.append(_phases(submit.last_log, launched, ended))
        print("stream start-up: " + ", ".join(f"{name} {s:.2f}s" for name, s in runs[-1].items()), flush=True)
    default_path = _default_path_runs(server, work, secrets)
    connected = []
    source = SourceConfig.from_private_file(secrets)
    with SparkConnectServer(work / "connect-stream") as connect:
        runner = connect_runner(connect, source)
        for _ in range(RUNS):
            _change_rows(conn, table, CHANGES)
            started = time.monotonic()
            result = runner.run("binlog_stream.py", job_file.read_text(), source=source, report_folder="")
            connected.append(time.monotonic() - started)
            assert result["changes_applied"] == CHANGES, result
            print(f"stream task on Spark Connect: {connected[-1]:.1f}s", flush=True)
    return {"changes": CHANGES, "runs": runs, "connect_s": connected, "default_path_s": default_path}


def _default_path_runs(server: ThrowawayMariaDB, work: Path, secrets: Path) -> list[float]:
    """``RUNS`` available-now runs of a ``BACKLOG``-change backlog on the default stream engine, through
    the same launcher as an operator (its conf included), end to end: the launch to the process's exit.
    A table of their own: the other runs' pipeline does not see their changes."""
    table = TableId("bench", "startup_default")
    conn = _startup_table(server, table)
    job_file = _stream_job(conn, table, work, "startup-default")
    submit = SparkSubmit(master="local[2]", work_dir=work / "spark")
    seconds = []
    for _ in range(RUNS):
        _change_rows(conn, table, BACKLOG)
        started = time.monotonic()
        result = submit.run("binlog_stream.py", ["--job", str(job_file)], secrets)
        seconds.append(time.monotonic() - started)
        assert result["changes_applied"] == BACKLOG, result
        print(f"available-now on the default path, {BACKLOG:,} changes: {seconds[-1]:.2f}s", flush=True)
    return seconds


def _startup_table(server: ThrowawayMariaDB, table: TableId):
    """A fresh table of 1,000 rows (``id``, ``v``); a connection to the server."""
    return fresh_table(server, table, "id INT PRIMARY KEY, v INT", "SELECT seq, 0 FROM bench.seq_1_to_1000")


def _stream_job(conn, table: TableId, work: Path, name: str, **settings) -> Path:
    """A stream job file of ``table`` from the binlog's head into a sink table of its own (``name``)."""
    lake, state = work / f"{name}-lake", work / f"{name}-state"
    open_sink(SinkSpec(str(lake))).prepare(load_table_schema(conn, table))
    PipelineState(str(state)).commit({table: CapturedTable("id", [stream_only_split(table, "id", current_offset(conn))])})
    job_file = work / f"{name}.json"
    job_file.write_text(StreamJob(state=str(state), sink=SinkSpec(str(lake)), **settings).to_json())
    return job_file


def _change_rows(conn, table: TableId, rows: int) -> None:
    """An update of the table's first ``rows`` rows, committed: the next run's backlog."""
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {table.quoted} SET v = v + 1 WHERE id <= {rows}")
    conn.commit()


def _phases(log: str, launched: float, ended: float) -> dict[str, float]:
    def at(message: str) -> tuple[float, re.Match]:
        found = re.search(_STAMP + message, log, re.MULTILINE)
        if found is None:
            raise AssertionError(f"no {message!r} line in the stream's log:\n{log[-3000:]}")
        return dt.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp(), found

    started, _ = at("stream job started")
    prepared, _ = at(r"stream prepared in ([\d.]+)s")
    set_up, _ = at(r"stream query set up in ([\d.]+)s")
    batch_end, batch = at(r"stream batch \d+: \d+ changes applied in ([\d.]+)s \(([\d.]+)s reading the binlog, "
                          r"([\d.]+)s merging")
    _, spark = at(r"first batch \d+, Spark's phases: (.*)$")
    ms = {name: int(value) / 1000 for name, value in re.findall(r"(\w+) (\d+) ms", spark.group(2))}
    workers = max((int(boot) + int(init)) / 1000 for boot, init in
                  re.findall(r"Times: total = \d+, boot = (\d+), init = (\d+)", log))
    applied_s, read_s, merge_s = (float(batch.group(n)) for n in (2, 3, 4))  # 1: the stamp
    batch_start = batch_end - applied_s
    phases = {
        "JVM and Spark session": started - launched,
        "preparation": prepared - started,
        "the binlog source's set-up": set_up - prepared,
        # the offsets' write-ahead log is written before the batch runs, their commit after it
        "query start, offsets and planning": batch_start - set_up - ms.get("walCommit", 0),
        "Python workers' start": min(workers, read_s),
        "reading the binlog (after the workers' start)": max(0.0, read_s - workers),
        "merging into Delta": merge_s,
        "checkpoint": ms.get("walCommit", 0) + ms.get("commitOffsets", 0),
        "shutdown": ended - batch_end - ms.get("commitOffsets", 0),
    }
    phases["the rest of the batch"] = ended - launched - sum(phases.values())
    return {**phases, "end to end": ended - launched}


def stream_startup_report(result: dict) -> list[str]:
    runs = result["runs"]
    total = statistics.median(r["end to end"] for r in runs)
    lines = [f"## An available-now stream task's fixed cost: {result['changes']} row changes, {len(runs)} runs", "",
             "Each run is one spark-submit in local mode applying one batch; the phases come from the stream's own "
             "log lines (the same lines every stream task logs).", "",
             "| phase | median seconds | share | each run |", "|---|---:|---:|---|"]
    for phase in PHASES:
        values = [r[phase] for r in runs]
        median = statistics.median(values)
        lines.append(f"| {phase} | {median:.2f} | {median / total:.0%} | " + ", ".join(f"{v:.2f}" for v in values) + " |")
    lines.append(f"| **end to end** | **{total:.2f}** | 100% | " + ", ".join(f"{r['end to end']:.2f}" for r in runs) + " |")
    biggest = max(PHASES, key=lambda p: statistics.median(r[p] for r in runs))
    connect = result.get("connect_s")
    on_connect = [] if not connect else [
        f"- the same task as a Spark Connect session on a running server (the stream's connection a `spark_connect` "
        f"one): median {statistics.median(connect):.2f} s end to end (each run: "
        + ", ".join(f"{s:.2f}" for s in connect) + ")"]
    default_path = result.get("default_path_s")
    on_default = [] if not default_path else [
        f"- an available-now run of a {BACKLOG:,}-change backlog on the default path (the driver engine, launched as "
        f"an operator launches it): median {statistics.median(default_path):.2f} s end to end (each run: "
        + ", ".join(f"{s:.2f}" for s in default_path) + ") against <= 5 s: "
        + ("met" if statistics.median(default_path) <= 5 else "MISSED")]
    return lines + ["", f"- the biggest fixed cost: {biggest} (bench/notes.md has the plan)", *on_connect, *on_default, ""]
