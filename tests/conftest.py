"""Shared fixtures: one real MariaDB for the whole session (or the server named by MYSQLCDC_TEST_DSN).

By default the session starts Debian's ``mariadbd`` in a temporary datadir on a free loopback port
(installing ``mariadb-server`` with apt when missing) and stops it by PID at the end. Set
``MYSQLCDC_TEST_DSN=mysql://user:password@host:port`` to run the same suite against an existing
MySQL 8 / MariaDB server; that user must be allowed to create databases and users.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pymysql
import pytest

from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.server import ServerInfo, server_info

DSN_ENV = "MYSQLCDC_TEST_DSN"

# The suite starts some 60 short Spark jobs; a JVM that only compiles with the quick JIT tier starts
# them 3-5 s faster each here (the jobs' results are the same; long-running throughput is what
# bin/bench measures, without this). Set SPARK_SUBMIT_OPTS yourself to run the suite otherwise.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


@dataclass
class TestServer:
    admin: SourceConfig  # creates databases, users, and writes
    info: ServerInfo
    pid: int | None  # None when the server is external

    def connect(self, database: str | None = None) -> pymysql.connections.Connection:
        return self.admin.with_database(database).connect(autocommit=True)


@pytest.fixture(scope="session")
def mysql_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestServer]:
    if os.environ.get(DSN_ENV):
        admin = SourceConfig.from_url(os.environ[DSN_ENV])
        conn = admin.connect()
        info = server_info(conn)
        conn.close()
        yield TestServer(admin, info, None)
        return
    from devtools.throwaway_server import ThrowawayMariaDB

    # Small binlog files, so that every integration test crosses binlog rotations.
    server = ThrowawayMariaDB(base_dir=tmp_path_factory.mktemp("mariadb"), max_binlog_size=1024 * 1024)
    server.start()
    try:
        conn = server.connect_root()
        info = server_info(conn)
        conn.close()
        yield TestServer(server.root_config(), info, server.pid)
    finally:
        server.stop()


@pytest.fixture()
def database(mysql_server: TestServer) -> Iterator[str]:
    """A fresh, uniquely named database, dropped afterwards."""
    name = f"cdc_test_{uuid.uuid4().hex[:10]}"
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        yield name
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.close()


@pytest.fixture(scope="session")
def cdc_user(mysql_server: TestServer) -> SourceConfig:
    """A least-privilege CDC account: SELECT plus the replication privileges, nothing else."""
    user, password = f"cdc_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    client = "BINLOG MONITOR" if mysql_server.info.is_mariadb and mysql_server.info.major >= 10 and \
        (mysql_server.info.major, mysql_server.info.minor) >= (10, 5) else "REPLICATION CLIENT"
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (user, password))
        cur.execute(f"GRANT SELECT, REPLICATION SLAVE, {client} ON *.* TO %s@'%%'", (user,))
    conn.close()
    return SourceConfig(host=mysql_server.admin.host, port=mysql_server.admin.port, user=user, password=password)


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory):
    """The provider built as a wheel and installed in a fresh virtualenv (once per test session)."""
    from tests.integration.helpers import install_wheel

    return install_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session", autouse=True)
def local_spark_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The shared local Spark servers (launch/local_server.py) that the suite's DAG runs start, as a
    worker's tasks do by default: in a folder of this session's, shared by its tests, all stopped at the
    end (a test of the servers themselves uses a folder of its own)."""
    from airflow_provider_mysqlcdc.launch.local_server import LOCAL_SPARK_DIR_VARIABLE, stop_all

    root = tmp_path_factory.mktemp("local-spark")
    os.environ[LOCAL_SPARK_DIR_VARIABLE] = str(root)
    yield root
    stop_all(root)


@pytest.fixture()
def reap_spark(tmp_path):
    """After the test, kill -9 the Spark processes it left running (so a failure does not burden the rest)."""
    from tests.integration.helpers import spark_processes_of

    yield
    for line in spark_processes_of(tmp_path):
        try:
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
        except ProcessLookupError:
            pass


# --- where the suite's time goes --------------------------------------------------------------
#: each test file's seconds (set-up, call and tear-down of its tests), written at the session's end
#: into var/test-durations.txt, slowest first: the suite must stay well inside CI's time
DURATIONS_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "var",
                              "test-durations.txt")
_file_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _file_seconds[path] = _file_seconds.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The 15 slowest test files in the summary; every file's seconds in ``DURATIONS_FILE``."""
    if not _file_seconds:
        return
    ranked = sorted(_file_seconds.items(), key=lambda item: -item[1])
    lines = [f"{sum(_file_seconds.values()):8.1f} s  all {len(ranked)} files",
             *(f"{seconds:8.1f} s  {path}" for path, seconds in ranked)]
    os.makedirs(os.path.dirname(DURATIONS_FILE), exist_ok=True)
    with open(DURATIONS_FILE, "w") as out:
        out.write("\n".join(lines) + "\n")
    terminalreporter.write_sep("=", "slowest 15 test files")
    for line in lines[:16]:
        terminalreporter.write_line(line)
