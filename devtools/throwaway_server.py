"""A throwaway MariaDB server for tests and the demo.

It runs ``mariadbd`` as a plain child process in a temporary datadir on a free loopback port, with
the binlog settings the CDC core needs (ROW format, FULL row image, FULL row metadata), and is stopped
by PID. Nothing is installed as a service and nothing outside the datadir is touched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.server import binlog_files, current_offset
from devtools.tls import TestCertificates

log = logging.getLogger(__name__)

APT_PACKAGE = "mariadb-server"


def find_free_port() -> int:
    """Ask the kernel for a free loopback port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process_group(process: "subprocess.Popen[bytes] | None", timeout_s: float = 30) -> None:
    """End a throwaway service started in a session of its own, every process of its group: SIGTERM
    to the group, then SIGKILL to whatever of it is left after ``timeout_s``. The group, not only its
    leader: a service's children may outlive it (``airflow standalone`` ends on SIGTERM while its
    scheduler still waits on its executor's workers), and a process left behind takes a core from
    every later test."""
    if process is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (process.poll() is None or _group_alive(process.pid)):
        time.sleep(0.1)
    if process.poll() is None or _group_alive(process.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    killed_by = time.monotonic() + 10  # SIGKILL is delivered, not done: wait until the kernel ended them
    while _group_alive(process.pid) and time.monotonic() < killed_by:
        time.sleep(0.05)


def _group_alive(group: int) -> bool:
    """Whether a process of ``group`` still runs (one that ended and was not reaped yet does not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == group and fields[0] != "Z":  # [0]: the state, [2]: the group
                return True
    return False


def close_session(conn: pymysql.connections.Connection, observer: pymysql.connections.Connection,
                  timeout_s: float = 60.0) -> None:
    """Close ``conn`` and return once the server has ended its session (watched on ``observer``).

    Closing only sends the quit: until the server ends the session, what the session holds stays its
    own (an XA transaction it prepared is unknown to every other session, ``XAER_NOTA``)."""
    session = conn.thread_id()
    conn.close()
    ends_by = time.monotonic() + timeout_s
    with observer.cursor() as cur:
        while True:
            cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s", (session,))
            if not cur.fetchone()[0]:
                return
            if time.monotonic() > ends_by:
                raise TimeoutError(f"the server had not ended session {session} {timeout_s:.0f} s after it was closed")
            time.sleep(0.01)


def ensure_mariadb_installed() -> None:
    """Install Debian's ``mariadb-server`` when ``mariadbd`` is missing (needs root and apt)."""
    if _which("mariadbd") and _which("mariadb-install-db"):
        return
    if os.geteuid() != 0:
        raise RuntimeError(
            "mariadbd is not installed. Install it with: sudo apt-get install -y mariadb-server"
        )
    log.info("Installing %s with apt-get ...", APT_PACKAGE)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", APT_PACKAGE, "mariadb-client"], check=True, env=env
    )


def _which(program: str) -> str | None:
    return shutil.which(program) or shutil.which(program, path="/usr/sbin:/usr/bin:/sbin:/bin")


