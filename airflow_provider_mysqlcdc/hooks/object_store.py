"""The hook for the object store that holds a pipeline's lake and state location (``aws_conn_id``).

An ``aws`` connection, as Amazon's provider defines it (that provider is not needed): access key
id as login, secret access key as password, ``region_name``, ``endpoint_url`` (an S3-compatible
server: MinIO, Ceph, R2...) and ``aws_session_token`` in its extras. The credentials stay in memory
and in the environment of the task's process and its Spark programs (state/credentials.py): never
in XCom, a job file, a Spark conf or a process argument.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials


class ObjectStoreHook(BaseHook):
    """Turns an ``aws`` Airflow connection into the credentials fsspec and delta-rs read."""

    conn_name_attr = "aws_conn_id"
    default_conn_name = "aws_default"
    conn_type = "aws"
    hook_name = "Object store of a MySQL CDC lake"

    def __init__(self, aws_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.aws_conn_id = aws_conn_id

    def credentials(self) -> ObjectStoreCredentials:
        conn = self.get_connection(self.aws_conn_id)
        return ObjectStoreCredentials.from_aws_connection(conn_id=self.aws_conn_id, login=conn.login,
                                                          password=conn.password, extra=conn.extra_dejson)


def open_object_store(aws_conn_id: str | None, catalog_conn_id: str | None = None) -> ObjectStoreCredentials:
    """An operator's first step when it touches the lake or the state location: install the
    credentials of ``aws_conn_id`` in this process (none given: the machine's own apply), with the
    sink catalog's properties of ``catalog_conn_id`` (a ``SinkSpec``'s; hooks/iceberg_catalog.py)."""
    credentials = ObjectStoreHook(aws_conn_id).credentials() if aws_conn_id else ObjectStoreCredentials()
    if catalog_conn_id:
        from airflow_provider_mysqlcdc.hooks.iceberg_catalog import IcebergCatalogHook

        credentials = credentials.with_catalog(IcebergCatalogHook(catalog_conn_id).properties())
    credentials.install()
    return credentials


def storage_options_for(aws_conn_id: str | None, url: str) -> dict[str, Any]:
    """fsspec options that carry the credentials of ``aws_conn_id`` for ``url`` explicitly, for a
    process that watches other pipelines too and so must not install them (the triggerer)."""
    return ObjectStoreHook(aws_conn_id).credentials().fsspec_options(url) if aws_conn_id else {}
