"""``MySqlCdcTableChangedTrigger``: a table's asset watcher, fed by the stream's heartbeats
(triggers/table_changes.py)."""

from __future__ import annotations

import asyncio
import threading

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.rules import Route, TableRule
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.protocol.progress import StreamBatchProgress
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable
from airflow_provider_mysqlcdc.state.registry import STREAM_PROGRESS, PipelineState
from airflow_provider_mysqlcdc.triggers.table_changes import CURSOR_KEY, MySqlCdcTableChangedTrigger


def _beat(state: PipelineState, counts: dict[str, int], *, started_at: float = 1.0, batch: int = 0) -> None:
    """The stream's heartbeat after a batch: its per-table counts since ``started_at``."""
    state.write_progress(STREAM_PROGRESS, StreamBatchProgress(
        "mysqlcdc-app", batch, 2.0, 0, sum(counts.values()), BinlogOffset("binlog.000002", 400 + batch), None, None,
        [], counts, started_at, 3))


class AssetStore:
    """What the triggerer gives an event trigger as ``asset_state_store`` (the two calls it uses), in
    memory; ``saved`` is set when the trigger saves (its first look at the stream)."""

    def __init__(self) -> None:
        self.values: dict = {}
        self.saved = threading.Event()

    def get(self, key: str, default=None):
        return self.values.get(key, default)

    def set(self, key: str, value) -> None:
        self.values[key] = value
        self.saved.set()


def test_the_batch_watcher_reports_growth_of_its_table_from_its_first_look_on(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    orders, other = TableId("shop", "orders").quoted, TableId("shop", "other").quoted
    trigger = MySqlCdcTableChangedTrigger(state=state.location, table="shop.orders", poll_interval_s=0.01)

    async def scenario() -> tuple[list[dict], list]:
        trigger.asset_state_store = store = AssetStore()
        _beat(state, {orders: 5})  # history when the watcher first looks: never reported
        events = trigger.run()
        waiting = asyncio.ensure_future(events.__anext__())
        await asyncio.to_thread(store.saved.wait, 30)  # its first look
        seen = []
        for beats in ([{orders: 12, other: 4}],  # 7 more
                      [{orders: 12, other: 9}, {orders: 14, other: 9}],  # another table, then 2 more
                      [{orders: 3}]):  # a restarted stream counts from 0
            for counts in beats:
                _beat(state, counts, started_at=5.0 if counts == {orders: 3} else 1.0)
            seen.append((await waiting).payload)
            waiting = asyncio.ensure_future(events.__anext__())
        waiting.cancel()
        await events.aclose()
        return seen, store.values[CURSOR_KEY]

    seen, cursor = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert [e["rows_changed"] for e in seen] == [7, 2, 3]
    assert seen[0] == {"table": "shop.orders", "kind": "stream-batch", "rows_changed": 7,
                       "binlog_offset": {"file": "binlog.000002", "position": 400}, "generation": 3}
    assert cursor == ["mysqlcdc-app", 5.0, 3]


def test_a_restarted_batch_watcher_continues_from_its_saved_cursor(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    orders = TableId("shop", "orders").quoted
    trigger = MySqlCdcTableChangedTrigger(state=state.location, table="shop.orders", poll_interval_s=0.01)

    async def first_event() -> dict:
        trigger.asset_state_store = store = AssetStore()
        store.values[CURSOR_KEY] = ["mysqlcdc-app", 1.0, 5]  # what it reported before the triggerer restarted
        _beat(state, {orders: 9})
        events = trigger.run()
        event = await events.__anext__()
        await events.aclose()
        return event.payload

    assert asyncio.run(asyncio.wait_for(first_event(), 30))["rows_changed"] == 4


def test_the_watcher_of_a_routed_table_sums_the_changes_of_its_shards(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    shards = [TableId("shop_1", "orders"), TableId("shop_2", "orders")]
    routed = TableRule(route=Route("shop", "orders"))
    state.commit({t: CapturedTable("id", [FinishedSplit(SnapshotSplit(t, 0, "id"), BinlogOffset("binlog.000002", 4))],
                                   routed) for t in shards})
    trigger = MySqlCdcTableChangedTrigger(state=state.location, table="shop.orders", poll_interval_s=0.01)

    async def first_event() -> dict:
        trigger.asset_state_store = store = AssetStore()
        store.values[CURSOR_KEY] = ["mysqlcdc-app", 1.0, 5]
        _beat(state, {shards[0].quoted: 4, shards[1].quoted: 6, TableId("shop", "other").quoted: 50})
        events = trigger.run()
        event = await events.__anext__()
        await events.aclose()
        return event.payload

    assert asyncio.run(asyncio.wait_for(first_event(), 30))["rows_changed"] == 5
