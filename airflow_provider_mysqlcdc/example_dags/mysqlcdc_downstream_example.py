"""Example: a DAG that runs whenever the pipeline changed a sink table, and knows how fresh it is.

It is scheduled on the Airflow Asset of the first table of MYSQLCDC_EXAMPLE_TABLES in
MYSQLCDC_SINK_ROOT (the example pipeline's settings: mysqlcdc_example.py). Each snapshot chunk and
each stream run that changed the table adds an asset event whose ``extra`` holds the binlog position
the table is exact at, the rows changed and the registry generation (assets/sink_tables.py). With
MYSQLCDC_WATCH_STREAM_BATCHES=true the asset also has the watcher of triggers/table_changes.py: an
event per micro-batch of a continuous stream that changed the table.
"""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import DAG, Asset, task

from airflow_provider_mysqlcdc.assets.sink_tables import sink_table_asset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.triggers.table_changes import table_watcher

SINK_ROOT = os.environ.get("MYSQLCDC_SINK_ROOT", "/tmp/mysqlcdc/lake")
TABLE = TableId.parse_list(os.environ.get("MYSQLCDC_EXAMPLE_TABLES", "shop.orders"))[0]
#: the example pipeline's state location (mysqlcdc_example.py: <state_dir>/<dag_id>)
PIPELINE_STATE = f"{os.environ.get('MYSQLCDC_STATE_DIR', '/tmp/mysqlcdc/state').rstrip('/')}/mysqlcdc_example"
# "true": also an event per micro-batch of a continuous stream, from a watcher in the triggerer
WATCHERS = [table_watcher(state=PIPELINE_STATE, table=TABLE.quoted)] \
    if os.environ.get("MYSQLCDC_WATCH_STREAM_BATCHES", "").lower() == "true" else []

with DAG(dag_id="mysqlcdc_downstream_example", schedule=[sink_table_asset(SINK_ROOT, TABLE, watchers=WATCHERS)],
         catchup=False, tags=["mysqlcdc"]):

    @task
    def report_freshness(*, triggering_asset_events: Any = None) -> list[dict[str, Any]]:
        """What changed since the last run: one line per asset event (a chunk, a stream run)."""
        seen = []
        for asset, events in triggering_asset_events.items():
            if not isinstance(asset, Asset):  # the same events, keyed by the alias they came through
                continue
            for event in events:
                extra = dict(event.extra)
                if extra.get("from_trigger"):  # a watcher's event: Airflow keeps what it fired under "payload"
                    extra = dict(extra["payload"])
                print(f"{extra.get('table')} ({asset.uri}): {extra.get('kind')} changed {extra.get('rows_changed')} "
                      f"row(s), exact at binlog {extra.get('binlog_offset')}, registry generation "
                      f"{extra.get('generation')}")
                seen.append(extra)
        return seen

    report_freshness()
