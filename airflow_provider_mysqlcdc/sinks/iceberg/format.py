"""Apache Iceberg as a ``SinkFormat`` (sinks/base.py): registered as ``iceberg`` in sinks/factory.py."""

from __future__ import annotations

import pyarrow as pa

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.base import Sink, SinkFormat


class IcebergFormat(SinkFormat):
    name = "iceberg"
    merge_modes = ("copy-on-write", "merge-on-read")

    def open(self, spec: SinkSpec, storage_options: dict[str, str] | None = None, *,
             catalog_properties: dict[str, str] | None = None) -> Sink:
        from airflow_provider_mysqlcdc.sinks.iceberg.sink import DEFAULT_MERGE_MODE, IcebergSink

        return IcebergSink(spec.root, storage_options, catalog_properties=catalog_properties, namespace=spec.namespace,
                           merge_mode=spec.merge_mode or DEFAULT_MERGE_MODE, table_merge_modes=spec.table_merge_modes)

    def column_types(self, schema: pa.Schema) -> list[tuple[str, str]]:
        """Iceberg's names of the types the sink writes (its narrowest integer is ``int``; ``timestamp``
        has no zone, ``timestamptz`` has one)."""
        return [(f.name, _type_name(f.type)) for f in schema]

    def catalog_name(self, spec: SinkSpec, table_id: TableId) -> str | None:
        from airflow_provider_mysqlcdc.sinks.iceberg.catalog import table_identifier

        return ".".join(table_identifier(spec.namespace, table_id))


def _type_name(kind: pa.DataType) -> str:
    if pa.types.is_boolean(kind):
        return "boolean"
    if pa.types.is_int64(kind):
        return "long"
    if pa.types.is_integer(kind):
        return "int"
    if pa.types.is_float32(kind):
        return "float"
    if pa.types.is_float64(kind):
        return "double"
    if pa.types.is_decimal(kind):
        return f"decimal({kind.precision},{kind.scale})"
    if pa.types.is_date(kind):
        return "date"
    if pa.types.is_timestamp(kind):
        return "timestamptz" if kind.tz else "timestamp"
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return "binary"
    return "string"


FORMAT = IcebergFormat()
