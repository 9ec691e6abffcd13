"""The shared local Spark Connect server's decisions (launch/local_server.py): which tasks share a
server, which leases are live, which record is usable; and how the operators choose it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.launch.local_runner import LocalSparkJobRunner
from airflow_provider_mysqlcdc.launch.local_server import (
    RECORD_FILE,
    SUPERVISOR_MODULE,
    LocalSparkServer,
    ServerKind,
    _is_supervisor,
    _take_lease,
    live_leases,
    read_record,
)
from airflow_provider_mysqlcdc.launch.submit import REDACTION_REGEX, SparkJobRunner
from airflow_provider_mysqlcdc.operators.snapshot import MySqlCdcSnapshotOperator


def test_tasks_with_other_spark_settings_get_a_server_of_their_own():
    base = ServerKind("local[2]", (("spark.sql.shuffle.partitions", "4"),), "/usr/bin/python3")
    assert base.key() == ServerKind.from_json(base.to_json()).key()
    others = [ServerKind("local[4]", base.conf, base.python), ServerKind("local[2]", (), base.python),
              ServerKind("local[2]", base.conf, "/opt/other/python")]
    assert len({base.key(), *(kind.key() for kind in others)}) == 4


def test_a_lease_is_live_while_its_holder_lives_and_a_dead_holders_lease_goes_with_its_session_file(tmp_path):
    leases, sessions = tmp_path / "leases", tmp_path / "sessions"
    leases.mkdir()
    sessions.mkdir()
    held, handle = _take_lease(leases)
    dead = leases / "4242-deadbeef.lease"
    dead.write_text("")  # a holder killed -9 leaves its file, unlocked, and its session's credentials
    (sessions / "4242-deadbeef.json").write_text('{"password": "p"}')
    (sessions / f"{held.stem}.json").write_text('{"password": "p"}')
    assert live_leases(leases) == 1 and held.exists() and not dead.exists()
    assert [p.name for p in sessions.iterdir()] == [f"{held.stem}.json"]
    handle.close()
    assert live_leases(leases) == 0 and not held.exists() and not list(sessions.iterdir())


def test_a_lease_held_by_another_process_is_live(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from pathlib import Path; "
                               "from airflow_provider_mysqlcdc.launch.local_server import _take_lease; "
                               f"held = _take_lease(Path({str(tmp_path)!r})); print('held', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    assert live_leases(tmp_path) == 1
    holder.kill()
    holder.wait()
    assert live_leases(tmp_path) == 0


@pytest.mark.parametrize("serves", ["another kind's folder", "a folder whose path ends with this one's"])
def test_a_record_whose_supervisor_is_another_process_is_not_the_server(tmp_path, serves):
    """After a restart the pid may be another process's, or another server's supervisor's."""
    server, other = LocalSparkServer(ServerKind(), tmp_path), LocalSparkServer(ServerKind("local[3]"), tmp_path)
    server.folder.mkdir(parents=True)
    impostor = supervisor_like(other.folder if serves == "another kind's folder" else Path(f"/elsewhere{server.folder}"))
    try:
        for pid in (impostor.pid, os.getpid()):
            (server.folder / RECORD_FILE).write_text('{"supervisor_pid": %d, "server_pid": %d, "port": 1, '
                                                     '"ui_port": 2, "token": "t"}' % (pid, os.getpid()))
            assert read_record(server.folder) is not None
            assert server.running() is None and not (server.folder / RECORD_FILE).exists()
    finally:
        impostor.communicate("")
    (server.folder / RECORD_FILE).write_text("{half a rec")
    assert read_record(server.folder) is None


def test_a_supervisor_whose_server_ended_is_not_waited_for_under_the_start_lock(tmp_path):
    """Its JVM died and it has not noticed yet: a task starting a server meanwhile starts a new one at
    once (the ending supervisor needs the start lock to remove its record)."""
    server = LocalSparkServer(ServerKind(), tmp_path, start_timeout_s=60)
    server.folder.mkdir(parents=True)
    supervisor = supervisor_like(server.folder)
    try:
        (server.folder / RECORD_FILE).write_text('{"supervisor_pid": %d, "server_pid": %d, "port": 1, '
                                                 '"ui_port": 2, "token": "t"}' % (supervisor.pid, os.getpid()))
        started = time.monotonic()
        assert server._wait_for_record(supervisor.pid, None) is None
        assert time.monotonic() - started < 5
    finally:
        supervisor.communicate("")


def supervisor_like(folder: Path) -> subprocess.Popen[str]:
    """A process whose command line is a supervisor's of ``folder`` (once it has exec'd Python)."""
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "-m", SUPERVISOR_MODULE,
                                "--serve", str(folder)], stdin=subprocess.PIPE, text=True)
    command = Path(f"/proc/{process.pid}/cmdline")
    while b"--serve" not in command.read_bytes():
        time.sleep(0.01)
    return process


def test_the_supervisor_of_a_folder_is_known_by_its_command_line(tmp_path):
    folder = tmp_path / "kind"
    process = supervisor_like(folder)
    try:
        assert _is_supervisor(process.pid, folder) and not _is_supervisor(process.pid, tmp_path)
    finally:
        process.communicate("")


def operator(**kwargs) -> MySqlCdcSnapshotOperator:
    return MySqlCdcSnapshotOperator(task_id="t", state_location="/tmp/s", sink_root="/tmp/l", chunk={}, **kwargs)


def test_a_local_master_without_a_connection_runs_on_the_shared_server_by_default(monkeypatch):
    monkeypatch.delenv("AIRFLOW__MYSQLCDC__LOCAL_SPARK", raising=False)
    runner = operator(spark_conf={"spark.sql.shuffle.partitions": "3"}).spark_runner
    assert isinstance(runner, LocalSparkJobRunner)
    conf = dict(runner.server.kind.conf)  # the programs' defaults (redaction among them), then the task's own
    assert conf["spark.sql.shuffle.partitions"] == "3" and conf["spark.redaction.regex"] == REDACTION_REGEX
    assert isinstance(operator(spark_master="spark://elsewhere:7077").spark_runner, SparkJobRunner)
    monkeypatch.setenv("AIRFLOW__MYSQLCDC__LOCAL_SPARK", "submit")
    assert not isinstance(operator().spark_runner, LocalSparkJobRunner)


def test_an_unknown_local_spark_setting_is_refused_with_the_choices(monkeypatch):
    monkeypatch.setenv("AIRFLOW__MYSQLCDC__LOCAL_SPARK", "jvm-per-task")
    with pytest.raises(ConfigurationError, match="'submit'.*'shared'"):
        operator().spark_runner  # noqa: B018
