"""Table DDL inside a split's watermark window, on a real server: a TRUNCATE is replayed like any
change (both on the row path and on the chunk job's Arrow path); a partition operation, which removes
rows without row events, fails the read so that its retry starts after it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_provider_mysqlcdc.cdc.errors import SchemaChangedError
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import SnapshotSplit
from airflow_provider_mysqlcdc.cdc.reading.split_reader import SplitReader
from airflow_provider_mysqlcdc.cdc.records.apply import KeyedRows
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.sinks.arrow_rows import arrow_to_rows, merge_changes_into_table, rows_to_data_table
from devtools.verify import source_rows

from .helpers import assert_same_rows

pytestmark = pytest.mark.integration


@pytest.fixture()
def truncated_in_window(mysql_server, cdc_user, database):
    """A whole-table split SELECTed, then ``TRUNCATE t`` and new rows, then the high watermark."""
    table = TableId(database, "t")
    conn = mysql_server.connect(database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"old {i}") for i in range(1, 41)])
    schema = load_table_schema(conn, table)
    split = SnapshotSplit(table, 0, "id")
    reader = SplitReader(cdc_user, schema)
    rows = KeyedRows(schema.key_columns)
    low, _ = reader.select(split, rows)
    with conn.cursor() as cur:
        cur.execute("UPDATE t SET v = 'updated' WHERE id < 5")
        cur.execute("TRUNCATE t")
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"new {i}") for i in range(30, 51)])
        cur.execute("DELETE FROM t WHERE id = 31")
    high = reader.current_offset()
    yield reader, split, low, high, rows, source_rows(mysql_server.admin, schema)
    reader.close()


def test_truncate_in_a_split_window_empties_the_rows_read_before_it(truncated_in_window):
    reader, split, low, high, rows, source = truncated_in_window
    reader.merge_window(split, low, high, rows)
    assert_same_rows(split.table_id, source, rows.rows)


def test_truncate_in_a_split_window_empties_the_arrow_rows_of_the_chunk_job(truncated_in_window):
    reader, split, low, high, rows, source = truncated_in_window
    data = rows_to_data_table(reader.schema, list(rows.rows.values()))
    merged = merge_changes_into_table(reader.schema, data, list(reader.window_changes(split, low, high)))
    assert isinstance(merged, pa.Table)
    assert_same_rows(split.table_id, source, {reader.schema.key_of(r): r for r in arrow_to_rows(merged, reader.schema)})


def test_partition_truncate_in_a_split_window_fails_the_read_for_a_retry(mysql_server, cdc_user, database):
    table = TableId(database, "p")
    conn = mysql_server.connect(database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE p (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) "
                    "(PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN MAXVALUE)")
        cur.executemany("INSERT INTO p VALUES (%s, %s)", [(i, i) for i in range(20)])
    schema = load_table_schema(conn, table)
    split = SnapshotSplit(table, 0, "id")
    with SplitReader(cdc_user, schema) as reader:
        rows = KeyedRows(schema.key_columns)
        low, _ = reader.select(split, rows)
        with conn.cursor() as cur:
            cur.execute("ALTER TABLE p TRUNCATE PARTITION p0")
        with pytest.raises(SchemaChangedError, match=r"rows-changed .*TRUNCATE PARTITION.*Retry the chunk"):
            reader.merge_window(split, low, reader.current_offset(), rows)
