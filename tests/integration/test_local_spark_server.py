"""The worker's shared local Spark Connect server (launch/local_server.py, ``[mysqlcdc] local_spark =
shared``): a DAG's chunk tasks and its available-now stream run as sessions on one server their first
task started, exact and without a JVM of their own; the server is shared by processes at once, stops
once no live process holds a lease for its idle time (a killed task's lease included), and is started
again after its JVM was killed or its supervisor died (a worker restart)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.cdc.source.preflight import run_preflight
from airflow_provider_mysqlcdc.launch.local_server import (
    SERVER_CLASS,
    SUPERVISOR_FILE,
    LocalSparkServer,
    ServerKind,
    read_record,
    stop_all,
)
from airflow_provider_mysqlcdc.pipeline import group_id_for
from devtools.dag_runner import example_dag_env, run_dag
from devtools.verify import source_rows
from devtools.workload import SAMPLE_TABLES, RandomWriters, create_sample_tables

from .helpers import assert_same_rows, delta_rows, files_holding

pytestmark = pytest.mark.integration

#: a process holding a lease until its stdin closes, running a query on the server first
HOLDER = """
import sys
from pathlib import Path
from pyspark.sql import SparkSession
from airflow_provider_mysqlcdc.launch.local_server import LocalSparkServer, ServerKind
server = LocalSparkServer(ServerKind("local[2]"), Path(sys.argv[1]), idle_s=float(sys.argv[2]))
with server.lease() as lease:
    record = lease.record
    spark = SparkSession.builder.remote(record.url).create()
    print(record.port, record.server_pid, spark.range(1000).selectExpr("sum(id)").first()[0], flush=True)
    spark.stop()
    sys.stdin.read()
"""


def hold_lease(root: Path, idle_s: float = 2.0) -> tuple[subprocess.Popen[str], list[int]]:
    """A process holding a lease on the server of ``root`` (started if need be): it, and the port,
    the server's pid and the sum its query read."""
    process = start_holder(root, idle_s)
    return process, holder_read(process)


def start_holder(root: Path, idle_s: float = 2.0) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", HOLDER, str(root), str(idle_s)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def holder_read(process: subprocess.Popen[str]) -> list[int]:
    """What the holder printed once its lease and query were done: port, server pid, sum."""
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, f"the lease holder ended: {process.wait()}"
    return [int(n) for n in line.split()]


