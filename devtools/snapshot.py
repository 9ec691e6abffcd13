"""In-process snapshots for tests and tools: what the plan and chunk tasks do, without Airflow or Spark.

``snapshot_tables`` reads each table in splits straight into the sink, remembers its schema and
registers the finished splits as the next generation (a first run, or tables a later run adds). ``stage_whole_table`` reads a
table as one split into a staged file, as a re-snapshot of a captured table does (the stream
applies it when it activates the generation that adds it); ``resnapshot_whole_tables`` does that
for several tables and registers them, remembering their schemas the way a plan does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.planning.splitter import SplitOptions, TableSplitter
from airflow_provider_mysqlcdc.cdc.reading.split_reader import SplitReader
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.rules import TableRules, captured_schema
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.arrow_rows import rows_to_data_table
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter
from airflow_provider_mysqlcdc.state.registry import PipelineState, captured_tables
from airflow_provider_mysqlcdc.state.schemas import KnownSchemas
from airflow_provider_mysqlcdc.state.sink import settle_sink
from airflow_provider_mysqlcdc.state.staged import write_staged


def snapshot_tables(source: SourceConfig, tables: Sequence[TableId], lake: str, state: PipelineState, *,
                    split_rows: int = 20, chunk_key: str = "id", rules: TableRules | None = None,
                    adding: bool = False, sink_format: str = "delta") -> None:
    """Each table in splits of ``split_rows`` rows into the sink (of ``sink_format``), registered and
    remembered, each under its rule of ``rules`` (its columns and rows, as a plan captures them).
    ``adding``: the tables join those captured already (a later run's new tables) instead of
    replacing them."""
    sink, finished, rules = open_sink(settle_sink(state, SinkSpec(lake, sink_format))), [], rules or TableRules()
    conn = source.connect(autocommit=True)
    try:
        for table in tables:
            schema = rules.captured(load_table_schema(conn, table), chunk_key)
            KnownSchemas(state).remember(schema)
            sink.prepare(schema)
            with SplitReader(source, schema) as reader:
                writer = SinkWriter(sink, schema, chunk_key, reader.ordering(chunk_key))
                options = SplitOptions(split_rows=split_rows, chunk_key_column=chunk_key)
                for split in TableSplitter(conn, schema, options).split():
                    result = reader.read(split)
                    writer.write_split(result.finished, result.rows)
                    finished.append(result.finished)
    finally:
        conn.close()
    captured = captured_tables(finished)
    for table in tables:
        captured[table] = replace(captured[table], table_rule=rules.for_table(table)[0])
    state.commit({**state.latest().tables, **captured} if adding else captured)


def stage_whole_table(source: SourceConfig, state: PipelineState, schema: TableSchema,
                      chunk_key: str = "id") -> FinishedSplit:
    """The whole table read as one split into a staged file; its finished split points at it."""
    with SplitReader(source, schema) as reader:
        result = reader.read(SnapshotSplit(schema.table_id, 0, chunk_key))
    url = f"{state.staging_url(schema.table_id)}/split-0.parquet"
    write_staged(url, rows_to_data_table(schema, result.rows))
    finished = result.finished
    return FinishedSplit(finished.split, finished.high_watermark, finished.low_watermark, rows=len(result.rows),
                         staged=url)


def resnapshot_whole_tables(source: SourceConfig, state: PipelineState, tables: Sequence[TableId]) -> None:
    """What the next DAG run does for tables the drift record names: each re-read whole into a staged
    split (chunk key ``id``), registered in a new generation. Their schemas are remembered as the
    plan remembers them (``remember_planned``: a remembered schema that bridges a key or type change
    the stream has not passed stays), so the stream meets what it meets after a real plan."""
    registry, known = state.latest(), KnownSchemas(state)
    captured = dict(registry.tables)
    conn = source.connect(autocommit=True)
    try:
        schemas = [captured_schema(load_table_schema(conn, table), registry.table_rule(table), chunk_key="id")
                   for table in tables]
    finally:
        conn.close()
    for schema in schemas:
        before = registry.tables.get(schema.table_id)
        known.remember_planned(schema, before.chunk_key if before else None)
        captured[schema.table_id] = CapturedTable("id", [stage_whole_table(source, state, schema)], schema.table_rule)
    state.commit(captured)
