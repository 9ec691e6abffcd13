"""Zero and partial dates in key columns (legacy schemas under a permissive ``sql_mode``).

A DATE, DATETIME or TIMESTAMP key value with no calendar date (``0000-00-00``, ``2024-00-10``,
``2024-05-00``) is NULL in the sink's key column, like in any other column, and the server's text in
the key's companion column ``_cdc_zero_<name>``, so that such rows keep distinct keys. Each table
below is snapshotted in small splits (with the temporal column as the chunk key, so split bounds
fall on zero dates too) and then streamed: inserts, updates of other columns, key updates from a
zero date to a real one and back, deletes. The sink must equal the source, row for row.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.snapshot import snapshot_tables
from devtools.verify import read_delta, source_rows

from .helpers import assert_same_rows, delta_rows, run_statements, run_stream

pytestmark = pytest.mark.integration

#: each temporal type as a key column, with the zero, partial and real values it holds
KEY_TYPES = {
    "date": ("DATE", ["0000-00-00", "2024-00-10", "2024-05-00", "0000-05-06", "2024-05-06", "2023-12-31"]),
    "datetime": ("DATETIME", ["0000-00-00 00:00:00", "2024-00-10 12:00:00", "2024-05-00 01:02:03",
                              "2024-05-06 07:08:09", "2023-12-31 23:59:59"]),
    "datetime6": ("DATETIME(6)", ["0000-00-00 00:00:00.000000", "2024-00-00 00:00:00.000001",
                                  "2024-05-00 01:02:03.000004", "2024-05-06 07:08:09.000010"]),
    "timestamp3": ("TIMESTAMP(3)", ["0000-00-00 00:00:00.000", "2024-05-06 07:08:09.123", "1970-01-01 00:00:01.000"]),
}


@dataclass
class History:
    lake: str
    tables: dict[str, TableId]


@pytest.fixture(scope="module")
def history(mysql_server, cdc_user, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("zero-date-keys")
    database = f"cdc_zero_{uuid.uuid4().hex[:8]}"
    tables = {name: TableId(database, name) for name in KEY_TYPES}
    conn = mysql_server.connect()

    def run(*statements: str) -> None:
        run_statements(conn, "SET sql_mode = '', time_zone = '+00:00'", *statements)

    run(f"CREATE DATABASE `{database}`")
    for name, (sql_type, values) in KEY_TYPES.items():
        table = tables[name]
        run(f"CREATE TABLE {table.quoted} (k {sql_type} NOT NULL, id INT NOT NULL, v INT, PRIMARY KEY (k, id))")
        run(*(f"INSERT INTO {table.quoted} VALUES ('{value}', {i}, {i})" for i, value in enumerate(values)))
        run(*(f"INSERT INTO {table.quoted} VALUES ('{value}', 100, 100)" for value in values))  # one id, every k
    state, lake = PipelineState(str(tmp / "state")), str(tmp / "lake")
    snapshot_tables(cdc_user, list(tables.values()), lake, state, split_rows=2, chunk_key="k")
    for name, (_, values) in KEY_TYPES.items():
        table = tables[name]
        zero, real = values[0], values[-1]
        run(*(f"INSERT INTO {table.quoted} VALUES ('{value}', 200, 200)" for value in values),
            f"UPDATE {table.quoted} SET v = -v WHERE id = 100",  # every zero and real key, other columns
            f"UPDATE {table.quoted} SET k = '{real}' WHERE k = '{zero}' AND id = 0",  # from a zero date to a real one
            f"UPDATE {table.quoted} SET k = '{zero}' WHERE k = '{values[1]}' AND id = 1",  # a partial one to zero
            f"DELETE FROM {table.quoted} WHERE id = 200 AND k = '{values[1]}'")
    run_stream(cdc_user, tmp, StreamJob(state=state.location, sink=SinkSpec(lake)))
    yield History(lake, tables)
    run(f"DROP DATABASE IF EXISTS `{database}`")


@pytest.mark.parametrize("key_type", sorted(KEY_TYPES))
def test_zero_and_partial_dates_in_a_key_keep_their_rows_through_the_snapshot_and_the_stream(history, mysql_server,
                                                                                             key_type):
    table = history.tables[key_type]
    schema = load_table_schema(mysql_server.connect(), table)
    assert_same_rows(table, source_rows(mysql_server.admin, schema), delta_rows(history.lake, schema))


def test_a_key_with_no_calendar_date_is_null_in_its_column_and_the_servers_text_in_its_companion(history):
    rows = read_delta(f"{history.lake}/{history.tables['datetime'].database}/datetime") \
        .select(["k", "_cdc_zero_k", "id"]).to_pylist()
    zero = {(r["_cdc_zero_k"], r["id"]) for r in rows if r["k"] is None}
    assert ("0000-00-00 00:00:00", 100) in zero and ("2024-05-00 01:02:03", 100) in zero
    assert all(r["_cdc_zero_k"] is None for r in rows if r["k"] is not None)
