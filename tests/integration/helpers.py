"""Assertions and installations shared by the integration tests."""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from devtools.spark_submit import SparkSubmit
from devtools.verify import Rows, differences
from devtools.verify import sink_rows as delta_rows  # noqa: F401 (the tests' name)


def assert_same_rows(table_id: TableId, expected: Rows, actual: Rows,
                     evidence: Callable[[], str] | None = None) -> None:
    problem = differences(expected, actual)
    if problem is not None:
        raise AssertionError(f"{table_id}: {problem}" + ("\n" + evidence() if evidence else ""))


def transactions_between(source: SourceConfig, start: BinlogOffset, end: BinlogOffset) -> int:
    """How many transactions (of any table) the binlog holds in (start, end].

    Stream offsets are compared with the server head this way, not byte for byte: MariaDB writes
    a Binlog_checkpoint event asynchronously after a rotation, so the head can move by a few bytes
    with no transaction behind it."""
    from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader, TransactionCommitted

    if end <= start:
        return 0
    reader = BinlogReader(source, start=start, end=end, key_columns={})
    return sum(isinstance(item, TransactionCommitted) for item in reader)


class SecretWatch:
    """Samples every process's argv, and the environment of Spark's processes, for a secret while
    a test runs; ``files_holding`` then searches what the pipeline wrote.

    Spark's processes are the JVMs spark-submit starts and the Python workers they fork: they must
    get the source password only through the private file ``MYSQLCDC_SOURCE_FILE`` names."""

    def __init__(self, secret: str, interval_s: float = 0.5):
        self.secret = secret.encode()
        self.interval_s = interval_s
        self.found: list[str] = []
        self._reported: set[str] = set()  # pids, each reported once
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "SecretWatch":
        self._thread.start()
        return self

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(timeout=30)
        return self.found

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples += 1
            for proc in Path("/proc").iterdir():
                if not proc.name.isdigit() or proc.name in self._reported:
                    continue
                try:
                    argv = (proc / "cmdline").read_bytes()
                    if self.secret in argv:
                        self.found.append(f"argv of process {proc.name}: {argv[:200]!r}")
                        self._reported.add(proc.name)
                    if b"org.apache.spark" in argv or b"pyspark" in argv:
                        if self.secret in (proc / "environ").read_bytes():
                            self.found.append(f"environment of Spark process {proc.name}: {argv[:200]!r}")
                            self._reported.add(proc.name)
                except OSError:  # the process ended meanwhile
                    continue


def files_holding(secret: str, root: Path) -> list[str]:
    """Files under ``root`` whose bytes contain ``secret``, except the private credential files
    tests write on purpose (in folders named ``secrets``)."""
    needle = secret.encode()
    return [str(p) for p in root.rglob("*")
            if p.is_file() and "secrets" not in p.relative_to(root).parts and needle in p.read_bytes()]


@dataclass(frozen=True)
class WheelInstall:
    """The provider installed from its wheel into a fresh virtualenv: its interpreter, and the
    example DAG's folder inside the installed package."""

    python: Path
    example_dags: Path
    wheel: Path  # the built wheel file


