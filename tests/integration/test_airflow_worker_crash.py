"""A worker that crashes under a continuous stream does not start a second one: the retry reconnects.

Under a real scheduler (``airflow standalone``, the stream task with one retry and a short heartbeat
timeout), the example DAG's continuous stream runs detached from its task. The test kills -9 the
task's process and the worker process supervising it, as a crashed worker would be gone. The
scheduler fails the try when its heartbeat stops and retries it; the retry finds the stream's
report folder in the task state store (``ResumableJobMixin``) and follows the running stream
instead of submitting another: the pipeline's lease stays the first one, with the same Spark
application. Marking the retry failed then stops the stream, which it only reconnected to.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.state.lease import StreamLeases
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.airflow_standalone import AirflowStandalone
from devtools.dag_runner import example_dag_env
from devtools.workload import SAMPLE_TABLES, create_sample_tables

from .helpers import spark_processes_of, stream_drivers
from .test_airflow_kill import STREAM_ONLY

pytestmark = pytest.mark.integration

DAG_ID = "mysqlcdc_example"  # the example DAG, as the environment sets it up


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


@pytest.mark.usefixtures("reap_spark")
def test_a_retry_after_a_worker_crash_reconnects_to_the_running_stream(mysql_server, cdc_user, database, tmp_path):
    [table] = create_sample_tables(mysql_server.connect(), database, rows_per_table=300, seed=4,
                                   tables=SAMPLE_TABLES[:1])
    env = example_dag_env(tmp_path / "airflow", cdc_user, [table], sink_root=tmp_path / "lake",
                          state_dir=tmp_path / "state", split_rows=1000, chunk_rows=1000)
    (tmp_path / "tmp").mkdir()
    env.update(TMPDIR=str(tmp_path / "tmp"), AIRFLOW__CORE__DEFAULT_TASK_RETRIES="1",
               AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY="1", AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT="10",
               AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL="2")
    leases = StreamLeases(PipelineState(str(tmp_path / "state" / DAG_ID)))
    with AirflowStandalone(env) as airflow:
        airflow.wait_for_dag(DAG_ID)
        run_id = airflow.trigger(DAG_ID, STREAM_ONLY)
        airflow.wait_until(lambda: (leases.current() or None) and leases.current().live, 600,
                           "the continuous stream holds the pipeline's lease")
        # once the task has recorded the stream in its task state store and follows it
        airflow.wait_until(lambda: "following the stream" in airflow.task_log(DAG_ID, run_id, "stream", 1), 60,
                           "the stream task follows its stream")
        first = leases.current()
        [driver] = stream_drivers(tmp_path)
        task = _parent(_parent(driver))  # the driver's parent is spark-submit, the task's child
        supervisor = _parent(task)
        for pid in (task, supervisor):  # the worker crashes; the stream, in a session of its own, does not
            os.kill(pid, signal.SIGKILL)

        airflow.wait_until(lambda: (airflow.task_instance(DAG_ID, run_id, "stream") or {}).get("try_number") == 2
                           and airflow.task_state(DAG_ID, run_id, "stream") == "running", 180,
                           "the stream task's retry runs")
        airflow.wait_until(lambda: "Reconnecting to existing job" in airflow.task_log(DAG_ID, run_id, "stream", 2),
                           60, "the retry reconnects to the stream")
        # from here on its on_kill can stop the stream it reconnected to
        airflow.wait_until(lambda: "following the stream" in airflow.task_log(DAG_ID, run_id, "stream", 2), 60,
                           "the retry follows the stream")
        now = leases.current()
        assert (now.lease.number, now.heartbeat.app_id) == (first.lease.number, first.heartbeat.app_id) and now.live
        assert stream_drivers(tmp_path) == [driver]

        airflow.mark(DAG_ID, run_id, "stream", "failed")
        deadline = time.monotonic() + 60
        while spark_processes_of(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not spark_processes_of(tmp_path), "the stream the retry reconnected to still runs"
    assert leases.current().released
