"""Names that break naive code: dots, backticks, double quotes, braces, ``%s``, spaces, commas,
slashes, leading digits, unicode, reserved words, and tables named ``.`` and ``..``.

One table per hazard, its columns named by hazards too, in a database whose own name is a hazard:
snapshotted, then streamed (spark-submit, the stream's SQL, Delta predicates and merges), each must
end exactly equal to the source, every Delta table strictly inside the sink root.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.cdc.model.schema import TableId, quote_identifier, with_params
from airflow_provider_mysqlcdc.cdc.source.preflight import run_preflight
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.dag_runner import catch_up_stream, example_dag_env, run_dag
from devtools.snapshot import snapshot_tables
from devtools.verify import source_rows

from .helpers import assert_same_rows, delta_rows

pytestmark = pytest.mark.integration

#: a table per hazard
TABLE_NAMES = ["dot.ted", "back`tick", 'dou"ble', "{brace}", "pct%s", "sp ace", "1leading", "ünï", "select",
               ".", "..", "com,ma", "sl/ash", "back\\slash", "hash#q?", "a%2Fb"]
#: the columns of every table (besides the key "id")
COLUMN_NAMES = ["c.d", "c`b", 'c"q', "{c}", "%s", "c d", "1c", "ç", "order", "c,m"]


@pytest.fixture
def hazard_database(mysql_server):
    name = "cdc hazard.db`%s"
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {quote_identifier(name)}")
        cur.execute(f"CREATE DATABASE {quote_identifier(name)}")
    yield name
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {quote_identifier(name)}")


def _create_with_rows(conn, tables: list[TableId]) -> None:
    """Each table, its columns named by the hazards, with 30 rows (two of them changed and removed)."""
    with conn.cursor() as cur:
        for table in tables:
            cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, "
                        + ", ".join(f"{quote_identifier(c)} VARCHAR(40)" for c in COLUMN_NAMES) + ")")
    for table in tables:
        _write(conn, table, 0, 30)


def _write(conn, table: TableId, first: int, count: int) -> None:
    name, columns = with_params(table.quoted), with_params(", ".join(quote_identifier(c) for c in COLUMN_NAMES))
    with conn.cursor() as cur:
        for i in range(first, first + count):
            cur.execute(f"INSERT INTO {name} (id, {columns}) VALUES ({', '.join(['%s'] * (len(COLUMN_NAMES) + 1))})",
                        [i, *[f"{c} {i}" for c in COLUMN_NAMES]])
        cur.execute(f"UPDATE {name} SET {with_params(quote_identifier('%s'))} = 'changed' WHERE id = %s", [first])
        cur.execute(f"DELETE FROM {name} WHERE id = %s", [first + 1])


def test_hazardous_names_are_snapshotted_and_streamed_exactly_inside_the_sink_root(mysql_server, cdc_user,
                                                                                    hazard_database, tmp_path):
    conn = mysql_server.connect()
    tables = [TableId(hazard_database, name) for name in TABLE_NAMES]
    _create_with_rows(conn, tables)
    schemas = run_preflight(cdc_user, tables).schemas
    lake, state = tmp_path / "sink root" / "lake", PipelineState(str(tmp_path / "state"))
    snapshot_tables(cdc_user, tables, str(lake), state, split_rows=10)
    for table in tables:
        _write(conn, table, 100, 5)  # after the snapshot: the stream brings these

    catch_up_stream(cdc_user, state.location, lake, tmp_path / "stream")

    for table in tables:
        assert_same_rows(table, source_rows(cdc_user, schemas[table]), delta_rows(str(lake), schemas[table]))
    logs = sorted(str(p.relative_to(lake)) for p in lake.rglob("_delta_log"))
    assert len(logs) == len(tables) and all(len(Path(p).parts) == 3 for p in logs), logs  # <db>/<table>/_delta_log
    assert sorted(p.name for p in (tmp_path / "sink root").iterdir()) == ["lake"]  # nothing beside the root


def test_a_dag_captures_tables_with_dots_commas_and_dot_names_exactly(mysql_server, cdc_user, hazard_database,
                                                                     tmp_path):
    """The Airflow side: the table list (commas inside backticks), one task group per table (no two
    alike), the plan's chunks handed to the snapshot tasks, the collect and the stream."""
    conn = mysql_server.connect()
    tables = [TableId(hazard_database, name) for name in ("dot.ted", "com,ma", "..", "dot_ted")]
    _create_with_rows(conn, tables)
    schemas = run_preflight(cdc_user, tables).schemas
    lake = tmp_path / "lake"
    env = example_dag_env(tmp_path / "airflow", cdc_user, tables, sink_root=lake, state_dir=tmp_path / "state",
                          split_rows=20, chunk_rows=1000)
    result = run_dag("mysqlcdc_example", env, conf={"stream_mode": "available-now"})
    assert result["state"] == "success", result["output"][-5000:]
    groups = {key.split(".")[0] for key in result["xcoms"] if ".snapshot[" in key}
    assert len(groups) == len(tables), groups  # 'dot.ted' and 'dot_ted' in groups of their own
    for table in tables:
        assert_same_rows(table, source_rows(cdc_user, schemas[table]), delta_rows(str(lake), schemas[table]))
