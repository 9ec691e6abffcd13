"""The sink's tables as Airflow Assets: a DAG scheduled on a table runs when the pipeline changed it.

    from airflow_provider_mysqlcdc.assets.sink_tables import sink_table_asset

    with DAG("orders_report", schedule=[sink_table_asset("/lake", "shop.orders")]):
        ...

A table's asset is its Delta table's location as a URI (``file:///lake/shop/orders``,
``s3://bucket/lake/shop/orders``): the name Delta readers and OpenLineage give the table too. The
pipeline's tasks that change sink tables (each snapshot chunk, the stream) have the pipeline's
``sink_alias`` among their outlets and add, through it, one asset event per table they changed,
whose ``extra`` (``TableChanged.extra``) tells a downstream DAG how fresh the table is: which
binlog position it holds, how many rows changed, and the registry generation. Going through an
alias, a stream run that changed nothing triggers nothing, and tables named only at trigger time
(the ``tables`` param) get events too. A task's events come when it ends; for an event per stream
batch (a continuous stream's task ends only with the stream), give the asset the watcher of
triggers/table_changes.py.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from airflow.sdk import Asset, AssetAlias, AssetWatcher

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId

#: the asset group of the sink's tables (the Airflow UI groups assets by it)
ASSET_GROUP = "mysqlcdc"


def table_asset_uri(sink_root: str, table: TableId | str) -> str:
    """The URI of a sink table: its location, a local path as ``file://`` (made absolute)."""
    table_id = table if isinstance(table, TableId) else TableId.parse(table)
    root = sink_root.rstrip("/")
    if "://" not in root:
        root = "file://" + os.path.abspath(root)
    return "/".join([root, *(urllib.parse.quote(segment, safe="@") for segment in table_id.path_segments)])


def sink_table_asset(sink_root: str, table: TableId | str, *, watchers: list[AssetWatcher] | None = None) -> Asset:
    """The Asset of ``table`` (``db.table``) in the sink at ``sink_root`` (as given to the pipeline);
    ``watchers``: e.g. ``triggers/table_changes.table_watcher``, for an event per stream batch."""
    uri = table_asset_uri(sink_root, table)
    return Asset(name=uri, uri=uri, group=ASSET_GROUP, watchers=watchers or [])


def sink_alias(sink_root: str) -> AssetAlias:
    """The alias the pipeline's tasks add their table events through (one per sink)."""
    return AssetAlias(name=f"mysqlcdc tables in {sink_root.rstrip('/')}", group=ASSET_GROUP)


@dataclass(frozen=True)
class TableChanged:
    """What a task did to one sink table: the asset event it emits."""

    table_id: TableId
    kind: str  # "snapshot" (a chunk's rows), "stream" (a stream run's changes), "stream-batch" (a watcher's)
    rows_changed: int
    binlog_offset: BinlogOffset | None  # the position the table is exact at (a chunk's high watermark)
    generation: int  # the registry generation in force (a stream's: the one its last batch applied)

    @property
    def extra(self) -> dict[str, Any]:
        return {"table": str(self.table_id), "kind": self.kind, "rows_changed": self.rows_changed,
                "binlog_offset": self.binlog_offset.to_dict() if self.binlog_offset else None,
                "generation": self.generation}


def emit_table_events(outlets: Iterable[Any], context: Any, sink_root: str, changes: Iterable[TableChanged]) -> int:
    """Add an asset event per changed table (in the sink at ``sink_root``) through each of the task's
    outlets that is a pipeline's alias (``sink_alias``; a task given none emits nothing); how many."""
    aliases = [o for o in outlets if isinstance(o, AssetAlias) and o.group == ASSET_GROUP]
    added = 0
    for change in changes:
        for alias in aliases:
            context["outlet_events"][alias].add(sink_table_asset(sink_root, change.table_id), extra=change.extra)
            added += 1
    return added
