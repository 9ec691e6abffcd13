"""Every preflight failure is a clear error naming the problem and the fix.

Server-setting failures flip global variables on a second throwaway MariaDB of their own (and one
started without a binlog), so the shared server is never disturbed.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
import uuid

import pytest

from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.cdc.errors import (
    BinlogPurgedError,
    ConfigurationError,
    PreflightFailures,
    SourceChangedError,
)
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.preflight import run_preflight
from airflow_provider_mysqlcdc.cdc.source.server import binlog_files, current_offset
from devtools.throwaway_server import ThrowawayMariaDB

pytestmark = pytest.mark.integration

needs_local_mariadb = pytest.mark.skipif(
    bool(os.environ.get("MYSQLCDC_TEST_DSN")) and not shutil.which("mariadbd", path="/usr/sbin:/usr/bin"),
    reason="server-setting tests start their own MariaDB; mariadbd is not installed here",
)


@pytest.fixture(scope="module")
def spare_server(tmp_path_factory):
    with ThrowawayMariaDB(base_dir=tmp_path_factory.mktemp("spare")) as server:
        conn = server.connect_root()
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE shop")
            cur.execute("CREATE TABLE shop.orders (id INT PRIMARY KEY, v INT)")
        yield server


def _problems(source: SourceConfig, tables=(TableId("shop", "orders"),), **kwargs) -> list[str]:  # noqa: B008
    with pytest.raises(PreflightFailures) as info:
        run_preflight(source, list(tables), **kwargs)
    return info.value.problems


@needs_local_mariadb
@pytest.mark.parametrize(
    "variable, bad_value, expected",
    [
        ("binlog_format", "STATEMENT", "binlog_format is STATEMENT, CDC needs ROW: SET GLOBAL binlog_format='ROW'"),
        ("binlog_format", "MIXED", "binlog_format is MIXED, CDC needs ROW"),
        ("binlog_row_image", "MINIMAL", "binlog_row_image is MINIMAL, CDC needs FULL: SET GLOBAL binlog_row_image='FULL'"),
        ("binlog_row_metadata", "MINIMAL", "binlog_row_metadata is MINIMAL, CDC needs FULL"),
        ("log_bin_compress", "ON", "log_bin_compress is ON: compressed binlog events are invisible"),
    ],
)
def test_wrong_binlog_settings(spare_server, variable, bad_value, expected):
    conn = spare_server.connect_root()
    with conn.cursor() as cur:
        cur.execute(f"SELECT @@GLOBAL.{variable}")
        original = cur.fetchone()[0]
        cur.execute(f"SET GLOBAL {variable} = %s", (bad_value,))
    try:
        problems = _problems(spare_server.root_config())
        assert len(problems) == 1 and expected in problems[0]
    finally:
        with conn.cursor() as cur:
            cur.execute(f"SET GLOBAL {variable} = %s", (original,))
    run_preflight(spare_server.root_config(), [TableId("shop", "orders")])  # fixed again


@needs_local_mariadb
def test_binlog_off(tmp_path):
    with ThrowawayMariaDB(base_dir=tmp_path / "nobinlog", log_bin=False) as server:
        problems = _problems(server.root_config(), tables=[])
    assert problems == [problems[0]] and "The binary log is off (log_bin=OFF)" in problems[0]
    assert "log-bin" in problems[0]


@needs_local_mariadb
def test_purged_binlog_is_a_clear_error(spare_server):
    conn = spare_server.connect_root()
    old = current_offset(conn)
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        # A dump thread of an earlier test may still hold the old file for a moment.
        for _ in range(50):
            cur.execute("PURGE BINARY LOGS TO %s", (current_offset(conn).file,))
            if old.file not in binlog_files(conn):
                break
            time.sleep(0.1)
        assert old.file not in binlog_files(conn)
    reader = BinlogReader(spare_server.root_config(), start=old, key_columns={})
    with pytest.raises(BinlogPurgedError, match=rf"Binlog file {old.file} \(needed from offset {old}\) is no longer on "
                                                rf"the server.*on_binlog_purged='resnapshot'.*retry it"):
        list(reader)


def _user(mysql_server, grants: list[str]) -> SourceConfig:
    user, password = f"u_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (user, password))
        for grant in grants:
            cur.execute(f"GRANT {grant} TO %s@'%%'", (user,))
    return SourceConfig(host=mysql_server.admin.host, port=mysql_server.admin.port, user=user, password=password)


def _client_privilege(mysql_server) -> str:
    info = mysql_server.info
    return "BINLOG MONITOR" if info.is_mariadb and (info.major, info.minor) >= (10, 5) else "REPLICATION CLIENT"


def test_missing_replication_slave(mysql_server, database):
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
    user = _user(mysql_server, [f"SELECT, {_client_privilege(mysql_server)} ON *.*"])
    problems = _problems(user, tables=[TableId(database, "t")])
    assert len(problems) == 1 and "may not read the binlog: GRANT REPLICATION SLAVE ON *.*" in problems[0]


def test_missing_binlog_position_privilege(mysql_server, database):
    user = _user(mysql_server, ["SELECT, REPLICATION SLAVE ON *.*"])
    problems = _problems(user, tables=[])
    assert len(problems) == 1 and "may not read the binlog position" in problems[0]
    assert _client_privilege(mysql_server) in problems[0]


def test_missing_select_on_table(mysql_server, database):
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY, secret INT)")
        cur.execute(f"CREATE TABLE `{database}`.visible (id INT PRIMARY KEY)")
    user = _user(mysql_server, [f"REPLICATION SLAVE, {_client_privilege(mysql_server)} ON *.*",
                                f"SELECT (id) ON `{database}`.t", f"SELECT ON `{database}`.visible"])
    problems = _problems(user, tables=[TableId(database, "t"), TableId(database, "visible")])
    assert len(problems) == 1 and f"may not read {database}.t: GRANT SELECT" in problems[0]


def test_table_problems_are_all_reported_at_once(mysql_server, cdc_user, database):
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{database}`.nokey (a INT, b INT)")
        cur.execute(f"CREATE TABLE `{database}`.nullable_unique (a INT NULL, UNIQUE KEY (a))")
        cur.execute(f"CREATE TABLE `{database}`.enum_pk (e ENUM('x','y') PRIMARY KEY)")
        cur.execute(f"CREATE TABLE `{database}`.ok (id INT PRIMARY KEY, n INT NULL)")
        cur.execute(f"CREATE VIEW `{database}`.a_view AS SELECT 1 AS one")
    tables = [TableId(database, n) for n in ("missing", "nokey", "nullable_unique", "enum_pk", "ok", "a_view")]
    problems = _problems(cdc_user, tables=tables, chunk_key_columns={TableId(database, "ok"): "n"})
    text = "\n".join(problems)
    assert len(problems) == 6, text
    assert f"Table {database}.missing does not exist" in problems[0]
    assert f"Table {database}.nokey has no primary key" in problems[1] and "ADD PRIMARY KEY" in problems[1]
    assert f"Table {database}.nullable_unique has no primary key" in problems[2]
    assert "type ENUM, which cannot be a chunk key" in problems[3]
    assert "Chunk key column 'n'" in problems[4] and "nullable" in problems[4]
    assert f"Table {database}.a_view does not exist" in problems[5] and "is a view" in problems[5]


def test_source_columns_named_like_the_sinks_change_columns_are_refused(mysql_server, cdc_user, database):
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{database}`.clash (id INT PRIMARY KEY, _cdc_row INT, `_CDC_Op` TEXT, cdc_ok INT)")
    problems = _problems(cdc_user, tables=[TableId(database, "clash")])
    assert len(problems) == 1, problems
    assert f"Table {database}.clash has column(s) _cdc_row, _CDC_Op" in problems[0]
    assert "begin with '_cdc_'" in problems[0] and "RENAME COLUMN" in problems[0]


def test_wrong_password_and_unreachable_server(mysql_server):
    bad = SourceConfig(host=mysql_server.admin.host, port=mysql_server.admin.port, user="root", password="wrong")
    with pytest.raises(ConfigurationError, match="Access denied for user 'root'.*check the user name and password"):
        run_preflight(bad, [])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    with pytest.raises(ConfigurationError, match=f"Cannot reach the source server at 127.0.0.1:{closed_port}"):
        run_preflight(SourceConfig(host="127.0.0.1", port=closed_port, connect_timeout_s=2), [])


def test_offset_beyond_the_servers_binlog_is_reported_as_another_binlog(cdc_user):
    with pytest.raises(SourceChangedError, match="binlog.999999:4 lies beyond the server's binlog.*RESET MASTER"):
        list(BinlogReader(cdc_user, start=BinlogOffset("binlog.999999", 4), key_columns={}))
