"""The OpenLineage datasets the snapshot and stream tasks report (lineage/openlineage.py)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("airflow.providers.openlineage")

from openlineage.client.serde import Serde  # noqa: E402

from airflow_provider_mysqlcdc.cdc.model.rules import Route, TableRule  # noqa: E402
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema  # noqa: E402
from airflow_provider_mysqlcdc.cdc.source.rules import captured_schema  # noqa: E402
from airflow_provider_mysqlcdc.lineage.openlineage import LineageTable, pipeline_lineage, sink_dataset_name  # noqa: E402
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec

T = TableId("shop", "or/ders")
SCHEMA = TableSchema(T, (Column("id", "bigint", "bigint(20) unsigned", False, unsigned=True),
                         Column("name", "varchar", "varchar(20)", True)), ("id",))


@pytest.mark.parametrize("root, expected", [
    ("lake", ("file", os.path.abspath("lake") + "/shop/or@002fders")),
    ("file:///data/lake/", ("file", "/data/lake/shop/or@002fders")),
    ("s3://bucket/lake", ("s3://bucket", "lake/shop/or@002fders")),
    ("s3a://bucket/lake", ("s3://bucket", "lake/shop/or@002fders")),
    ("gs://bucket/lake", ("gs://bucket", "lake/shop/or@002fders")),
    ("abfss://box@acct.dfs.core.windows.net/lake", ("abfss://box@acct.dfs.core.windows.net", "lake/shop/or@002fders")),
])
def test_a_delta_table_is_named_as_openlineage_names_its_location(root, expected):
    assert sink_dataset_name(root, T) == expected


def _event_json(lineage) -> tuple[dict, dict]:
    [source], [sink] = lineage.inputs, lineage.outputs
    return Serde.to_dict(source), Serde.to_dict(sink)


def test_the_source_table_is_a_mysql_dataset_with_the_source_column_types():
    source, _ = _event_json(pipeline_lineage(host="db.example", port=3307, sink=SinkSpec("s3://b/lake"), tables=[LineageTable(T, SCHEMA, "id")]))
    assert (source["namespace"], source["name"]) == ("mysql://db.example:3307", "shop.or/ders")
    assert [(f["name"], f["type"]) for f in source["facets"]["schema"]["fields"]] == [
        ("id", "bigint(20) unsigned"), ("name", "varchar(20)")]


def test_the_delta_table_has_delta_types_identity_column_lineage_and_row_count():
    _, sink = _event_json(pipeline_lineage(host="db", port=3306, sink=SinkSpec("s3://b/lake"), tables=[LineageTable(T, SCHEMA, "id", rows=42)]))
    types = {f["name"]: f["type"] for f in sink["facets"]["schema"]["fields"]}
    assert types["id"] == "decimal(20,0)" and types["name"] == "string" and types["_cdc_version"] == "long"
    lineage = sink["facets"]["columnLineage"]["fields"]
    assert set(lineage) == {"id", "name", "_cdc_chunk"}
    [name_from] = lineage["name"]["inputFields"]
    assert (name_from["namespace"], name_from["name"], name_from["field"]) == ("mysql://db:3306", "shop.or/ders", "name")
    assert name_from["transformations"][0]["type"] == "DIRECT" and name_from["transformations"][0]["subtype"] == "IDENTITY"
    [chunk_from] = lineage["_cdc_chunk"]["inputFields"]
    assert chunk_from["field"] == "id" and chunk_from["transformations"][0]["subtype"] == "TRANSFORMATION"
    assert sink["outputFacets"]["outputStatistics"]["rowCount"] == 42


def test_a_masked_column_is_a_masking_transformation_and_a_left_out_one_has_no_lineage():
    schema = captured_schema(SCHEMA, TableRule(hash=("name",)), chunk_key="id")
    _, sink = _event_json(pipeline_lineage(host="db", port=3306, sink=SinkSpec("/lake"), tables=[LineageTable(T, schema, "id")]))
    [name_from] = sink["facets"]["columnLineage"]["fields"]["name"]["inputFields"]
    assert name_from["transformations"] == [{"type": "DIRECT", "subtype": "TRANSFORMATION", "masking": True,
                                             "description": "masked: HMAC-SHA-256 of the value, keyed by the "
                                                            "pipeline's salt"}]
    left_out = captured_schema(SCHEMA, TableRule(exclude=("name",)), chunk_key="id")
    _, sink = _event_json(pipeline_lineage(host="db", port=3306, sink=SinkSpec("/lake"), tables=[LineageTable(T, left_out, "id")]))
    assert set(sink["facets"]["columnLineage"]["fields"]) == {"id", "_cdc_chunk"}


def test_a_table_without_a_remembered_schema_is_named_without_facets():
    source, sink = _event_json(pipeline_lineage(host="db", port=3306, sink=SinkSpec("/lake"), tables=[LineageTable(T)]))
    assert "facets" not in source or not source["facets"]
    assert sink["name"] == "/lake/shop/or@002fders" and not sink.get("outputFacets")


def test_the_shards_of_a_routed_table_are_inputs_of_its_one_delta_table_with_their_rows_summed():
    route = TableRule(route=Route("shop", "orders"))
    shards = [LineageTable(t, TableSchema(t, SCHEMA.columns, ("id",), table_rule=route), "id", rows=rows)
              for t, rows in ((TableId("shop_1", "orders"), 5), (TableId("shop_2", "orders"), 7))]
    lineage = pipeline_lineage(host="db", port=3306, sink=SinkSpec("s3://b/lake"), tables=shards)
    assert [i.name for i in lineage.inputs] == ["shop_1.orders", "shop_2.orders"]
    [sink] = [Serde.to_dict(o) for o in lineage.outputs]
    assert (sink["namespace"], sink["name"]) == ("s3://b", "lake/shop/orders")
    assert sink["outputFacets"]["outputStatistics"]["rowCount"] == 12


def test_an_iceberg_table_is_named_by_its_location_with_its_catalog_name_as_a_symlink_and_iceberg_types():
    timestamped = TableSchema(T, (*SCHEMA.columns, Column("at", "datetime", "datetime", True),
                                  Column("n", "tinyint", "tinyint(4)", True)), ("id",))
    _, sink = _event_json(pipeline_lineage(host="db", port=3306, sink=SinkSpec("s3://b/lake", "iceberg", "lake_{database}"), tables=[LineageTable(T, timestamped, "id", rows=3)]))
    assert (sink["namespace"], sink["name"]) == ("s3://b", "lake/shop/or@002fders")
    [symlink] = sink["facets"]["symlinks"]["identifiers"]
    assert symlink == {"namespace": "s3://b", "name": "lake_shop.or/ders", "type": "TABLE"}
    types = {f["name"]: f["type"] for f in sink["facets"]["schema"]["fields"]}
    assert (types["at"], types["n"], types["_cdc_event_ts"], types["id"]) == ("timestamp", "int", "timestamptz",
                                                                              "decimal(20,0)")


def test_an_iceberg_table_its_catalog_placed_is_named_by_the_location_the_catalog_gave_it():
    placed = "s3://table-bucket/4f1c-uuid"
    _, sink = _event_json(pipeline_lineage(host="db", port=3306, sink=SinkSpec("s3://b/lake", "iceberg"), tables=[LineageTable(T, SCHEMA, "id")], locate={T: placed}.get))
    assert (sink["namespace"], sink["name"]) == ("s3://table-bucket", "4f1c-uuid")
    [symlink] = sink["facets"]["symlinks"]["identifiers"]
    assert symlink == {"namespace": "s3://table-bucket", "name": "shop.or/ders", "type": "TABLE"}


def test_a_delta_table_has_no_symlink():
    _, sink = _event_json(pipeline_lineage(host="db", port=3306, sink=SinkSpec("s3://b/lake"), tables=[LineageTable(T, SCHEMA, "id")]))
    assert "symlinks" not in sink["facets"]
