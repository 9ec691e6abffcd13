"""What the sink holds, cell by cell, against the server's own rendering of the same cell.

The value tests (test_value_fidelity.py) hold the two read paths to one Python value; this module
reads the sink tables as a user's engine would (their raw Arrow columns, and the changelog's JSON)
and compares them with what the server prints for the same cell, over both paths: rows the snapshot
read, and rows the stream wrote (inserted, updated) after it. One history and one stream run per
sink format (Delta, Iceberg).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import pytest

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import SINK_FORMATS, open_sink
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.snapshot import snapshot_tables
from devtools.verify import sink_rows, source_rows

from .helpers import assert_same_rows, run_stream
from .test_value_fidelity import COLUMNS, GEOMETRY, MAX_ROW, MIN_ROW, NULL_ROW, ZERO_AND_PARTIAL, _random_rows

pytestmark = pytest.mark.integration

#: NOT NULL temporal columns (not keys) as legacy schemas have them, holding zero and partial dates
NOT_NULL_DATES = {"nn_da": "DATE NOT NULL DEFAULT '0000-00-00'", "nn_dt": "DATETIME NOT NULL DEFAULT '0000-00-00 00:00:00'",
                  "nn_dt6": "DATETIME(6) NOT NULL DEFAULT '0000-00-00 00:00:00.000000'",
                  "nn_ts": "TIMESTAMP NOT NULL DEFAULT '0000-00-00 00:00:00'"}

#: DECIMAL wider than Delta's decimal: the sink keeps the server's exact text at the column's scale
WIDE_DECIMALS = {"d65_18": "DECIMAL(65,18)", "d65_0": "DECIMAL(65,0)", "d39_38": "DECIMAL(39,38)",
                 "d65_30": "DECIMAL(65,30) UNSIGNED"}
WIDE_VALUES = ["0", "-0.000000000000000001", "0.0000001", "1", "-1", "123456789.5",
               "99999999999999999999999999999999999", "-0.5", "0.000000000000000000000000000001", "-0"]


@dataclass
class History:
    table: TableId
    lake: str
    server_text: dict[int, dict[str, str | None]]  # id -> column -> what the server prints
    matrix: TableId  # every type, also NOT NULL dates holding zero dates
    sink_format: str

    def read(self, table: TableId):
        """The sink table's rows, as its format's reader gives them (raw Arrow)."""
        return open_sink(SinkSpec(self.lake, self.sink_format)).read(table)


def _matrix_rows() -> list[dict]:
    rows = [dict(MAX_ROW), dict(MIN_ROW), dict(NULL_ROW)] + _random_rows(__import__("random").Random(27), 8)
    for number, row in enumerate(rows):
        odd = ZERO_AND_PARTIAL[number % len(ZERO_AND_PARTIAL)]
        row.update(nn_da=odd["da"], nn_dt=odd["dt0"], nn_dt6=odd["dt6"], nn_ts=odd["ts0"] or "0000-00-00 00:00:00")
    return rows


def _insert_matrix_row(cur, table: TableId, row_id: int, row: dict, time_zone: str) -> None:
    cur.execute("SET time_zone = %s", (time_zone,))  # TIMESTAMPs written from another zone are the same instants
    values = ["%s" if n not in GEOMETRY or row[n] is None else "ST_GeomFromText(%s)" for n in row]
    cur.execute(f"INSERT INTO {table.quoted} (id, {', '.join(row)}) VALUES (%s, {', '.join(values)})", [row_id, *row.values()])


@pytest.fixture(scope="module", params=list(SINK_FORMATS))
def history(request, mysql_server, cdc_user, tmp_path_factory):
    sink_format = request.param
    tmp = tmp_path_factory.mktemp("sink-values")
    database = f"cdc_values_{uuid.uuid4().hex[:8]}"
    table = TableId(database, "wide")
    conn = mysql_server.connect()
    names = list(WIDE_DECIMALS)

    def insert(row_id: int, value: str) -> None:
        # each column takes the value as far as it fits (the server rounds to the scale, clips to the range)
        with conn.cursor() as cur:
            cur.execute("SET sql_mode = ''")
            cur.execute(f"INSERT INTO {table.quoted} VALUES (%s, {', '.join(['%s'] * len(names))})",
                        [row_id, *[value] * len(names)])

    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, "
                    + ", ".join(f"{n} {t} NULL" for n, t in WIDE_DECIMALS.items()) + ")")
    for number, value in enumerate(WIDE_VALUES):  # read by the snapshot
        insert(number, value)
    matrix = TableId(database, "matrix")
    rows = _matrix_rows()
    with conn.cursor() as cur:
        cur.execute("SET sql_mode = ''")
        cur.execute(f"CREATE TABLE {matrix.quoted} (id INT PRIMARY KEY, "
                    + ", ".join(f"`{n}` {t}" for n, t in {**COLUMNS, **NOT_NULL_DATES}.items()) + ")")
        for number, row in enumerate(rows):  # the snapshot reads the first half
            if number % 2 == 0:
                _insert_matrix_row(cur, matrix, number, row, "+05:30")
    state, lake = PipelineState(str(tmp / "state")), str(tmp / "lake")
    snapshot_tables(cdc_user, [table, matrix], lake, state, split_rows=4, sink_format=sink_format)
    with conn.cursor() as cur:  # the stream writes the second half, and updates and deletes rows of the first
        cur.execute("SET sql_mode = ''")
        for number, row in enumerate(rows):
            if number % 2:
                _insert_matrix_row(cur, matrix, number, row, "-08:00")
        set_list = ", ".join(f"`{n}` = %s" if n not in GEOMETRY else f"`{n}` = ST_GeomFromText(%s)" for n in rows[1])
        cur.execute(f"UPDATE {matrix.quoted} SET {set_list} WHERE id = 0", list(rows[1].values()))
        cur.execute(f"DELETE FROM {matrix.quoted} WHERE id = 2")
        cur.execute("SET time_zone = '+00:00'")
    for number, value in enumerate(WIDE_VALUES):  # written by the stream: inserts, and updates of snapshot rows
        insert(100 + number, value)
    with conn.cursor() as cur:
        cur.execute("SET sql_mode = ''")
        cur.execute(f"UPDATE {table.quoted} SET " + ", ".join(f"{n} = -{n}" for n in names) + " WHERE id < 5")
    run_stream(cdc_user, tmp, StreamJob(state=state.location, sink=SinkSpec(lake, sink_format), changelog=True))
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, {', '.join(f'CAST({n} AS CHAR)' for n in names)} FROM {table.quoted}")
        server_text = {row[0]: dict(zip(names, row[1:])) for row in cur.fetchall()}
    yield History(table, lake, server_text, matrix, sink_format)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{database}`")


def test_wide_decimals_are_the_servers_exact_text_through_the_snapshot_and_the_stream(history):
    rows = history.read(history.table).to_pylist()
    sink_text = {row["id"]: {n: row[n] for n in WIDE_DECIMALS} for row in rows}
    assert sink_text == history.server_text


def test_wide_decimals_in_the_changelog_images_are_the_servers_exact_text(history):
    changelog = history.read(TableId(history.table.database, history.table.table + "__changelog"))
    latest: dict[int, dict] = {}
    for row in sorted(changelog.to_pylist(), key=lambda r: r["version"]):
        image = json.loads(row["after"])
        latest[image["id"]] = {n: image[n] for n in WIDE_DECIMALS}
    assert latest and latest == {i: text for i, text in history.server_text.items() if i in latest}


def test_every_type_and_zero_dates_in_not_null_columns_reach_the_sink_as_the_source_holds_them(history,
                                                                                              mysql_server):
    schema = load_table_schema(mysql_server.connect(), history.matrix)
    assert_same_rows(history.matrix, source_rows(mysql_server.admin, schema),
                     sink_rows(history.lake, schema, sink_format=history.sink_format))