@dataclass
class ThrowawayMariaDB:
    """One ``mariadbd`` process in its own datadir. Use as a context manager or call start/stop."""

    base_dir: Path | None = None
    port: int | None = None
    server_id: int = 1
    binlog_format: str = "ROW"
    binlog_row_image: str = "FULL"
    binlog_row_metadata: str = "FULL"
    log_bin: bool = True
    max_binlog_size: int | None = None
    #: a replica that logs what it applies, with GTIDs in strict order: it can take over as the primary
    failover_ready: bool = False
    #: TLS with these certificates, and no plaintext TCP connection accepted (require_secure_transport)
    tls: TestCertificates | None = None
    #: the server's defaults, which legacy installations often have otherwise: its character set (and
    #: collation), its time zone (None: the system's) and its sql_mode (None: MariaDB's default)
    character_set_server: str = "utf8mb4"
    collation_server: str = "utf8mb4_general_ci"
    default_time_zone: str | None = None
    sql_mode: str | None = None

    _process: subprocess.Popen[bytes] | None = None
    _owns_base_dir: bool = False

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self, timeout_s: float = 60.0) -> "ThrowawayMariaDB":
        ensure_mariadb_installed()
        if self.base_dir is None:
            self.base_dir = Path(tempfile.mkdtemp(prefix="mysqlcdc-mariadb-"))
            self._owns_base_dir = True
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if self.port is None:
            self.port = find_free_port()
        datadir = self.base_dir / "data"
        if not (datadir / "mysql").exists():
            self._initialise(datadir)
        log_file = self.base_dir / "mariadbd.err"
        self._process = subprocess.Popen(
            [_which("mariadbd") or "mariadbd", *self._server_options(datadir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._wait_until_ready(timeout_s, log_file)
        log.info("MariaDB pid %s listening on 127.0.0.1:%s", self._process.pid, self.port)
        return self

    def stop(self) -> None:
        """Stop the server by PID (SIGTERM, then SIGKILL after a grace period)."""
        proc, self._process = self._process, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if self._owns_base_dir and self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> "ThrowawayMariaDB":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    # --- access ----------------------------------------------------------------------------------
    def root_config(self, database: str | None = None) -> SourceConfig:
        """Credentials of the passwordless root account that exists only inside this datadir."""
        assert self.port is not None, "server not started"
        return SourceConfig(host="127.0.0.1", port=self.port, user="root", password="", database=database,
                            ssl=self.client_tls())

    def client_tls(self) -> dict[str, Any] | None:
        """pymysql's ``ssl`` settings for a client of this server: verify it by the test CA, and show
        the test client certificate (accounts may ``REQUIRE X509``)."""
        if not self.tls:
            return None
        return {"ca": str(self.tls.ca), "cert": str(self.tls.client_cert), "key": str(self.tls.client_key),
                "check_hostname": True}

    def connect_root(self, database: str | None = None) -> pymysql.connections.Connection:
        return self.root_config(database).connect(autocommit=True)

    def purge_binlogs(self, timeout_s: float = 30.0) -> str:
        """Start a new binlog file and purge every older one; returns the file that was current.

        The server keeps a file while a binlog dump or its binlog checkpoint still holds it, so
        this asks again until the files are gone."""
        with self.connect_root() as conn, conn.cursor() as cur:
            old = current_offset(conn).file
            cur.execute("FLUSH BINARY LOGS")
            deadline = time.monotonic() + timeout_s
            while old in binlog_files(conn):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"binlog file {old} could not be purged within {timeout_s}s")
                cur.execute("PURGE BINARY LOGS TO %s", (current_offset(conn).file,))
                time.sleep(0.1)
        return old

    # --- replication -------------------------------------------------------------------------------
    def replicate_from(self, primary: "ThrowawayMariaDB") -> None:
        """Become a GTID replica of ``primary`` (from its first transaction) and start replicating."""
        with self.connect_root() as conn, conn.cursor() as cur:
            cur.execute("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER='root', "
                        "MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos", (primary.port,))
            cur.execute("START SLAVE")

    def wait_for(self, primary: "ThrowawayMariaDB", timeout_s: float = 60.0) -> None:
        """Until this replica has applied everything ``primary`` has written so far."""
        with primary.connect_root() as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            position = cur.fetchone()[0]
        with self.connect_root() as conn, conn.cursor() as cur:
            cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (position, timeout_s))
            if cur.fetchone()[0] != 0:
                cur.execute("SHOW SLAVE STATUS")
                raise RuntimeError(f"the replica did not reach {position} within {timeout_s}s: {cur.fetchone()}")

    def promote(self) -> None:
        """Stop replicating and take writes: the failover of a primary to this replica."""
        with self.connect_root() as conn, conn.cursor() as cur:
            cur.execute("STOP SLAVE")
            cur.execute("RESET SLAVE ALL")

    # --- internals -------------------------------------------------------------------------------
    def _initialise(self, datadir: Path) -> None:
        datadir.mkdir(parents=True, exist_ok=True)
        cmd = [
            _which("mariadb-install-db") or "mariadb-install-db",
            "--no-defaults",
            f"--datadir={datadir}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--skip-name-resolve",
            self._tmpdir_option(),  # passed on to the bootstrapping mariadbd
        ]
        if os.geteuid() == 0:
            cmd.append("--user=root")
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed:\n{result.stdout}\n{result.stderr}")

    def _tmpdir_option(self) -> str:
        """A temporary folder of this server's own: two servers (or a server and another's
        mariadb-install-db) starting at once in the same /tmp have clashed on temporary tables."""
        assert self.base_dir is not None
        tmp = self.base_dir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        return f"--tmpdir={tmp}"

    def _server_options(self, datadir: Path) -> list[str]:
        assert self.base_dir is not None
        options = [
            "--no-defaults",
            f"--datadir={datadir}",
            f"--socket={self.base_dir / 'mariadbd.sock'}",
            f"--pid-file={self.base_dir / 'mariadbd.pid'}",
            f"--log-error={self.base_dir / 'mariadbd.err'}",
            self._tmpdir_option(),
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
            f"--server-id={self.server_id}",
            "--max-connections=500",
            "--innodb-buffer-pool-size=512M",
            "--innodb-log-file-size=256M",
            # Durability is not what the throwaway server is for; speed is.
            "--innodb-flush-log-at-trx-commit=2",
            "--sync-binlog=0",
            f"--character-set-server={self.character_set_server}",
            f"--collation-server={self.collation_server}",
        ]
        if self.log_bin:
            options += [
                f"--log-bin={datadir / 'binlog'}",
                f"--binlog-format={self.binlog_format}",
                f"--binlog-row-image={self.binlog_row_image}",
                f"--binlog-row-metadata={self.binlog_row_metadata}",
            ]
        if self.default_time_zone is not None:
            options.append(f"--default-time-zone={self.default_time_zone}")
        if self.sql_mode is not None:
            options.append(f"--sql-mode={self.sql_mode}")
        if self.max_binlog_size:
            options.append(f"--max-binlog-size={self.max_binlog_size}")
        if self.tls:
            options += [f"--ssl-ca={self.tls.ca}", f"--ssl-cert={self.tls.server_cert}",
                        f"--ssl-key={self.tls.server_key}", "--require-secure-transport=ON"]
        if self.failover_ready:
            options += ["--log-slave-updates=ON", "--gtid-strict-mode=ON"]
        if os.geteuid() == 0:
            options.append("--user=root")
        return options

    def _wait_until_ready(self, timeout_s: float, log_file: Path) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout_s
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"mariadbd exited early:\n{_tail(log_file)}")
            try:
                self.connect_root().close()
                return
            except (pymysql.err.OperationalError, ConfigurationError) as exc:
                last_error = exc
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"mariadbd did not answer within {timeout_s}s ({last_error}):\n{_tail(log_file)}")


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no server log)"