def install_wheel(tmp: Path) -> WheelInstall:
    """Build the wheel (``python -m build``) from a copy of the project's files and pip-install it
    into a fresh virtualenv; the copy is deleted, so no checkout lies beside the install. The
    virtualenv takes the provider's dependencies (Airflow, PySpark, ...) from this environment by a
    plain path line in a ``.pth`` file, which does not run this environment's editable-install hook:
    the provider itself comes only from the wheel, and nothing is downloaded."""
    repo = Path(__file__).resolve().parents[2]
    source, dist, venv = tmp / "source", tmp / "dist", tmp / "venv"
    shutil.copytree(repo, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "*.egg-info", "__pycache__", ".pytest_cache", "var"))

    def run(*cmd: object) -> str:
        proc = subprocess.run([str(c) for c in cmd], cwd=tmp, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise AssertionError(f"{' '.join(map(str, cmd))} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
        return proc.stdout.strip()

    run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, source)
    shutil.rmtree(source)
    run(Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}", "-m", "venv", venv)
    python = venv / "bin" / "python"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
    (site / "mysqlcdc_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (wheel,) = dist.glob("*.whl")
    run(python, "-m", "pip", "install", "--no-deps", "--no-index", wheel)
    example_dags = run(python, "-c", "from importlib.resources import files; "
                                     "print(files('airflow_provider_mysqlcdc.example_dags'))")
    return WheelInstall(python, Path(example_dags), wheel)


def spark_processes_of(*folders: Path) -> list[str]:
    """Command lines of the Spark processes (JVMs, Python drivers) that name one of ``folders``, and
    every executor of a standalone cluster."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ours = any(str(folder) in argv for folder in folders) and \
            any(m in argv for m in ("SparkSubmit", "DriverWrapper", "binlog_stream.py", "snapshot_chunk.py"))
        if ours or "CoarseGrainedExecutorBackend" in argv:
            found.append(f"{proc.name}: {argv[:300]}")
    return found


def stream_drivers(*folders: Path) -> list[int]:
    """The pids of the stream's Python drivers among ``spark_processes_of(*folders)``."""
    return [int(p.split(":")[0]) for p in spark_processes_of(*folders) if "binlog_stream.py" in p]


class Http2Recorder:
    """A TCP proxy on loopback in front of a gRPC server (Spark Connect) that keeps what clients send
    through it: the DATA frames of each HTTP/2 stream, joined, so a value split across frames is still
    found (gRPC messages are not compressed unless a client asks for it)."""

    PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

    def __init__(self, target_port: int):
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._raw: list[bytearray] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            sent = bytearray()
            with self._lock:
                self._raw.append(sent)
            threading.Thread(target=self._pump, args=(client, server, sent), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, None), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, keep: bytearray | None) -> None:
        try:
            while data := source.recv(65536):
                if keep is not None:
                    with self._lock:
                        keep.extend(data)
                target.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, target):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def sent_messages(self) -> list[bytes]:
        """Per HTTP/2 stream of every connection so far, the bytes of its DATA frames, in order."""
        with self._lock:
            connections = [bytes(raw) for raw in self._raw]
        streams: list[bytes] = []
        for raw in connections:
            data: dict[int, bytearray] = {}
            at = len(self.PREFACE) if raw.startswith(self.PREFACE) else 0
            while at + 9 <= len(raw):
                length = int.from_bytes(raw[at:at + 3], "big")
                kind, flags, stream = raw[at + 3], raw[at + 4], struct.unpack(">I", raw[at + 5:at + 9])[0] & 0x7FFFFFFF
                payload = raw[at + 9:at + 9 + length]
                if kind == 0:  # DATA, maybe padded
                    if flags & 0x8:
                        payload = payload[1:len(payload) - payload[0]]
                    data.setdefault(stream, bytearray()).extend(payload)
                at += 9 + length
            streams.extend(bytes(chunk) for chunk in data.values())
        return streams

    def close(self) -> None:
        self._listener.close()


def run_statements(conn, session: str, *statements: str) -> None:
    """``statements`` on ``conn``, after the session settings ``session`` (e.g. a permissive sql_mode)."""
    with conn.cursor() as cur:
        cur.execute(session)
        for statement in statements:
            cur.execute(statement)


def run_stream(source: SourceConfig, work: Path, job: StreamJob) -> dict:
    """One run of the stream job under spark-submit (local[2]) in ``work`` (made if need be); its result."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "stream.json").write_text(job.to_json())
    return SparkSubmit(master="local[2]", work_dir=work / "spark").run(
        "binlog_stream.py", ["--job", str(work / "stream.json")], source.to_private_file(work / "secrets" / "source.json"))
