"""``MySqlCdcTableChangedTrigger``: an asset watcher that fires whenever the stream changed a sink table.

A stream task adds its asset events when it ends (assets/sink_tables.py): for a continuous stream,
that is when the stream stops. To hear of every micro-batch instead, watch the table's asset with
this trigger (Airflow's event-driven scheduling: it runs in the triggerer, and each event it fires
becomes an asset event of the watched asset):

    sink_table_asset("/lake", "shop.orders", watchers=[table_watcher(state="/state/orders_cdc", table="shop.orders")])

(``table_watcher`` is an ``AssetWatcher`` with this trigger). Every ``poll_interval_s``
it reads the stream's heartbeat in the pipeline's state location (``progress/stream.json``: per
table, the changes the running stream applied since it started) and fires when the table's count
grew (of a table a route writes shards into: their counts summed), with the same ``extra`` as a task's event, of kind ``stream-batch``: the rows changed since
its last event (batches that finished between two looks are one event), the offset of the batch's
last change and the registry generation. What it reported last is kept in the asset's state store
(saved before the event fires), so a restarted triggerer neither repeats an event nor fires for
history: attached to a pipeline, it reports what happens from then on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection
from typing import Any, cast

from airflow.sdk import AssetWatcher
from airflow.triggers.base import BaseEventTrigger, TriggerEvent
from asgiref.sync import sync_to_async

from airflow_provider_mysqlcdc.assets.sink_tables import TableChanged
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.hooks.object_store import storage_options_for
from airflow_provider_mysqlcdc.protocol.progress import StreamBatchProgress
from airflow_provider_mysqlcdc.sinks.routing import sink_table_id
from airflow_provider_mysqlcdc.state.registry import STREAM_PROGRESS, PipelineState

#: the asset state store's key of what the trigger reported last
CURSOR_KEY = "mysqlcdc_stream_cursor"


class MySqlCdcTableChangedTrigger(BaseEventTrigger):
    """Fires a ``TableChanged`` extra each time the pipeline's stream changed ``table``.

    :param state: the pipeline's state location (``<state_dir>/<dag_id>``)
    :param table: the table, ``db.table`` (backticks around names with dots)
    :param poll_interval_s: how often to read the stream's heartbeat
    :param aws_conn_id: the ``aws`` connection of a state location on an object store
    """

    def __init__(self, *, state: str, table: str, poll_interval_s: float = 2.0, aws_conn_id: str | None = None) -> None:
        super().__init__()
        self.state = state
        self.table = TableId.parse(table).quoted
        self.poll_interval_s = poll_interval_s
        self.aws_conn_id = aws_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"state": self.state, "table": self.table, "poll_interval_s": self.poll_interval_s,
                 "aws_conn_id": self.aws_conn_id})

    async def _pipeline(self) -> PipelineState:
        options = await sync_to_async(storage_options_for)(self.aws_conn_id, self.state)
        return PipelineState(self.state, options)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        pipeline = await self._pipeline()
        cursor = await self._load_cursor()
        sources, generation = [self.table], None
        while True:
            progress = await asyncio.to_thread(pipeline.read_progress, StreamBatchProgress, STREAM_PROGRESS)
            if progress is not None:
                if progress.generation != generation:  # the tables writing into this one, looked up again
                    generation = progress.generation
                    sources = await asyncio.to_thread(self._sources, pipeline)
                position = stream_cursor(progress, sources)
                if cursor is None:  # first look: from now on
                    cursor = await self._save_cursor(position)
                elif position != cursor:
                    changed = rows_since(cursor, position)
                    # saved before the event is fired: a triggerer stopped in between loses it
                    # rather than firing it twice
                    cursor = await self._save_cursor(position)
                    if changed > 0:  # not a shard leaving the watched table's route
                        change = TableChanged(TableId.parse(self.table), "stream-batch", changed,
                                              progress.last_change_offset, progress.generation)
                        self.log.info("%s changed: %s", self.table, change.extra)
                        yield TriggerEvent(change.extra)
            await asyncio.sleep(self.poll_interval_s)

    def _sources(self, pipeline: PipelineState) -> list[str]:
        """The source tables whose changes land in the watched table: the shards the registry routes
        into it (sinks/routing.py), else the table itself."""
        tables = pipeline.latest().tables
        shards = [t.quoted for t, c in tables.items() if sink_table_id(t, c.table_rule).quoted == self.table]
        return shards or [self.table]

    # The store's synchronous calls, in a thread as for any Airflow call of a trigger (its async
    # ones are newer than Airflow 3.3.1)
    async def _load_cursor(self) -> list[Any] | None:
        if self.asset_state_store is None:
            return None
        return cast("list[Any] | None", await sync_to_async(self.asset_state_store.get)(CURSOR_KEY))

    async def _save_cursor(self, cursor: list[Any]) -> list[Any]:
        if self.asset_state_store is not None:
            await sync_to_async(self.asset_state_store.set)(CURSOR_KEY, cursor)
        return cursor


def stream_cursor(progress: StreamBatchProgress, sources: Collection[str]) -> list[Any]:
    """Which stream process the heartbeat is of, and how many changes it applied to the ``sources``
    (quoted source tables: one, or the shards of a routed table)."""
    return [progress.app_id, progress.started_at, sum(progress.table_changes.get(t, 0) for t in sources)]


def rows_since(cursor: list[Any], position: list[Any]) -> int:
    """The table's changes since ``cursor``: counts of one stream process grow; a new process (a
    restart, another checkpoint) counts from 0, so all of its count is new."""
    same_process = cursor[:2] == position[:2]
    return position[2] - cursor[2] if same_process else position[2]


def table_watcher(*, state: str, table: str, poll_interval_s: float = 2.0, aws_conn_id: str | None = None) -> AssetWatcher:
    """An ``AssetWatcher`` for a sink table's asset: an asset event whenever the pipeline's stream
    (state location ``state``) changed ``table``."""
    trigger = MySqlCdcTableChangedTrigger(state=state, table=table, poll_interval_s=poll_interval_s,
                                          aws_conn_id=aws_conn_id)
    return AssetWatcher(name=f"mysqlcdc stream batches of {trigger.table} ({state})", trigger=trigger)
