"""Split writes + filtered binlog merges into real Delta tables equal the source, exactly once."""

from __future__ import annotations

import random

import pytest

from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.cdc.binlog.split_filter import FinishedSplitFilter
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord
from airflow_provider_mysqlcdc.cdc.planning.splitter import SplitOptions, TableSplitter
from airflow_provider_mysqlcdc.cdc.reading.split_reader import SplitReader
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.cdc.source.preflight import run_preflight
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.sinks.arrow_rows import arrow_to_rows
from airflow_provider_mysqlcdc.sinks.delta.sink import DeltaSink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_change_batch
from devtools.verify import source_rows
from devtools.workload import RandomWriters, create_sample_tables

from .helpers import assert_same_rows, delta_rows

pytestmark = pytest.mark.integration


def test_snapshot_and_stream_into_delta_equal_the_source(mysql_server, cdc_user, database, tmp_path):
    rng = random.Random(7)
    admin = mysql_server.admin
    conn = mysql_server.connect()
    tables = create_sample_tables(conn, database, rows_per_table=800, seed=7)
    sink = DeltaSink(str(tmp_path / "lake"))
    with RandomWriters(admin, database, writers=2, seed=70, pause_s=0.002) as writers:
        report = run_preflight(cdc_user, tables)
        finished, sink_writers = [], {}
        for table_id, schema in report.schemas.items():
            chunk_key = report.chunk_keys[table_id]
            sink.prepare(schema)
            sink_writers[table_id] = SinkWriter(sink, schema, chunk_key, KeyOrdering(schema.column(chunk_key), cdc_user.connect))
            splits = TableSplitter(cdc_user.connect(), schema, SplitOptions(split_rows=120)).split()
            with SplitReader(cdc_user, schema) as reader:
                for split in splits:
                    for _ in range(rng.randint(1, 2)):  # a retried split replaces itself
                        result = reader.read(split)
                        sink_writers[table_id].write_split(result.finished, result.rows)
                    finished.append(result.finished)
        writers.stop()
    end = current_offset(conn)

    split_filter = FinishedSplitFilter(finished, {t: w.ordering for t, w in sink_writers.items()})
    reader = BinlogReader.for_schemas(cdc_user, list(report.schemas.values()), start=split_filter.start_offset(), end=end)
    records = [r for r in reader if isinstance(r, ChangeRecord)]
    emitted = [r for r, keep in zip(records, split_filter.filter(records)) if keep]
    # cut into batches at arbitrary record boundaries, and apply some batches twice (a replay)
    start, batch_id, replays = 0, 0, 0
    while start < len(emitted):
        batch = emitted[start:start + rng.randint(50, 400)]
        apply_change_batch(sink_writers, batch, app_id="test-stream", batch_id=batch_id)
        if rng.random() < 0.3:
            assert apply_change_batch(sink_writers, batch, app_id="test-stream", batch_id=batch_id) == {}
            replays += 1
        start += len(batch)
        batch_id += 1
    assert batch_id > 3 and replays > 0
    # a new checkpoint reads an applied stretch again, cut differently, in a new process (writers
    # read the positions back from Delta): it changes nothing
    overlap = emitted[len(emitted) // 3:]
    fresh = {t: SinkWriter(sink, w.schema, w.chunk_key, w.ordering) for t, w in sink_writers.items()}
    for i in range(0, len(overlap), 333):
        assert apply_change_batch(fresh, overlap[i:i + 333], app_id="a-new-checkpoint", batch_id=i) == {}

    for table_id, schema in report.schemas.items():
        delta = delta_rows(sink.root, schema)
        assert_same_rows(table_id, source_rows(admin, schema), delta)
        last = [r for r in emitted if r.table_id == table_id][-1]
        assert sink.applied_position(table_id) == last.order_key
    print(f"\n{len(finished)} splits, {len(emitted)} binlog changes in {batch_id} batches ({replays} replayed)")


def test_every_type_round_trips_through_delta(mysql_server, cdc_user, database, tmp_path):
    from airflow_provider_mysqlcdc.cdc.model.schema import TableId
    from airflow_provider_mysqlcdc.cdc.model.split import SnapshotSplit
    from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema

    from .test_value_fidelity import COLUMNS, MAX_ROW, MIN_ROW, NULL_ROW, _insert

    table = TableId(database, "all types")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, "
                    + ", ".join(f"`{n}` {t}" for n, t in COLUMNS.items()) + ")")
        for i, row in enumerate([MAX_ROW, MIN_ROW, NULL_ROW]):
            _insert(cur, table.quoted, i, row)
    schema = load_table_schema(conn, table)
    sink = DeltaSink(str(tmp_path / "lake"))
    sink.prepare(schema)
    with SplitReader(cdc_user, schema) as reader:
        result = reader.read(SnapshotSplit(table, 0, "id"))
    SinkWriter(sink, schema, "id", KeyOrdering(schema.column("id"))).write_split(result.finished, result.rows)
    back = {r["id"]: r for r in arrow_to_rows(sink.read(table), schema)}
    for row in result.rows:
        for name, value in row.items():
            assert back[row["id"]][name] == value, f"{name}: {back[row['id']][name]!r} != {value!r}"
