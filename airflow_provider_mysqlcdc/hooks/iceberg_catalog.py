"""The hook for the Iceberg catalog of a pipeline's lake (``iceberg_catalog_conn_id``).

Any Airflow connection whose extras hold pyiceberg's catalog properties: ``type`` (``sql``, ``rest``,
``glue``, ``hive``...), ``uri``, ``warehouse``, credentials (``credential``, ``token``,
``s3.access-key-id``...), and ``name`` when the catalog's tables are kept under another catalog name
than ``mysqlcdc`` (a SQL catalog keeps each name's tables apart). The properties reach every process
that opens the sink the way the object store's credentials do (state/credentials.py): in memory and
in the private credentials file of its Spark programs, never in XCom, a job file or an argument.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError


class IcebergCatalogHook(BaseHook):
    """Turns an Airflow connection's extras into the Iceberg catalog's properties."""

    conn_name_attr = "iceberg_catalog_conn_id"
    default_conn_name = "iceberg_catalog_default"
    conn_type = "iceberg_catalog"
    hook_name = "Iceberg catalog of a MySQL CDC lake"

    def __init__(self, iceberg_catalog_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id

    def properties(self) -> dict[str, str]:
        extra = self.get_connection(self.iceberg_catalog_conn_id).extra_dejson
        if not isinstance(extra.get("type"), str) or not extra.get("type"):
            raise ConfigurationError(
                f"Connection {self.iceberg_catalog_conn_id!r} names no catalog type: its extras are pyiceberg's catalog "
                'properties, e.g. {"type": "sql", "uri": "postgresql+psycopg2://user:pass@host/db"} or '
                '{"type": "rest", "uri": "https://catalog.example.com", "credential": "..."}.')
        return {name: value if isinstance(value, str) else str(value) for name, value in extra.items()}
