"""Where an Iceberg sink finds its tables: the catalog, and each table's name in it.

An Iceberg table is a name in a catalog pointing at its current metadata file; committing is
swapping that pointer, so every writer of a pipeline (chunk tasks, the stream, maintenance) must
reach the same catalog. The catalog is given as pyiceberg's catalog properties (``type``: ``sql``,
``rest``, ``glue``, ``hive``..., its ``uri``, credentials), which reach the Spark programs in the
private credentials file, never in a job file (state/credentials.py). None given and a lake on a
local path: a SQL catalog in a SQLite file at the lake's root (``EMBEDDED_CATALOG_FILE``), which
every process of one machine shares and which stays with the tables it names.

A table's name is ``<namespace>.<table>``, the namespace from ``namespace`` (a template whose
``{database}`` is the source table's database: ``{database}`` by default, ``lake_{database}``,
or one fixed namespace for a single source database).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyiceberg.exceptions import CommitFailedException

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.sinks import CATALOG_VARIABLE

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

#: the environment variable holding a configured catalog's properties (JSON), installed with the
#: object store's credentials in every process that opens the sink (state/credentials.py)
#: the embedded catalog's SQLite file, at the lake's root
EMBEDDED_CATALOG_FILE = "iceberg_catalog.db"
#: the name the sink gives its catalog, unless its properties name it (``name``): a SQL catalog keeps
#: the tables of each catalog name apart, so a reader of the tables opens the catalog by that name
CATALOG_NAME = "mysqlcdc"
#: our own catalog property (not pyiceberg's): where the sink creates tables. ``sink_root`` (the
#: default): at ``<sink_root>/<db>/<table>``; ``catalog``: where the catalog places them, for catalogs
#: that decide their tables' locations (AWS S3 Tables, SeaweedFS table buckets, managed Polaris)
TABLE_LOCATION_PROPERTY = "mysqlcdc.table-location"
TABLE_LOCATIONS = ("sink_root", "catalog")


def table_identifier(namespace: str, table_id: TableId, suffix: str = "") -> tuple[str, str]:
    """The Iceberg name of the sink table of ``table_id`` (``suffix``: its changelog's)."""
    return namespace.format(database=table_id.database), table_id.table + suffix


def catalog_properties(root: str, configured: dict[str, str] | None) -> dict[str, str]:
    """The properties of the catalog of a lake at ``root``: ``configured``, else those installed in
    this process (``CATALOG_VARIABLE``: a connection's), else the embedded SQLite catalog at the root
    of a local lake."""
    if configured is None and os.environ.get(CATALOG_VARIABLE):
        configured = json.loads(os.environ[CATALOG_VARIABLE])
    if configured:
        return {**object_store_properties(), **configured}
    if "://" in root and not root.startswith("file://"):
        raise ConfigurationError(
            f"An Iceberg lake on an object store ({root}) needs a catalog every writer reaches: give "
            "iceberg_catalog_conn_id, a connection whose extras hold pyiceberg's catalog properties (type sql with a "
            "PostgreSQL uri, rest, glue or hive). The embedded SQLite catalog is for a lake on a local path only.")
    path = root.removeprefix("file://").rstrip("/")
    return {"type": "sql", "uri": f"sqlite:///{path}/{EMBEDDED_CATALOG_FILE}", "warehouse": f"file://{path}"}


#: the object store's variables (state/credentials.py) and the pyiceberg file IO property each one is
_S3_PROPERTIES = {"AWS_ENDPOINT_URL": "s3.endpoint", "AWS_ACCESS_KEY_ID": "s3.access-key-id",
                  "AWS_SECRET_ACCESS_KEY": "s3.secret-access-key", "AWS_SESSION_TOKEN": "s3.session-token",
                  "AWS_REGION": "s3.region"}


def catalog_places_tables(properties: dict[str, str]) -> bool:
    """Whether the catalog of ``properties`` places the tables the sink creates (``TABLE_LOCATION_PROPERTY``)."""
    where = properties.get(TABLE_LOCATION_PROPERTY, "sink_root")
    if where not in TABLE_LOCATIONS:
        raise ConfigurationError(
            f"The Iceberg catalog property {TABLE_LOCATION_PROPERTY} is {where!r}: give 'sink_root' (tables at "
            "<sink_root>/<database>/<table>, the default) or 'catalog' (where the catalog places them, for a catalog "
            "that decides its tables' locations).")
    if where == "catalog" and properties.get("type") == "sql" and not properties.get("warehouse"):
        raise ConfigurationError(
            f"The Iceberg catalog places the tables ({TABLE_LOCATION_PROPERTY} is 'catalog') but is a SQL catalog "
            "without a 'warehouse' property, so it has nowhere to place them: give it a warehouse (an s3:// or "
            "file:// URL), or remove the setting so that tables live under the lake's root.")
    return where == "catalog"


def object_store_properties() -> dict[str, str]:
    """The object store's credentials installed in this process (an ``aws`` connection's: an endpoint
    of an S3-compatible server, keys, region) as pyiceberg's file IO properties, so that the Iceberg
    files are reached as the Delta ones and the state location are; a catalog's own properties
    override them."""
    return {prop: os.environ[variable] for variable, prop in _S3_PROPERTIES.items() if os.environ.get(variable)}


def open_catalog(root: str, configured: dict[str, str] | None) -> Catalog:
    """The catalog of a lake at ``root`` (``catalog_properties``), or the error naming what is wrong
    with its settings and the fix."""
    from pyiceberg.catalog import load_catalog

    properties = catalog_properties(root, configured)
    if properties.get("type") == "sql" and properties.get("uri", "").startswith("sqlite:///"):
        from pathlib import Path

        Path(properties["uri"].removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    name = properties.pop("name", CATALOG_NAME)
    catalog_places_tables(properties)  # a wrong setting is refused before the catalog is written to
    properties.pop(TABLE_LOCATION_PROPERTY, None)  # the sink's, not pyiceberg's
    try:
        return load_catalog(name, **properties)
    except Exception as exc:  # noqa: BLE001 - pyiceberg raises many kinds for bad settings
        shown = ", ".join(sorted(properties))
        said = str(exc)
        for value in sorted(properties.values(), key=len, reverse=True):  # a URI may hold a password
            if len(value) >= 4:
                said = said.replace(value, "***")
        # not chained: the library's own message may name a property's value
        raise ConfigurationError(f"The Iceberg catalog could not be opened with the properties {shown} "
                                 f"({type(exc).__name__}: {said}). Check the catalog connection's extras: they are "
                                 "pyiceberg's catalog properties (type, uri, warehouse, credentials).") from None


@contextlib.contextmanager
def busy_as_conflict() -> Iterator[None]:
    """A catalog that could not take the commit now (an embedded SQLite catalog locked by another
    process's commit beyond its wait) as a conflict: the commit did not land, and is made again."""
    try:
        yield
    except Exception as exc:
        if type(exc).__name__ == "OperationalError" and "database is locked" in str(exc):
            raise CommitFailedException(f"the catalog is busy: {exc}") from exc
        raise
