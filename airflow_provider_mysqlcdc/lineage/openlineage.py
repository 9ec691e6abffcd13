"""OpenLineage of the pipeline's tasks: which MySQL tables each reads, which sink tables it writes.

Airflow's OpenLineage provider (``apache-airflow-providers-openlineage``, the ``openlineage`` extra)
asks an operator for ``get_openlineage_facets_on_start`` when its task starts and
``get_openlineage_facets_on_complete`` when it ends; the snapshot and stream operators answer with
``pipeline_lineage``. Without that provider nothing here is imported.

- **Inputs**: the source tables, named as OpenLineage names MySQL tables (namespace
  ``mysql://host:port`` of the ``mysqlcdc`` connection, name ``database.table``), with a schema
  facet of the source's column types.
- **Outputs**: the sink tables (Delta or Iceberg), named by their location as OpenLineage names
  files and object stores (``file`` + the absolute path, ``s3://bucket`` + the key, ``gs://``,
  ``abfss://``), as its Spark integration names Delta and Iceberg tables too; an Iceberg table also
  with a symlinks facet of its name in the catalog (``<namespace>.<table>``, type TABLE); a table
  whose catalog placed it (``mysqlcdc.table-location``) by the location the catalog gave it. With a
  schema facet of the format's types (the source columns and the sink's ``_cdc_`` metadata columns), a
  column lineage facet (every source column is copied as it is: DIRECT/IDENTITY; ``_cdc_chunk``
  is the chunk key's order-preserving text: DIRECT/TRANSFORMATION) and, once the task ended, an
  output statistics facet with the rows it wrote or changed in the table.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from airflow.providers.common.compat.openlineage.facet import (
    ColumnLineageDatasetFacet,
    Fields,
    InputDataset,
    InputField,
    OutputDataset,
    OutputStatisticsOutputDatasetFacet,
    SchemaDatasetFacet,
    SchemaDatasetFacetFields,
    SymlinksDatasetFacet,
)
from airflow.providers.common.compat.openlineage.facet import Identifier as SymlinkIdentifier
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.generated.column_lineage_dataset import Transformation

from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.arrow_rows import CHUNK_COLUMN, arrow_schema
from airflow_provider_mysqlcdc.sinks.base import SinkFormat
from airflow_provider_mysqlcdc.sinks.factory import sink_format
from airflow_provider_mysqlcdc.sinks.routing import sink_table_id
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.schemas import KnownSchemas

#: OpenLineage's scheme for an object store whose URL has another (s3a:// is s3://)
_SCHEMES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}


@dataclass(frozen=True)
class LineageTable:
    """One table a task reads and writes: its schema (None when the pipeline never described it)
    and chunk key, and the rows the task wrote or changed in it (None: not known yet)."""

    table_id: TableId
    schema: TableSchema | None = None
    chunk_key: str | None = None
    rows: int | None = None


def source_namespace(host: str, port: int) -> str:
    return f"mysql://{host}:{port}"


def sink_dataset_name(sink_root: str, table_id: TableId, location: str | None = None) -> tuple[str, str]:
    """The (namespace, name) OpenLineage gives the sink table of ``table_id`` under ``sink_root`` (by
    its location: ``location`` when given, the one its catalog gave an Iceberg table)."""
    if location is None:
        return sink_dataset_name(sink_root, table_id, "/".join([sink_root.rstrip("/"), *table_id.path_segments]))
    location = location.rstrip("/")
    if "://" not in location:
        return "file", os.path.abspath(location)
    parts = urllib.parse.urlsplit(location)
    if parts.scheme == "file":
        return "file", parts.path
    scheme = _SCHEMES.get(parts.scheme, parts.scheme)
    return f"{scheme}://{parts.netloc}", parts.path.lstrip("/")


def pipeline_lineage(*, host: str, port: int, sink: SinkSpec, tables: Iterable[LineageTable],
                     locate: Callable[[TableId], str | None] | None = None) -> OperatorLineage:
    """The task's inputs (source tables) and outputs (the tables of ``sink``: one per routed table,
    whatever its shards, with their rows summed and the column lineage of the first), each at the
    location ``locate`` gives it (None, or no ``locate``: ``<sink root>/<db>/<table>``), its types as
    its format names them, and the name its catalog knows it by as a symlink."""
    table_format = sink_format(sink)
    inputs: list[InputDataset] = []
    facets: dict[tuple[str, str], dict] = {}  # per sink dataset, in the order first met
    rows: dict[tuple[str, str], int | None] = {}
    for table in sorted(tables, key=lambda t: t.table_id):
        source = InputDataset(namespace=source_namespace(host, port), name=f"{table.table_id.database}."
                              f"{table.table_id.table}", facets=_source_facets(table.schema))
        inputs.append(source)
        target = sink_table_id(table.table_id, table.schema.table_rule if table.schema else None)
        dataset = sink_dataset_name(sink.root, target, locate(target) if locate else None)
        if dataset not in facets:
            facets[dataset], rows[dataset] = _sink_facets(table, source, table_format), table.rows
            if (catalog_name := table_format.catalog_name(sink, target)) is not None:
                facets[dataset]["symlinks"] = SymlinksDatasetFacet(identifiers=[SymlinkIdentifier(
                    namespace=dataset[0], name=catalog_name, type="TABLE")])
        elif table.rows is not None:  # another shard of a routed table
            rows[dataset] = (rows[dataset] or 0) + table.rows
    outputs = [OutputDataset(namespace=namespace, name=name, facets=facets[(namespace, name)], outputFacets={} if (
        count := rows[(namespace, name)]) is None else {"outputStatistics": OutputStatisticsOutputDatasetFacet(
            rowCount=count)}) for namespace, name in facets]
    return OperatorLineage(inputs=inputs, outputs=outputs)


def _source_facets(schema: TableSchema | None) -> dict:
    if schema is None:
        return {}
    return {"schema": SchemaDatasetFacet(fields=[
        SchemaDatasetFacetFields(name=c.name, type=c.column_type) for c in schema.columns])}


def _sink_facets(table: LineageTable, source: InputDataset, table_format: SinkFormat) -> dict:
    if table.schema is None:
        return {}
    copied = {c.name: _from(source, c.name, "IDENTITY", "copied as it is") if c.mask is None else
              _from(source, c.name, "TRANSFORMATION", _MASKS[c.mask.split(":")[0]].format(c.mask.partition(":")[2]),
                    masking=True) for c in table.schema.columns}
    if table.chunk_key:
        routed = table.schema.route is not None
        copied[CHUNK_COLUMN] = _from(source, table.chunk_key, "TRANSFORMATION",
                                     "the shard's tag and the chunk key's order-preserving text" if routed
                                     else "the chunk key's order-preserving text")
    return {"schema": SchemaDatasetFacet(fields=[SchemaDatasetFacetFields(name=name, type=type_name) for name, type_name
                                                 in table_format.column_types(arrow_schema(table.schema))]),
            "columnLineage": ColumnLineageDatasetFacet(fields=copied)}


#: how each mask of a column rule (cdc/source/rules.py) is described in the column lineage
_MASKS = {"hash": "masked: HMAC-SHA-256 of the value, keyed by the pipeline's salt", "null": "masked: NULL",
          "truncate": "masked: the first {} characters (bytes of binary data)"}


def _from(source: InputDataset, column: str, subtype: str, description: str, masking: bool = False) -> Fields:
    return Fields(inputFields=[InputField(namespace=source.namespace, name=source.name, field=column,
                                          transformations=[Transformation(type="DIRECT", subtype=subtype,
                                                                          description=description,
                                                                          masking=masking or None)])],
                  transformationType="IDENTITY" if subtype == "IDENTITY" else None,
                  transformationDescription=description)


def known_tables(state: PipelineState, tables: Mapping[TableId, str | None],
                 rows: Mapping[TableId, int] | None = None) -> list[LineageTable]:
    """``tables`` (with their chunk keys) described by the schemas the pipeline remembers in its
    state location (``state/schemas.py``), with ``rows`` per table once the task ended."""
    known = KnownSchemas(state)
    return [LineageTable(t, known.remembered(t), chunk_key, None if rows is None else rows.get(t, 0))
            for t, chunk_key in tables.items()]
