"""TLS on every path: a server that refuses plaintext TCP (``require_secure_transport=ON``), a CDC
account that ``REQUIRE X509`` (so a client that does not present the connection's client certificate
is refused too: pymysql alone would encrypt, unverified and without it), and a ``mysqlcdc`` connection
whose extras name the CA, the client certificate and key. A whole DAG run (preflight, planning, the
chunk jobs' reads on Spark executors, the binlog stream) must work, so every path uses the
connection's TLS settings.

The server is also configured as legacy installations often are: a time zone other than UTC
(``+05:30``: the writers' ``NOW()`` in DATETIME columns and TIMESTAMPs written from its sessions), a
latin1 default character set (the sample tables take it: their text columns are latin1) and a
permissive ``sql_mode``; the sink must equal the source as read over a UTC session all the same."""

from __future__ import annotations

import dataclasses
import uuid

import pymysql
import pytest

from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.preflight import run_preflight
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.cdc.source.tls import forget_servers, replication_tls
from devtools.dag_runner import catch_up_stream, example_dag_env, run_dag
from devtools.throwaway_server import ThrowawayMariaDB
from devtools.tls import make_test_certificates
from devtools.verify import source_rows
from devtools.workload import SAMPLE_TABLES, RandomWriters, create_sample_tables

from .helpers import assert_same_rows, delta_rows

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    certificates = make_test_certificates(tmp_path_factory.mktemp("tls"))
    with ThrowawayMariaDB(base_dir=tmp_path_factory.mktemp("mariadb-tls"), tls=certificates,
                          character_set_server="latin1", collation_server="latin1_swedish_ci",
                          default_time_zone="+05:30", sql_mode="") as server:
        yield server


@pytest.fixture(scope="module")
def tls_user(tls_server) -> SourceConfig:
    user, password = f"cdc_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with tls_server.connect_root() as conn, conn.cursor() as cur:
        cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s REQUIRE X509", (user, password))
        cur.execute("GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO %s@'%%'", (user,))
    return SourceConfig(host="127.0.0.1", port=tls_server.port, user=user, password=password,
                        ssl=tls_server.client_tls())


def test_the_server_refuses_plaintext_and_clients_without_the_certificate(tls_user):
    """What makes the DAG test below mean something: neither gets through."""
    with pytest.raises((pymysql.err.OperationalError, ConfigurationError)):
        dataclasses.replace(tls_user, ssl=None).connect(ssl_disabled=True).close()
    with pytest.raises((pymysql.err.OperationalError, ConfigurationError)):
        dataclasses.replace(tls_user, ssl=None).connect().close()  # TLS as pymysql prefers it: no certificate
    with pytest.raises((pymysql.err.OperationalError, ConfigurationError)):
        dataclasses.replace(tls_user, ssl={"ca": tls_user.ssl["ca"], "check_hostname": True}).connect().close()
    tls_user.connect().close()


def test_settings_without_tls_encrypt_where_the_server_offers_it_and_the_binlog_reader_too(tls_server):
    """As pymysql's preferred mode, with one TLS context per process (cdc/source/tls.py): this server
    refuses plaintext, so neither the connection nor the reader's would work unencrypted."""
    forget_servers()
    root = SourceConfig(host="127.0.0.1", port=tls_server.port, user="root")
    table = TableId(f"tls_preferred_{uuid.uuid4().hex[:8]}", "t")
    with root.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        assert cur.fetchone()[1]
        cur.execute(f"CREATE DATABASE `{table.database}`")
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY)")
        start = current_offset(conn)
        cur.execute(f"INSERT INTO {table.quoted} VALUES (1)")
        end = current_offset(conn)
    assert "ssl" in replication_tls(root.host, root.port)  # remembered: the library's connections take the context
    reader = BinlogReader(root, start=start, end=end, tables=[table], key_columns={table: ("id",)})
    assert [item.after for item in reader if isinstance(item, ChangeRecord)] == [{"id": 1}]
    # our own framing is plaintext only (cdc/binlog/framing.py): the library read this server's binlog
    assert set(reader.events_framed) == {"library"}


def test_settings_without_tls_reach_a_server_without_tls_in_plaintext_and_remember_it(cdc_user):
    forget_servers()
    with cdc_user.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES LIKE 'have_ssl'")
        if (cur.fetchone() or ("", ""))[1] == "YES":
            pytest.skip("the test server offers TLS (an external server): nothing to fall back from")
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        assert cur.fetchone()[1] == ""
    # later connections of this process (the library's too) go plaintext at once, without a TLS context
    assert replication_tls(cdc_user.host, cdc_user.port) == {"ssl_disabled": True}


def test_a_dag_run_over_tls_against_a_legacy_configured_server_is_exact(tls_server, tls_user, tmp_path):
    database = f"cdc_tls_{uuid.uuid4().hex[:8]}"
    root = tls_server.root_config()
    with root.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
    conn = root.with_database(database).connect()
    with conn.cursor() as cur:
        cur.execute("SET time_zone = @@global.time_zone")  # the application's sessions: the server's zone
    sample = (SAMPLE_TABLES[0], SAMPLE_TABLES[4])  # text and DATETIME(6); DECIMAL key and TIMESTAMP(3)
    tables = create_sample_tables(conn, database, rows_per_table=1500, seed=41, tables=sample, charset=None)
    with conn.cursor() as cur:  # what makes the run mean something: the server's defaults took
        cur.execute("SELECT CHARACTER_SET_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                    "AND COLUMN_NAME = 'customer'", (database,))
        assert cur.fetchone()[0] == "latin1"
        cur.execute("SELECT @@global.time_zone, @@session.time_zone")
        assert cur.fetchone() == ("+05:30", "+05:30")
    schemas = run_preflight(tls_user, tables).schemas
    lake, state_dir = tmp_path / "lake", tmp_path / "state"
    env = example_dag_env(tmp_path / "airflow", tls_user, tables, sink_root=lake, state_dir=state_dir,
                          split_rows=600, chunk_rows=1000)
    with RandomWriters(root, database, writers=1, seed=411, pause_s=0.01, tables=sample, server_time_zone=True):
        result = run_dag("mysqlcdc_example", env, conf={"stream_mode": "available-now"})
    assert result["state"] == "success", "\n".join(line for line in result["output"].splitlines()
                                                    if "Error" in line or "error" in line)[-5000:]
    catch_up_stream(tls_user, str(state_dir / "mysqlcdc_example"), lake, tmp_path / "catch-up")
    for table in tables:
        assert_same_rows(table, source_rows(tls_user, schemas[table]), delta_rows(str(lake), schemas[table]))
