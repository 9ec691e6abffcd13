"""The pipeline's metrics (metrics/pipeline_metrics.py) sent through Airflow's Stats with its StatsD
client to a real UDP socket: names, values, and each batch sent once from the stream's heartbeat."""

from __future__ import annotations

import pytest

pytest.importorskip("statsd")

from airflow.sdk.observability import stats  # noqa: E402
from airflow.sdk.observability.metrics.stats_utils import get_stats_factory  # noqa: E402

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset  # noqa: E402
from airflow_provider_mysqlcdc.cdc.model.records import TableEventKind  # noqa: E402
from airflow_provider_mysqlcdc.cdc.model.schema import TableId  # noqa: E402
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit  # noqa: E402
from airflow_provider_mysqlcdc.metrics.pipeline_metrics import PipelineMetrics, StreamMetrics, pipeline_name  # noqa: E402
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset  # noqa: E402
from airflow_provider_mysqlcdc.protocol.progress import StreamBatchProgress, StreamOffsetProgress  # noqa: E402
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable  # noqa: E402
from airflow_provider_mysqlcdc.state.drift import read_drift, record_drift  # noqa: E402
from airflow_provider_mysqlcdc.state.registry import STREAM_OFFSET, STREAM_PROGRESS, PipelineState  # noqa: E402
from devtools.statsd_listener import StatsdListener  # noqa: E402

T = TableId("shop", "line.items")
AT = BinlogOffset("binlog.000002", 400)


@pytest.fixture
def statsd(monkeypatch):
    with StatsdListener() as listener:
        monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
        monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", listener.host)
        monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(listener.port))
        monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")
        stats.initialize(factory=get_stats_factory(), export_legacy_names=False)
        yield listener
    stats.initialize(factory=get_stats_factory(), export_legacy_names=False)  # the environment's own again


def _batch(state: PipelineState, batch: int, counts: dict[str, int], *, started_at: float = 1.0) -> None:
    state.write_progress(STREAM_PROGRESS, StreamBatchProgress(
        "mysqlcdc-1", batch, 10.0 + batch, sum(counts.values()), sum(counts.values()), AT, 1000, AT, [str(T)],
        counts, started_at, 1, batch_seconds=1.5, lag_s=0.25))


def test_a_chunk_sends_its_rows_and_duration_under_the_pipeline_and_table(statsd):
    PipelineMetrics("shop_cdc").chunk_done(T, 250, 2.0)
    metrics = statsd.wait_for(lambda m: len(m) == 2, "two metrics")
    assert {(m.name, m.value, m.kind) for m in metrics} == {
        ("airflow.mysqlcdc.snapshot.rows.shop_cdc.shop.line__items", 250, "c"),
        ("airflow.mysqlcdc.snapshot.chunk_duration.shop_cdc.shop.line__items", 2000, "ms")}


def test_names_stats_cannot_carry_are_normalised():
    assert pipeline_name("s3://bucket/state/shop cdc/") == "shop cdc"
    metrics = PipelineMetrics("shop cdc")
    assert metrics._name("resnapshots", TableId("db", "weird name+1")) == "mysqlcdc.resnapshots.shop_cdc.db.weird_name_1"


def test_each_batch_is_sent_once_with_the_changes_it_applied_per_table(statsd, tmp_path):
    state = PipelineState(str(tmp_path / "shop_cdc"))
    metrics = StreamMetrics(state)
    _batch(state, 0, {T.quoted: 5})
    metrics.observe()
    metrics.observe()  # the same batch again: nothing more
    _batch(state, 1, {T.quoted: 12})
    metrics.observe()
    _batch(state, 0, {T.quoted: 3}, started_at=2.0)  # a restarted stream process counts from 0
    metrics.observe()
    # a batch sends its changes, its duration, then its lag: the last lag received, all three batches are
    statsd.wait_for(lambda m: len([x for x in m if "lag_seconds" in x.name]) == 3, "three batches")
    applied = statsd.received(".stream.changes_applied.shop_cdc.shop.line__items")
    assert [m.value for m in applied] == [5, 7, 3]
    assert [m.value for m in statsd.received(".stream.batch_duration.shop_cdc")] == [1500] * 3
    assert [m.value for m in statsd.received(".stream.lag_seconds.shop_cdc")] == [0.25] * 3


def test_bytes_behind_the_head_is_sent_once_per_recorded_batch_end(statsd, tmp_path):
    state = PipelineState(str(tmp_path / "shop_cdc"))
    metrics = StreamMetrics(state)
    state.write_progress(STREAM_OFFSET, StreamOffsetProgress(StreamOffset(AT, 1), 5.0, "/lake", "mysqlcdc-1",
                                                             BinlogOffset("binlog.000002", 1400), 1000))
    metrics.observe()
    metrics.observe()
    statsd.wait_for(lambda m: len([x for x in m if "tables_pending" in x.name]) == 2, "both looks' gauges")
    assert [m.value for m in statsd.received(".stream.bytes_behind.shop_cdc")] == [1000]


def test_drift_events_recorded_while_a_task_follows_are_counted_and_pending_tables_gauged(statsd, tmp_path):
    state = PipelineState(str(tmp_path / "shop_cdc"))
    split = FinishedSplit(SnapshotSplit(T, 0, "id"), AT, AT)
    state.commit({T: CapturedTable("id", [split])})
    record_drift(state, read_drift(state), T, TableEventKind.ALTERED, BinlogOffset("binlog.000002", 100), "before")
    metrics = StreamMetrics(state)
    metrics.observe()  # recorded before the metrics started: not counted
    record_drift(state, read_drift(state), T, TableEventKind.ALTERED, BinlogOffset("binlog.000003", 4), "dropped x")
    metrics.observe()
    statsd.wait_for(lambda m: len([x for x in m if "tables_pending" in x.name]) == 2, "two looks")
    assert [m.value for m in statsd.received(".drift.events.shop_cdc.shop.line__items")] == [1]
    assert [m.value for m in statsd.received(".drift.tables_pending.shop_cdc")] == [0, 1]
