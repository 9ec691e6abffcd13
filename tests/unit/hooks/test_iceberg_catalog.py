"""The Iceberg catalog's connection (hooks/iceberg_catalog.py): its extras become the catalog's
properties, which travel like the object store's credentials (in the process's environment and the
private credentials file of its Spark programs) to wherever the sink is opened."""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.hooks.iceberg_catalog import IcebergCatalogHook
from airflow_provider_mysqlcdc.hooks.object_store import open_object_store
from airflow_provider_mysqlcdc.protocol.sinks import CATALOG_VARIABLE, SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials, install_from_private_file


@pytest.fixture
def catalog_connection(monkeypatch, tmp_path):
    uri = f"sqlite:///{tmp_path}/catalog.db"
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_CATALOG", json.dumps(
        {"conn_type": "iceberg_catalog", "extra": {"type": "sql", "uri": uri, "name": "lake", "pool_size": 2}}))
    monkeypatch.delenv(CATALOG_VARIABLE, raising=False)
    yield uri
    os.environ.pop(CATALOG_VARIABLE, None)


def test_the_connections_extras_are_the_catalogs_properties(catalog_connection):
    assert IcebergCatalogHook("lake_catalog").properties() == {"type": "sql", "uri": catalog_connection,
                                                               "name": "lake", "pool_size": "2"}


def test_a_connection_naming_no_catalog_type_is_refused_with_an_example(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_NO_TYPE", json.dumps({"conn_type": "iceberg_catalog", "extra": {"uri": "x"}}))
    with pytest.raises(ConfigurationError, match="names no catalog type.*\"type\": \"rest\""):
        IcebergCatalogHook("no_type").properties()


def test_the_properties_reach_a_spark_programs_sink_through_the_private_file_and_name_its_catalog(
        catalog_connection, tmp_path):
    credentials = open_object_store(None, "lake_catalog")
    assert json.loads(os.environ[CATALOG_VARIABLE])["uri"] == catalog_connection
    assert "sqlite" not in repr(credentials)
    private = SourceConfig(host="h", port=1, user="u", password="p").to_private_file(tmp_path / "secrets.json")
    credentials.add_to_private_file(private)
    os.environ.pop(CATALOG_VARIABLE)
    install_from_private_file(private)  # a Spark program's side
    sink = open_sink(SinkSpec(str(tmp_path / "lake"), "iceberg"))
    assert sink.catalog.name == "lake" and sink.catalog.properties["uri"] == catalog_connection
    assert ObjectStoreCredentials.from_private_file(private).variables[CATALOG_VARIABLE]
