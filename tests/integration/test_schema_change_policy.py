"""``schema_changes="fail"`` (Flink CDC's ``schema.change.behavior: exception``) on a real stream: a
captured table's DDL stops the stream before the statement, naming it, with the changes before it
applied and nothing of it; run again with ``evolve``, the stream follows it and the sink equals the
source."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.errors import SparkJobFailed
from airflow_provider_mysqlcdc.cdc.source.schema import TableId, load_table_schema
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.snapshot import snapshot_tables
from devtools.verify import differences, sink_rows, source_rows

from .helpers import run_stream

pytestmark = pytest.mark.integration


def test_a_captured_tables_ddl_stops_a_failing_stream_before_it_and_evolve_goes_on(mysql_server, cdc_user, database,
                                                                                    tmp_path):
    table = TableId(database, "policy")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute(f"INSERT INTO {table.quoted} VALUES (1, 'a'), (2, 'b')")
    conn.commit()
    lake, state = str(tmp_path / "lake"), PipelineState(str(tmp_path / "state"))
    snapshot_tables(cdc_user, [table], lake, state)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table.quoted} VALUES (3, 'c')")
        cur.execute(f"ALTER TABLE {table.quoted} ADD COLUMN n INT NOT NULL DEFAULT 7")
        cur.execute(f"INSERT INTO {table.quoted} VALUES (4, 'd', 8)")
    conn.commit()

    with pytest.raises(SparkJobFailed, match=r"SchemaChangeRefused.*ADD COLUMN n.*schema_changes='evolve'"):
        run_stream(cdc_user, tmp_path / "first", StreamJob(state=state.location, sink_root=lake, schema_changes="fail"))
    before = load_table_schema(conn, table)
    rows = sink_rows(lake, before)
    assert sorted(rows) == [(1,), (2,), (3,)] and all(r.get("n") is None for r in rows.values())

    run_stream(cdc_user, tmp_path / "second", StreamJob(state=state.location, sink_root=lake))
    schema = load_table_schema(conn, table)
    assert differences(source_rows(cdc_user, schema), sink_rows(lake, schema)) is None
