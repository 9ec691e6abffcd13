"""The connectorx fast path returns exactly what the pymysql path returns, for every type it accepts."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import SnapshotSplit
from airflow_provider_mysqlcdc.cdc.reading.arrow_select import fast_select_supported, select_arrow
from airflow_provider_mysqlcdc.cdc.reading.split_reader import SplitReader
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.sinks.arrow_rows import data_schema, rows_to_data_table

pytestmark = pytest.mark.integration


def test_fast_path_equals_pymysql_path(mysql_server, cdc_user, database):
    table = TableId(database, "fast types")
    conn = mysql_server.connect()
    rng = random.Random(4)
    with conn.cursor() as cur:
        cur.execute(f"""CREATE TABLE {table.quoted} (id BIGINT PRIMARY KEY, ti TINYINT, tiu TINYINT UNSIGNED,
            si SMALLINT, mi MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, d DOUBLE, da DATE, dt DATETIME(6), dt0 DATETIME,
            c CHAR(12), v VARCHAR(50) COLLATE utf8mb4_general_ci, t TEXT, lt LONGTEXT)""")
        for _ in range(500):
            cur.execute(f"INSERT INTO {table.quoted} VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", (
                rng.randint(-2**63, 2**63 - 1), rng.randint(-128, 127), rng.randint(0, 255), rng.randint(-2**15, 2**15 - 1),
                rng.randint(0, 2**24 - 1), rng.randint(-2**31, 2**31 - 1), rng.randint(0, 2**32 - 1),
                rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300),
                dt.date(1000, 1, 1) + dt.timedelta(days=rng.randint(0, 3_000_000)),
                dt.datetime(1000, 1, 1) + dt.timedelta(microseconds=rng.randint(0, 280_000_000_000_000_000)),
                dt.datetime(2000, 1, 1) + dt.timedelta(seconds=rng.randint(0, 10**9)),
                "ab c😀"[: rng.randint(0, 5)], "x" * rng.randint(0, 50), "héllo 😀" * rng.randint(0, 3), None))
        cur.execute(f"INSERT INTO {table.quoted} (id) VALUES (0)")
    schema = load_table_schema(conn, table)
    assert fast_select_supported(schema)
    split = SnapshotSplit(table, 0, "id", start=-(2**62), end=2**62)
    low, fast = select_arrow(cdc_user, schema, split)
    with SplitReader(cdc_user, schema) as reader:
        slow = rows_to_data_table(schema, reader.read(split).rows)
    target = data_schema(schema)
    fast = fast.cast(target).sort_by("id")
    slow = slow.sort_by("id")
    assert fast.num_rows == slow.num_rows > 100
    for name in target.names:
        assert fast.column(name).to_pylist() == slow.column(name).to_pylist(), name


def test_types_outside_the_fast_path_are_refused(mysql_server, database):
    conn = mysql_server.connect()
    for ddl in ("f FLOAT", "b BIT(3)", "ts TIMESTAMP NULL", "tm TIME", "bn BINARY(3)", "e ENUM('a')", "u BIGINT UNSIGNED",
                "g POINT", "dc DECIMAL(10,2)", "l VARCHAR(5) CHARACTER SET latin1"):
        name = TableId(database, "t_" + ddl.split()[0])
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE {name.quoted} (id INT PRIMARY KEY, {ddl})")
        assert not fast_select_supported(load_table_schema(conn, name)), ddl
