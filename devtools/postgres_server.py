"""A throwaway PostgreSQL server on loopback (Debian's ``postgresql`` package) for tests: the database
of an Iceberg SQL catalog as users run one. A temporary data directory, a free port, a password
user; started as the ``postgres`` system user when run as root (PostgreSQL refuses root), stopped by
PID, its directory removed.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from devtools.throwaway_server import find_free_port, stop_process_group


def postgres_bin() -> Path:
    """The newest installed PostgreSQL's programs (``/usr/lib/postgresql/<version>/bin``)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql (bin/setup does)")
    return Path(found[-1]).parent


@dataclass
class ThrowawayPostgres:
    port: int = field(default_factory=find_free_port)
    user: str = "catalog"
    password: str = field(default_factory=lambda: secrets.token_hex(12))
    _dir: Path | None = None
    _process: subprocess.Popen[bytes] | None = None

    def _as_owner(self, command: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command

    def start(self, timeout_s: float = 60) -> "ThrowawayPostgres":
        self._dir = Path(tempfile.mkdtemp(prefix="mysqlcdc-postgres-"))
        (self._dir / "password").write_text(self.password)
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            for path in (self._dir, self._dir / "password"):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        binaries = postgres_bin()
        subprocess.run(self._as_owner([str(binaries / "initdb"), "-D", str(self._dir / "data"), "-U", self.user,
                                       f"--pwfile={self._dir / 'password'}", "--auth=scram-sha-256", "-E", "UTF8"]),
                       check=True, capture_output=True)
        log = open(self._dir / "server.log", "ab")  # noqa: SIM115 - the server writes it until stopped
        self._process = subprocess.Popen(
            self._as_owner([str(binaries / "postgres"), "-D", str(self._dir / "data"), "-p", str(self.port),
                            "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self._dir}"]),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while subprocess.run([str(binaries / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                             capture_output=True).returncode != 0:
            if self._process.poll() is not None or time.monotonic() > deadline:
                text = (self._dir / "server.log").read_text()[-2000:]
                self.stop()
                raise RuntimeError(f"PostgreSQL did not start:\n{text}")
            time.sleep(0.2)
        return self

    def create_database(self, name: str) -> str:
        """A new database; its SQLAlchemy URL (with the password: keep it out of logs and arguments)."""
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, password=self.password,
                                dbname="postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return f"postgresql+psycopg2://{self.user}:{self.password}@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        stop_process_group(self._process)
        self._process = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> "ThrowawayPostgres":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
