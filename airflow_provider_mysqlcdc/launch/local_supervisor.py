"""The supervisor of a shared local Spark Connect server (launch/local_server.py says how the tasks
use it): ``python -m airflow_provider_mysqlcdc.launch.local_supervisor --serve FOLDER --idle-s N``, started
detached by the first task that needs the server.

It starts the JVM (Spark's ``SparkConnectServer`` on loopback, asking for a token only the folder's
owner can read; the kernel kills the JVM if the supervisor dies), writes ``server.json`` once the
server accepts sessions, and watches: the JVM ended, the record goes and the supervisor with it (the
next task starts a new server); no live lease for ``idle_s``, the server is stopped. Its log,
``supervisor.log``, says when it started, how many leases it saw, and why it stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from airflow_provider_mysqlcdc.launch.local_server import (
    DEFAULT_IDLE_S,
    RECORD_FILE,
    SERVER_CLASS,
    SUPERVISOR_FILE,
    ServerKind,
    ServerRecord,
    live_leases,
    locked,
    read_record,
    stop_server,
    write_pid,
)
from airflow_provider_mysqlcdc.launch.submit import program_environment, spark_home

READY_LINE = "Spark Connect server started"
#: the server's log is emptied when it grows past this (the JVM appends to it)
MAX_LOG_BYTES = 64 << 20


def serve(folder: Path, idle_s: float, poll_s: float = 0.5) -> int:
    """The supervisor (module doc): start the JVM, record it once ready, stop it when idle."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    write_pid(folder, os.getpid())  # its starter wrote it already, unless started by hand
    kind = ServerKind.from_json((folder / "kind.json").read_text())
    for session in (folder / "sessions").glob("*.json"):  # of processes whose leases went with them
        if not (folder / "leases" / f"{session.stem}.lease").exists():
            session.unlink(missing_ok=True)

    token, port, ui_port = secrets.token_urlsafe(24), _free_port(), _free_port()
    env = program_environment()
    env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=kind.python,
               SPARK_CONNECT_AUTHENTICATE_TOKEN=token)  # the environment: never in ps
    command = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", kind.master,
               "--name", "mysqlcdc local Spark Connect server",
               "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
               "--conf", f"spark.ui.port={ui_port}",
               # a session's work whose client is gone (a task killed -9) is stopped soon, not after 5 minutes
               "--conf", "spark.connect.execute.manager.detachedTimeout=60s",
               *(arg for k, v in kind.conf for arg in ("--conf", f"{k}={v}"))]
    log = folder / "server.log"
    log.touch()
    start_of_log = log.stat().st_size  # an earlier server's lines are not this one's
    with open(log, "ab") as output:
        server = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=output,
                                  stderr=subprocess.STDOUT, cwd=folder, start_new_session=True,
                                  preexec_fn=_end_with_parent())
    try:
        while f"{READY_LINE} at: " not in _read_from(log, start_of_log) or not _accepts(port):
            if server.poll() is not None or stopping.wait(0.2):
                print(f"the server ended while starting: {server.poll()}", flush=True)
                return 1
        _write_record(folder, ServerRecord(os.getpid(), server.pid, port, ui_port, token))
        print(f"up on port {port} (pid {server.pid})", flush=True)
        idle_since, seen = time.monotonic(), -1
        while not stopping.wait(poll_s):
            if server.poll() is not None:
                print(f"the server ended with code {server.returncode}", flush=True)
                return 1
            leases = live_leases(folder / "leases")
            if leases != seen:
                print(f"leases: {leases}", flush=True)
                seen = leases
            if log.stat().st_size > MAX_LOG_BYTES:  # a server lives long: its log is cut back, not kept whole
                os.truncate(log, 0)
            if leases:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since >= idle_s:
                with locked(folder / "start.lock"):
                    if not live_leases(folder / "leases"):
                        _retire(folder)  # under the lock: no task takes the server now, nor waits for it
                        print(f"idle for {idle_s:.0f} s: stopping", flush=True)
                        return 0
                idle_since = time.monotonic()
        print("stopped", flush=True)
        return 0
    finally:
        _remove_own_pid(folder)  # a task arriving now starts a new server, not waiting for this one to end
        stop_server(server.pid, folder)
        server.wait()
        record = read_record(folder)
        if record is not None and record.supervisor_pid == os.getpid():  # not removed on the way out yet
            with locked(folder / "start.lock"):  # not beside a task reading it
                _remove_own_record(folder)


def _retire(folder: Path) -> None:
    """This supervisor is stopping: its record and pid file go (under ``start.lock``)."""
    _remove_own_pid(folder)
    _remove_own_record(folder)


def _remove_own_pid(folder: Path) -> None:
    with contextlib.suppress(OSError, ValueError):
        if int((folder / SUPERVISOR_FILE).read_text()) == os.getpid():
            (folder / SUPERVISOR_FILE).unlink()


def _remove_own_record(folder: Path) -> None:
    """Remove the record if it is this supervisor's (a new server's may have replaced it)."""
    record = read_record(folder)
    if record is not None and record.supervisor_pid == os.getpid():
        (folder / RECORD_FILE).unlink(missing_ok=True)


def _write_record(folder: Path, record: ServerRecord) -> None:
    staged = folder / f".{RECORD_FILE}.{os.getpid()}"
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(asdict(record), handle)
    os.replace(staged, folder / RECORD_FILE)


def _read_from(path: Path, offset: int) -> str:
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read().decode(errors="replace")


def _accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _end_with_parent() -> Callable[[], None]:
    """What the JVM's process runs before spark-submit: the kernel kills it when its supervisor dies,
    even by SIGKILL (``PR_SET_PDEATHSIG``; spark-submit and spark-class exec the JVM in the same
    process, which keeps it). ``prctl`` is looked up here, before the fork."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    supervisor = os.getpid()

    def in_child() -> None:
        if prctl(1, signal.SIGKILL) != 0 or os.getppid() != supervisor:  # PR_SET_PDEATHSIG = 1
            os._exit(1)  # not set, or the supervisor died before it was: nothing would stop this JVM

    return in_child


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="The supervisor of a shared local Spark Connect server.")
    parser.add_argument("--serve", required=True, metavar="FOLDER")
    parser.add_argument("--idle-s", type=float, default=DEFAULT_IDLE_S)
    args = parser.parse_args(argv)
    return serve(Path(args.serve), args.idle_s)


if __name__ == "__main__":
    raise SystemExit(main())
