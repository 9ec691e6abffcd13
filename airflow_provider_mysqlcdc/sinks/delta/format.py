"""Delta Lake as a ``SinkFormat`` (sinks/base.py): registered as ``delta`` in sinks/factory.py."""

from __future__ import annotations

import pyarrow as pa

from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.base import Sink, SinkFormat


class DeltaFormat(SinkFormat):
    name = "delta"
    merge_modes = ("copy-on-write", "merge-on-read")

    def open(self, spec: SinkSpec, storage_options: dict[str, str] | None = None, *,
             catalog_properties: dict[str, str] | None = None) -> Sink:
        from airflow_provider_mysqlcdc.sinks.delta.sink import DEFAULT_MERGE_MODE, DeltaSink

        return DeltaSink(spec.root, storage_options, merge_mode=spec.merge_mode or DEFAULT_MERGE_MODE,
                         table_merge_modes=spec.table_merge_modes)

    def column_types(self, schema: pa.Schema) -> list[tuple[str, str]]:
        """Delta's own names (``long``, ``timestamp_ntz``, ``decimal(10,2)``), as delta-rs converts them."""
        from deltalake import Schema as DeltaSchema

        return [(f.name, f.type.type) for f in DeltaSchema.from_arrow(schema).fields]


FORMAT = DeltaFormat()
