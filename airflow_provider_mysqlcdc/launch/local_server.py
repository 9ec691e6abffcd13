"""A Spark Connect server on the Airflow worker itself, shared by the tasks that run there: how the
pipeline's programs run with ``local_spark="shared"`` and no ``spark_conn_id`` (launch/local_runner.py).

Why: a chunk task that starts its own JVM with spark-submit pays half a minute or more on a busy
two-core worker before it reads a row; a session on a running server costs a second or two. So the
first task that needs Spark on a worker starts a server, every later task with the same Spark
settings uses it, and it stops once no task has used it for ``idle_s``.

How, with files and processes only (nothing to install as a service):

- **A folder per kind of server**, ``<MYSQLCDC_LOCAL_SPARK_DIR or ~/.cache/mysqlcdc/local-spark>/<key>``
  (0700), the key a hash of what the server is (``ServerKind``: master, static Spark conf, the Python
  its workers run, the Spark version). A task with other settings gets a server of its own.
- **A supervisor** (launch/local_supervisor.py), detached from the task that started it, starts the
  JVM (Spark's ``SparkConnectServer`` on loopback, asking for a token only the folder's owner can
  read; the JVM dies with it), writes ``server.json`` (0600) once it accepts sessions, and watches
  it: the JVM ended, the record goes and the supervisor with it (the next task starts a new server);
  no lease for ``idle_s``, the server is stopped. Its pid is in ``supervisor.pid`` from its start
  (written by the task that starts it) until it stops.
- **Leases**: a task holds an exclusive ``flock`` on a file of its own under ``leases/`` while it uses
  the server. The kernel drops the lock when the task's process ends however it ends (kill -9 too),
  so the supervisor counts only live users, and removes a dead one's file.
- **Starting** is done under ``start.lock``: the first task starts the supervisor and waits for its
  record; the others wait for the lock, then find the server up. A task that finds a supervisor
  still starting (its starter was killed) waits for that one instead of starting a second; one whose
  JVM ended is not waited for. The supervisor takes the same lock before stopping an idle server and
  counts the leases again under it, so a task arriving then either finds the server up or starts a
  new one. A record whose supervisor died (a worker restart, a kill) is stale: its JVM, if still
  alive, is stopped and a new server started.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Collection, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from airflow_provider_mysqlcdc.cdc.errors import SparkJobFailed
from airflow_provider_mysqlcdc.launch.submit import output_tail, program_environment

#: where the servers' folders are (default ``~/.cache/mysqlcdc/local-spark``)
LOCAL_SPARK_DIR_VARIABLE = "MYSQLCDC_LOCAL_SPARK_DIR"
#: a server no task used for this long is stopped
DEFAULT_IDLE_S = 300.0
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: the supervisor's module (launch/local_supervisor.py), run with ``python -m``
SUPERVISOR_MODULE = "airflow_provider_mysqlcdc.launch.local_supervisor"
RECORD_FILE = "server.json"
#: the pid of the folder's supervisor, written before it starts the JVM
SUPERVISOR_FILE = "supervisor.pid"


@dataclass(frozen=True)
class ServerKind:
    """What a server is: tasks whose programs need the same one share it."""

    master: str = "local[2]"
    conf: tuple[tuple[str, str], ...] = ()  # Spark conf the server starts with (static conf too)
    python: str = sys.executable  # what its Python workers run

    def key(self) -> str:
        from pyspark.version import __version__

        text = json.dumps([self.master, sorted(self.conf), self.python, __version__])
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "ServerKind":
        data = json.loads(text)
        return cls(data["master"], tuple((k, v) for k, v in data["conf"]), data["python"])


@dataclass(frozen=True)
class ServerRecord:
    """A running server, as its supervisor records it once the server accepts sessions."""

    supervisor_pid: int
    server_pid: int
    port: int
    ui_port: int
    token: str = field(repr=False)

    @property
    def url(self) -> str:
        """The Connect URL: the token is sent over a loopback channel (gRPC local credentials)."""
        return f"sc://localhost:{self.port}/;token={self.token}"


@dataclass(frozen=True)
class ServerLease:
    """A process's use of the server: the server, and where this use's private session file goes (the
    supervisor deletes it with the lease of a process that ended without doing so)."""

    record: ServerRecord
    session_file: Path


def local_spark_root() -> Path:
    configured = os.environ.get(LOCAL_SPARK_DIR_VARIABLE)
    return (Path(configured) if configured else Path.home() / ".cache" / "mysqlcdc" / "local-spark").absolute()


class LocalSparkServer:
    """The shared server of one ``ServerKind`` on this machine (module doc)."""

    def __init__(self, kind: ServerKind, root: Path | None = None, *, idle_s: float = DEFAULT_IDLE_S,
                 start_timeout_s: float = 300.0, private: Collection[str] = ()):
        self.kind = kind
        self.folder = (root or local_spark_root()).absolute() / kind.key()
        self.private = tuple(private)  # variables of this process the server must not inherit
        self.idle_s = idle_s
        self.start_timeout_s = start_timeout_s

    @contextlib.contextmanager
    def lease(self) -> Iterator[ServerLease]:
        """The running server (started if none is), used by this process until the block ends."""
        _private_folder(self.folder / "leases")
        _private_folder(self.folder / "sessions")
        lease_file, handle = _take_lease(self.folder / "leases")
        try:
            with locked(self.folder / "start.lock"):
                record = self.running()
                if record is None:
                    record = self._start()
            yield ServerLease(record, _session_file(lease_file))
        finally:
            _session_file(lease_file).unlink(missing_ok=True)
            lease_file.unlink(missing_ok=True)
            handle.close()

    def running(self) -> ServerRecord | None:
        """The server, when its supervisor and JVM are alive; a stale record's JVM is stopped."""
        record = read_record(self.folder)
        if record is None:
            return None
        if not _is_supervisor(record.supervisor_pid, self.folder):  # died, or the machine restarted
            stop_server(record.server_pid, self.folder)  # nothing would stop it when idle
            (self.folder / RECORD_FILE).unlink(missing_ok=True)
            return None
        # a JVM that ended is its supervisor's to clean up: a new server starts beside it meanwhile
        return record if is_server(record.server_pid, self.folder) else None

    def _start(self) -> ServerRecord:
        starting = _supervisor_of(self.folder)
        if starting is not None:  # started by a task killed before the server was up: wait for that one
            record = self._wait_for_record(starting, None)
            if record is not None:
                return record
        (self.folder / "kind.json").write_text(self.kind.to_json())
        env = program_environment(self.private)
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        with open(self.folder / "supervisor.log", "ab") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", SUPERVISOR_MODULE, "--serve", str(self.folder),
                 "--idle-s", str(self.idle_s)], env=env, stdin=subprocess.DEVNULL, stdout=output,
                stderr=subprocess.STDOUT, cwd=self.folder, start_new_session=True)
        write_pid(self.folder, process.pid)  # at once: a task killed now leaves a supervisor the next one finds
        threading.Thread(target=process.wait, name="reap-local-spark-supervisor", daemon=True).start()
        record = self._wait_for_record(process.pid, process)
        if record is None:
            raise SparkJobFailed(f"The local Spark Connect server in {self.folder} did not start: "
                                 f"{output_tail(self.folder / 'supervisor.log', 5)}\n{output_tail(self.folder / 'server.log', 30)}")
        return record

    def _wait_for_record(self, supervisor_pid: int, process: subprocess.Popen[bytes] | None) -> ServerRecord | None:
        """The record of the supervisor ``supervisor_pid`` once its server accepts sessions; None if the
        supervisor ended first, its server ended, or it did not get there within the start timeout
        (then it is stopped)."""
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            record = read_record(self.folder)
            if record is not None and record.supervisor_pid == supervisor_pid:
                # its JVM ended: the supervisor is going too (it must not be waited for under the lock)
                return record if is_server(record.server_pid, self.folder) else None
            ended = process.poll() is not None if process else not _is_supervisor(supervisor_pid, self.folder)
            if ended:
                return None
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(supervisor_pid, signal.SIGTERM)
                return None
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server now, whoever uses it (its supervisor stops the JVM and removes the record)."""
        _stop_supervisor(self.folder)


def stop_all(root: Path | None = None, timeout_s: float = 60.0) -> int:
    """Stop every server under ``root`` (default ``local_spark_root()``) and wait until their
    supervisors, which stop their JVMs first, have ended; how many were running."""
    stopping = [(folder, pid) for folder in (root or local_spark_root()).glob("*/")
                if (pid := _stop_supervisor(folder)) is not None]
    deadline = time.monotonic() + timeout_s
    while any(_is_supervisor(pid, folder) for folder, pid in stopping) and time.monotonic() < deadline:
        time.sleep(0.2)
    return len(stopping)


def _stop_supervisor(folder: Path) -> int | None:
    """Ask the supervisor of ``folder`` to stop its server (or its start); its pid, if one was running."""
    pid = _supervisor_of(folder)
    if pid is not None:  # a supervisor still starting stops too (its JVM is not up, or ends with it)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    return pid


def _supervisor_of(folder: Path) -> int | None:
    """The live supervisor of ``folder`` (its starter records its pid right after starting it), or None."""
    try:
        pid = int((folder / SUPERVISOR_FILE).read_text())
    except (OSError, ValueError):
        return None
    return pid if _is_supervisor(pid, folder) else None


def read_record(folder: Path) -> ServerRecord | None:
    try:
        return ServerRecord(**json.loads((folder / RECORD_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def live_leases(folder: Path) -> int:
    """How many processes hold a lease in ``folder``; a dead one's lease file is removed, and its
    session file with it."""
    live = 0
    for path in folder.glob("*.lease"):
        try:
            with open(path, "a") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            live += 1
        except FileNotFoundError:
            continue
        else:
            _session_file(path).unlink(missing_ok=True)  # its holder ended without removing them
            path.unlink(missing_ok=True)
    return live


def _take_lease(folder: Path) -> tuple[Path, IO[str]]:
    """A lease file of this process, locked before it is visible (the supervisor never sees it free)."""
    name = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staged, lease = folder / f".{name}", folder / f"{name}.lease"
    handle = open(staged, "w")
    fcntl.flock(handle, fcntl.LOCK_EX)
    os.replace(staged, lease)
    return lease, handle


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _private_folder(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    for folder in (path, path.parent):
        os.chmod(folder, 0o700)


def _session_file(lease_file: Path) -> Path:
    return lease_file.parent.parent / "sessions" / f"{lease_file.stem}.json"


def _command_of(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _is_supervisor(pid: int, folder: Path) -> bool:
    """Whether ``pid`` is the supervisor of ``folder`` (not a process that took its number since)."""
    argv = _command_of(pid).split(b"\0")
    return (SUPERVISOR_MODULE.encode() in argv and b"--serve" in argv[:-1]
            and argv[argv.index(b"--serve") + 1] == str(folder).encode())


def is_server(pid: int, folder: Path) -> bool:
    """Whether ``pid`` is the server JVM of ``folder`` (it runs there), not another one or another process."""
    try:
        return SERVER_CLASS.encode() in _command_of(pid) and Path(f"/proc/{pid}/cwd").resolve() == folder.resolve()
    except OSError:
        return False


def stop_server(pid: int, folder: Path, timeout_s: float = 30.0) -> None:
    """Stop the server JVM of ``folder`` (its process group; its Python workers end with it)."""
    if not is_server(pid, folder):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while is_server(pid, folder) and time.monotonic() < deadline:
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def write_pid(folder: Path, pid: int) -> None:
    staged = folder / f".{SUPERVISOR_FILE}.{os.getpid()}"
    staged.write_text(str(pid))
    os.replace(staged, folder / SUPERVISOR_FILE)
