"""What the sink holds, cell by cell, against the server's own rendering of the same cell.

The value tests (test_value_fidelity.py) hold the two read paths to one Python value; this module
reads the Delta tables as a user's engine would (their raw Arrow columns, and the changelog's JSON)
and compares them with what the server prints for the same cell, over both paths: rows the snapshot
read, and rows the stream wrote (inserted, updated) after it. One module history, one stream run.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.source.schema import TableId
from airflow_provider_mysqlcdc.devtools.snapshot import snapshot_tables
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.spark.submit import SparkSubmit
from airflow_provider_mysqlcdc.state.registry import PipelineState

pytestmark = pytest.mark.integration

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


@pytest.fixture(scope="module")
def history(mysql_server, cdc_user, tmp_path_factory):
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
    state, lake = PipelineState(str(tmp / "state")), str(tmp / "lake")
    snapshot_tables(cdc_user, [table], lake, state, chunk_size=4)
    for number, value in enumerate(WIDE_VALUES):  # written by the stream: inserts, and updates of snapshot rows
        insert(100 + number, value)
    with conn.cursor() as cur:
        cur.execute("SET sql_mode = ''")
        cur.execute(f"UPDATE {table.quoted} SET " + ", ".join(f"{n} = -{n}" for n in names) + " WHERE id < 5")
    (tmp / "stream.json").write_text(StreamJob(state=state.location, sink_root=lake, changelog=True).to_json())
    SparkSubmit(master="local[2]", work_dir=tmp / "spark").run(
        "binlog_stream.py", ["--job", str(tmp / "stream.json")], cdc_user.to_private_file(tmp / "secrets" / "s.json"))
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, {', '.join(f'CAST({n} AS CHAR)' for n in names)} FROM {table.quoted}")
        server_text = {row[0]: dict(zip(names, row[1:])) for row in cur.fetchall()}
        cur.execute(f"DROP DATABASE `{database}`")
    return History(table, lake, server_text)


def test_wide_decimals_are_the_servers_exact_text_through_the_snapshot_and_the_stream(history):
    rows = DeltaTable(f"{history.lake}/{history.table.database}/{history.table.table}").to_pyarrow_table().to_pylist()
    sink_text = {row["id"]: {n: row[n] for n in WIDE_DECIMALS} for row in rows}
    assert sink_text == history.server_text


def test_wide_decimals_in_the_changelog_images_are_the_servers_exact_text(history):
    changelog = DeltaTable(f"{history.lake}/{history.table.database}/{history.table.table}__changelog")
    latest: dict[int, dict] = {}
    for row in sorted(changelog.to_pyarrow_table().to_pylist(), key=lambda r: r["version"]):
        image = json.loads(row["after"])
        latest[image["id"]] = {n: image[n] for n in WIDE_DECIMALS}
    assert latest and latest == {i: text for i, text in history.server_text.items() if i in latest}
