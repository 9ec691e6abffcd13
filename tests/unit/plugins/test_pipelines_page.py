"""The UI page of the plugin (plugins/), served by its FastAPI app from pipelines' state locations."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import TableEventKind
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.plugins.mysqlcdc_plugin import AUTHENTICATED, MySqlCdcPlugin, app, pipelines
from airflow_provider_mysqlcdc.plugins.pipelines_page import lag_chart
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.protocol.progress import (
    HistoryPoint,
    StreamBatchProgress,
    StreamHistory,
    StreamOffsetProgress,
)
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable
from airflow_provider_mysqlcdc.state.drift import read_drift, record_drift
from airflow_provider_mysqlcdc.state.registry import STREAM_HISTORY, STREAM_OFFSET, STREAM_PROGRESS, PipelineState

ORDERS, ODD = TableId("shop", "orders"), TableId("shop", "<script>alert(1)</script>")
AT = BinlogOffset("binlog.000002", 400)


@pytest.fixture(autouse=True)
def signed_in():
    """Airflow's auth manager, which checks the user, runs in the API server only (the integration
    test signs in for real); here every request counts as signed in."""
    app.dependency_overrides[AUTHENTICATED] = lambda: None
    yield
    app.dependency_overrides.clear()


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__MYSQLCDC__STATE_DIRS", str(tmp_path / "state"))
    state = PipelineState(str(tmp_path / "state" / "shop_cdc"))
    state.commit({t: CapturedTable("id", [FinishedSplit(SnapshotSplit(t, i, "id", i * 100 or None, (i + 1) * 100),
                                                        AT, AT, rows=100) for i in range(3)]) for t in (ORDERS, ODD)})
    record_drift(state, read_drift(state), ORDERS, TableEventKind.ALTERED, BinlogOffset("binlog.000003", 4),
                 "column(s) note dropped or renamed by 'ALTER TABLE orders DROP COLUMN note'")
    state.write_progress(STREAM_PROGRESS, StreamBatchProgress("mysqlcdc-1", 7, 1.0, 3, 40, AT, 1000, AT, [str(ORDERS)],
                                                              {ORDERS.quoted: 40}, 0.5, 1, 1.25, 0.5))
    state.write_progress(STREAM_OFFSET, StreamOffsetProgress(StreamOffset(AT, 1), 1.0, "/lake", "mysqlcdc-1",
                                                             BinlogOffset("binlog.000003", 900), 1234))
    history = StreamHistory()
    for i in range(5):
        history = history.with_point(HistoryPoint(100.0 + i, 0.5 * i, 100 * i, i))
    state.write_progress(STREAM_HISTORY, history)
    (tmp_path / "state" / "not_a_pipeline").mkdir()
    return tmp_path / "state"


def test_pipelines_are_found_as_the_state_dir_or_its_folders(state_dir):
    assert pipelines([str(state_dir)]) == {"shop_cdc": str(state_dir / "shop_cdc")}
    assert pipelines([str(state_dir / "shop_cdc")]) == {"shop_cdc": str(state_dir / "shop_cdc")}


def test_the_page_shows_tables_splits_the_stream_its_lag_chart_and_pending_re_snapshots(state_dir):
    response = TestClient(app).get("/")
    assert response.status_code == 200
    text = response.text
    assert "<h2 id=\"shop_cdc\">shop_cdc</h2>" in text
    assert "shop.orders" in text and "3 split(s)" in text and "re-snapshot pending" in text
    assert "DROP COLUMN note" in text and "1,234 bytes" in text and "1.25s" in text
    assert text.count("<polyline") == 2  # lag and bytes behind over time


def test_names_from_the_state_are_escaped(state_dir):
    text = TestClient(app).get("/").text
    assert "<script>alert" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_the_json_api_has_the_status_of_each_pipeline(state_dir):
    body = TestClient(app).get("/api/pipelines").json()
    assert body["shop_cdc"]["error"] is None and body["shop_cdc"]["status"]["generation"] == 1
    assert len(body["shop_cdc"]["splits"]["shop.orders"]) == 3


def test_without_state_dirs_the_page_says_what_to_set(monkeypatch):
    monkeypatch.delenv("AIRFLOW__MYSQLCDC__STATE_DIRS", raising=False)
    assert "AIRFLOW__MYSQLCDC__STATE_DIRS" in TestClient(app).get("/").text


def test_a_chart_needs_two_batches():
    assert "<polyline" not in lag_chart([[1.0, 0.5, None, 1]], index=1, title="lag", unit="s")


def test_the_plugin_mounts_the_app_and_adds_a_navigation_entry():
    [mounted] = MySqlCdcPlugin.fastapi_apps
    [view] = MySqlCdcPlugin.external_views
    assert mounted["app"] is app and mounted["url_prefix"] == "/mysqlcdc" and view["href"] == "/mysqlcdc/"


def test_the_page_lists_tables_a_pattern_matches_since_the_stream_saw_them_created(state_dir):
    from airflow_provider_mysqlcdc.state.new_tables import record_new_table

    state = PipelineState(str(state_dir / "shop_cdc"))
    record_new_table(state, TableId("shop", "order_3"), BinlogOffset("binlog.000003", 77), "CREATE TABLE order_3 (id INT)")
    record_new_table(state, ORDERS, BinlogOffset("binlog.000003", 88), "CREATE TABLE orders ...")  # captured already
    text = TestClient(app).get("/").text
    assert "Tables the next run captures" in text and "shop.order_3" in text and "binlog.000003:77" in text
    assert "binlog.000003:88" not in text


def test_the_page_shows_each_tables_latest_ddl_and_what_its_policy_did(state_dir):
    from airflow_provider_mysqlcdc.state.ddl_log import record_ddl

    state = PipelineState(str(state_dir / "shop_cdc"))
    record_ddl(state, BinlogOffset("binlog.000003", 4), "ALTER TABLE orders DROP COLUMN note", "lenient",
               {ORDERS: "column(s) note gone from the source, kept in the sink with their last values"})
    text = TestClient(app).get("/").text
    assert "Schema changes met" in text and "binlog.000003:4" in text and "lenient" in text
    assert "kept in the sink with their last values" in text