def wait_for(predicate, what: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def is_server(pid: int) -> bool:
    try:
        return SERVER_CLASS.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_a_dag_runs_its_chunk_tasks_and_stream_as_sessions_on_one_shared_local_server(
        mysql_server, cdc_user, database, tmp_path):
    conn = mysql_server.connect()
    [table] = create_sample_tables(conn, database, rows_per_table=1500, seed=71, tables=SAMPLE_TABLES[1:2])
    schema = run_preflight(cdc_user, [table]).schemas[table]
    lake, state_dir, root = tmp_path / "lake", tmp_path / "state", tmp_path / "local-spark"
    env = example_dag_env(tmp_path / "airflow", cdc_user, [table], sink_root=lake, state_dir=state_dir,
                          split_rows=500, chunk_rows=600)
    env.update(AIRFLOW__MYSQLCDC__LOCAL_SPARK="shared", AIRFLOW__MYSQLCDC__LOCAL_SPARK_IDLE_S="600",
               MYSQLCDC_LOCAL_SPARK_DIR=str(root))
    try:
        with RandomWriters(mysql_server.admin, database, writers=1, seed=711, pause_s=0.01, tables=SAMPLE_TABLES[1:2]):
            result = run_dag("mysqlcdc_example", env, conf={"stream_mode": "available-now"})
        assert result["state"] == "success", result["output"][-5000:]
        chunks = [k for k in result["xcoms"] if k.startswith(f"{group_id_for(table.quoted)}.snapshot[") and k.endswith("]")]
        assert len(chunks) >= 2, list(result["xcoms"])
        assert result["output"].count("Spark Connect session") >= len(chunks) + 1  # each chunk task and the stream
        assert "Spark-Submit cmd" not in result["output"]  # no JVM started by a task
        # the next run's stream takes what the writer changed after the first one's ended, on the same server
        again = run_dag("mysqlcdc_example", env, conf={"stream_mode": "available-now"})
        assert again["state"] == "success", again["output"][-5000:]
        assert_same_rows(table, source_rows(mysql_server.admin, schema), delta_rows(str(lake), schema))
        [folder] = root.iterdir()
        assert (folder / "supervisor.log").read_text().count("up on port") == 1  # one server for both runs
        assert read_record(folder) is not None  # still up for the next tasks, until idle
        assert list((folder / "sessions").iterdir()) == []  # each session's credentials file deleted
        assert files_holding(cdc_user.password, folder) == []
    finally:
        stop_all(root)


def test_processes_share_one_server_which_stops_once_no_live_process_holds_a_lease(tmp_path):
    root = tmp_path / "local-spark"
    first, second = start_holder(root), start_holder(root)  # both ask while no server runs
    (port, pid, total), (port_2, pid_2, total_2) = holder_read(first), holder_read(second)
    assert (port_2, pid_2) == (port, pid) and total == total_2 == sum(range(1000))
    server = LocalSparkServer(ServerKind("local[2]"), root)
    supervisor_log = server.folder / "supervisor.log"
    assert supervisor_log.read_text().count("up on port") == 1  # one started, the other waited for it
    killed, _ = hold_lease(root)
    wait_for(lambda: "leases: 3" in supervisor_log.read_text(), "the supervisor to count three leases")
    killed.kill()  # a task killed -9: its lease goes with it
    killed.wait()
    first.communicate("")
    wait_for(lambda: supervisor_log.read_text().endswith("leases: 1\n"), "the supervisor to count the second's alone")
    assert server.running() is not None  # a live lease keeps it up
    second.communicate("")
    wait_for(lambda: server.running() is None and not is_server(pid), "the idle server to stop")
    assert supervisor_log.read_text().endswith("leases: 0\nidle for 2 s: stopping\n")


def test_a_killed_server_and_a_dead_supervisor_are_replaced_by_the_next_lease(tmp_path):
    root = tmp_path / "local-spark"
    server = LocalSparkServer(ServerKind("local[2]"), root, idle_s=60)
    holder, (_, pid, _) = hold_lease(root, idle_s=60)
    holder.communicate("")
    os.kill(pid, signal.SIGKILL)  # the JVM dies: its supervisor removes the record and ends
    wait_for(lambda: read_record(server.folder) is None, "the supervisor to notice")
    holder, (_, pid_2, total) = hold_lease(root, idle_s=60)
    holder.communicate("")
    assert pid_2 != pid and total == sum(range(1000))

    record = read_record(server.folder)
    assert record is not None
    os.kill(record.supervisor_pid, signal.SIGKILL)  # as a worker restart leaves it: a record, no supervisor
    wait_for(lambda: not is_server(pid_2), "the JVM to end with its supervisor")  # PR_SET_PDEATHSIG
    holder, (_, pid_3, total) = hold_lease(root, idle_s=2)
    holder.communicate("")
    assert pid_3 != pid_2 and total == sum(range(1000))
    wait_for(lambda: server.running() is None and not is_server(pid_3), "the new server to stop once idle")


def test_a_server_whose_starting_task_was_killed_is_used_by_the_next_task_not_started_twice(tmp_path):
    root = tmp_path / "local-spark"
    server = LocalSparkServer(ServerKind("local[2]"), root)
    starter = start_holder(root, idle_s=60)
    wait_for(lambda: (server.folder / SUPERVISOR_FILE).exists(), "the starting task's supervisor")
    assert read_record(server.folder) is None  # the JVM takes seconds to start: the task dies before
    starter.kill()
    starter.wait()
    holder, (_, pid, total) = hold_lease(root, idle_s=60)
    holder.communicate("")
    assert total == sum(range(1000))
    assert (server.folder / "supervisor.log").read_text().count("up on port") == 1  # its server, not a second
    assert stop_all(root) == 1 and not is_server(pid)  # and stop_all returns once it is down
