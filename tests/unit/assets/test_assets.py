"""The sink's tables as Airflow Assets: their URIs, the extra of their events, and the watcher each
asset carries (its trigger's own behaviour: tests/unit/triggers/test_table_changes.py)."""

from __future__ import annotations

import urllib.parse

from airflow_provider_mysqlcdc.assets.sink_tables import (
    ASSET_GROUP,
    TableChanged,
    sink_alias,
    sink_table_asset,
    table_asset_uri,
)
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.triggers.table_changes import table_watcher


def test_a_local_table_asset_is_the_file_uri_of_the_delta_table_the_sink_writes(tmp_path):
    table = TableId("shop", "odd name/1")
    uri = table_asset_uri(str(tmp_path / "lake") + "/", table)

    assert uri.startswith("file:///")
    assert urllib.parse.unquote(urllib.parse.urlsplit(uri).path) == open_sink(SinkSpec(str(tmp_path / "lake"))).table_uri(table)


def test_an_object_store_table_asset_keeps_its_scheme_and_bucket():
    asset = sink_table_asset("s3://bucket/lake", "shop.orders")
    assert asset.uri == asset.name == "s3://bucket/lake/shop/orders" and asset.group == ASSET_GROUP


def test_the_same_table_in_two_sinks_are_two_assets():
    assert sink_table_asset("/lake/a", "shop.orders") != sink_table_asset("/lake/b", "shop.orders")
    assert sink_alias("/lake/a/") == sink_alias("/lake/a") != sink_alias("/lake/b")


def test_an_event_extra_says_how_fresh_the_table_is():
    change = TableChanged(TableId("shop", "orders"), "stream", 7, BinlogOffset("binlog.000003", 1234), 4)
    assert change.extra == {"table": "shop.orders", "kind": "stream", "rows_changed": 7,
                            "binlog_offset": {"file": "binlog.000003", "position": 1234}, "generation": 4}


def test_the_batch_watcher_of_a_table_is_an_asset_watcher_with_a_stable_trigger():
    watcher = table_watcher(state="/state/orders_cdc", table="shop.orders")
    asset = sink_table_asset("/lake", "shop.orders", watchers=[watcher])

    assert asset.watchers == [watcher]
    assert watcher.trigger.serialize() == table_watcher(state="/state/orders_cdc", table="`shop`.`orders`").trigger.serialize()
