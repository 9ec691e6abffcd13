"""What ``bin/status`` says of a pipeline's tables (status.py)."""

from __future__ import annotations

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.rules import Route, TableRule
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.status import pipeline_status, print_status


def test_the_status_names_the_sink_table_each_shard_of_a_route_writes_into(tmp_path, capsys):
    state = PipelineState(str(tmp_path / "state"))
    shard, alone = TableId("shop_1", "orders"), TableId("shop", "items")
    split = FinishedSplit(SnapshotSplit(shard, 0, "id"), BinlogOffset("binlog.000002", 4), rows=3)
    state.commit({shard: CapturedTable("id", [split], TableRule(route=Route("shop", "orders"))),
                  alone: CapturedTable("id", [FinishedSplit(SnapshotSplit(alone, 0, "id"), split.high_watermark)])})
    tables = pipeline_status(state.location)["tables"]
    assert (tables["shop_1.orders"]["sink"], tables["shop.items"]["sink"]) == ("shop.orders", "shop.items")
    print_status(state.location)
    printed = capsys.readouterr().out
    assert "a shard of the sink table shop.orders (route)" in printed and printed.count("(route)") == 1
