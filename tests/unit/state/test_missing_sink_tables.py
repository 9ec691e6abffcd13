"""A stream refuses to start when a table the pipeline captured into the sink has no sink table
there (state/sink.py ``refuse_missing_sink_tables``): the sink changed under the pipeline
(another format, root or namespace) or the table was deleted, and the stream would otherwise fill a
new, empty table with later changes only. On a real state location and real sinks of each format."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.protocol.registry import stream_only_split
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.state.registry import PipelineState, captured_tables
from airflow_provider_mysqlcdc.state.sink import refuse_missing_sink_tables

T, U, V = TableId("shop", "t"), TableId("shop", "u"), TableId("shop", "v")
AT = BinlogOffset("bin.000001", 400)


@pytest.fixture
def state(tmp_path) -> PipelineState:
    """T and U snapshotted into the sink, V streamed without a snapshot."""
    state = PipelineState(str(tmp_path / "state"))
    state.commit(captured_tables([FinishedSplit(SnapshotSplit(T, 0, "id"), AT), FinishedSplit(SnapshotSplit(U, 0, "id"), AT),
                                  stream_only_split(V, "id", AT)]))
    return state


def prepared(lake: str, sink_format: str, *tables: TableId):
    sink = open_sink(SinkSpec(lake, sink_format))
    for table in tables:
        sink.prepare(TableSchema(table, (Column("id", "int", "int(11)", False),), ("id",)))
    return sink


def test_the_tables_captured_into_one_format_are_not_in_the_other(state, tmp_path):
    prepared(str(tmp_path / "lake"), "delta", T, U)
    refuse_missing_sink_tables(state.latest().tables, open_sink(SinkSpec(str(tmp_path / "lake"))))  # the sink they were captured into
    with pytest.raises(ConfigurationError, match=r"The sink tables of 2 captured table\(s\) are not in this sink "
                                                 r"\(IcebergSink at .*\): shop.t, shop.u\. .*sink_format.*resnapshot"):
        refuse_missing_sink_tables(state.latest().tables, open_sink(SinkSpec(str(tmp_path / "lake"), "iceberg")))


def test_a_deleted_sink_table_is_named_and_a_table_streamed_without_a_snapshot_is_not(state, tmp_path):
    sink = prepared(str(tmp_path / "lake"), "iceberg", T)
    with pytest.raises(ConfigurationError, match=r"of 1 captured table\(s\).*: shop.u\."):
        refuse_missing_sink_tables(state.latest().tables, sink)
