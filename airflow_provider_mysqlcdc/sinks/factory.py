"""The one way to open a sink: from the lake's location, the object store's options and the table
format. Nothing outside ``sinks/`` names a format's class, so a format is added here and in its own
module, not at every caller."""

from __future__ import annotations

from airflow_provider_mysqlcdc.protocol.sinks import DEFAULT_NAMESPACE, SINK_FORMATS, check_sink_format
from airflow_provider_mysqlcdc.sinks.base import Sink

__all__ = ["SINK_FORMATS", "open_sink"]


def open_sink(root: str, storage_options: dict[str, str] | None = None, *, sink_format: str = "delta",
              iceberg_namespace: str = DEFAULT_NAMESPACE, iceberg_catalog: dict[str, str] | None = None) -> Sink:
    """The sink whose tables live under ``root`` (a local path or an object store URL), reached with
    ``storage_options`` (an object store's credentials and settings, as delta-rs takes them). An
    Iceberg sink names its tables in the catalog of ``iceberg_catalog`` (pyiceberg's catalog
    properties; None: the embedded one of a local lake) under ``iceberg_namespace``
    (sinks/iceberg/catalog.py)."""
    if check_sink_format(sink_format) == "iceberg":
        from airflow_provider_mysqlcdc.sinks.iceberg.sink import IcebergSink

        return IcebergSink(root, storage_options, catalog_properties=iceberg_catalog, namespace=iceberg_namespace)
    from airflow_provider_mysqlcdc.sinks.delta.sink import DeltaSink

    return DeltaSink(root, storage_options)
