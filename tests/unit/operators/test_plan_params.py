"""Trigger-time params of the plan task: rendered templates back to values, bad ones named clearly."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.operators.plan import MySqlCdcPlanOperator, native, parse_tables


def plan(**params) -> MySqlCdcPlanOperator:
    return MySqlCdcPlanOperator(task_id="plan", tables=["shop.orders"], state_location="/tmp/unused", **params)


def test_rendered_params_become_values():
    assert native("None") is None and native("") is None and native("12") == 12
    assert native("['shop.a', 'shop.b']") == ["shop.a", "shop.b"]
    assert native("[{'table': 'shop.a', 'from': 1}]") == [{"table": "shop.a", "from": 1}]
    assert parse_tables("None") is None
    assert parse_tables("['shop.a', '`my.db`.`t`']").names == [TableId("shop", "a"), TableId("my.db", "t")]
    settings = plan(split_rows="400", chunk_rows="1200", startup_mode="offset", start_offset="binlog.000003:120",
                    chunk_key_columns="{'shop.orders': 'created_id'}",
                    resnapshot="[{'table': 'shop.orders', 'from': 5, 'to': 9}]")._settings()
    assert settings.start_offset == BinlogOffset("binlog.000003", 120)
    assert settings.chunk_keys == {TableId("shop", "orders"): "created_id"}
    assert settings.resnapshot[0].low == 5 and settings.split_rows == 400
    gtid = plan(startup_mode="offset", start_offset="0-1-100,1-2-7")._settings()
    assert (gtid.start_gtid, gtid.start_offset) == ("0-1-100,1-2-7", None)
    at = plan(startup_mode="timestamp", start_time="2026-11-26T12:00:00Z")._settings()
    assert at.start_time == 1795694400.0 and plan(startup_mode="timestamp", start_time="12.5")._settings().start_time == 12.5


@pytest.mark.parametrize("params, message", [
    ({"start_offset": "binlog.000003", "startup_mode": "offset"}, "Malformed binlog offset"),
    ({"startup_mode": "offset"}, "needs start_offset"),
    ({"split_rows": 500, "chunk_rows": 100}, "split_rows <= chunk_rows"),
    ({"chunk_key_columns": "['id']"}, "chunk_key_columns must map"),
    ({"resnapshot": "[{'table': 'shop.orders', 'below': 3}]"}, "Malformed re-snapshot request"),
    ({"resnapshot": "['orders']"}, "Malformed table name"),
    ({"startup_mode": "earliest-offset"}, "Unknown startup mode 'earliest-offset'"),
    ({"startup_mode": "timestamp"}, "needs start_time"),
    ({"startup_mode": "timestamp", "start_time": "2026-11-26 12:00"}, "has no time zone"),
    ({"startup_mode": "timestamp", "start_time": "noon"}, "Malformed start time"),
])
def test_bad_params_name_the_problem(params, message):
    with pytest.raises(ConfigurationError, match=message):
        plan(**params)._settings()


def test_malformed_table_lists_are_refused():
    with pytest.raises(ConfigurationError, match="Malformed table list"):
        parse_tables("{'shop.a': 1}")
    with pytest.raises(ConfigurationError, match="No tables"):
        parse_tables([])


def test_a_table_named_twice_in_one_run_is_refused():
    from airflow_provider_mysqlcdc.operators.plan import _refuse_duplicates

    with pytest.raises(ConfigurationError, match="`shop`.`a` named more than once"):
        _refuse_duplicates(parse_tables("shop.a, shop.b, `shop`.`a`").names)


def _requests_checked(registry_tables, run_tables, resnapshot, tables=("shop.orders",)):
    from airflow_provider_mysqlcdc.planning.changes import ResnapshotRequest
    from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, Generation

    operator = MySqlCdcPlanOperator(task_id="plan", tables=list(tables), state_location="/tmp/unused", run_tables=run_tables)
    registry = Generation(1, {TableId.parse(t): CapturedTable("id", []) for t in registry_tables})
    operator._check_requests(ResnapshotRequest.parse_all(resnapshot), registry, parse_tables(list(tables)))


def test_a_resnapshot_of_a_table_a_pattern_of_the_run_matches_is_accepted():
    _requests_checked([], {"dag": ["shop.order_\\d+"], "param": None}, ["shop.order_7"], tables=("shop.order_\\d+",))
    with pytest.raises(ConfigurationError, match="neither captures"):
        _requests_checked([], {"dag": ["shop.order_\\d+"], "param": None}, ["shop.orders"], tables=("shop.order_\\d+",))


def test_a_resnapshot_of_a_table_nobody_captures_is_refused():
    with pytest.raises(ConfigurationError, match="resnapshot names `shop`.`ordres`.*neither captures"):
        _requests_checked(["shop.orders"], {"dag": ["shop.orders"], "param": None}, ["shop.ordres"])
    _requests_checked([], {"dag": ["shop.orders"], "param": "['shop.new']"}, ["shop.new"])  # given this run: fine


def test_a_resnapshot_of_a_table_this_run_stops_capturing_is_refused():
    with pytest.raises(ConfigurationError, match="`shop`.`old`, which this run's tables stop capturing"):
        _requests_checked(["shop.orders", "shop.old"], {"dag": ["shop.orders"], "param": "[]"}, ["shop.old"])
    # the trigger-time tables unset: captured tables stay, and may be re-snapshotted
    _requests_checked(["shop.orders", "shop.old"], {"dag": ["shop.orders"], "param": "None"}, ["shop.old"])


def test_a_resnapshot_range_must_fit_the_chunk_key_type():
    from airflow_provider_mysqlcdc.cdc.model.schema import Column
    from airflow_provider_mysqlcdc.planning.changes import ResnapshotRequest, check_request_bounds

    int_key = Column(name="id", data_type="int", column_type="int(11)", nullable=False)
    [request] = ResnapshotRequest.parse_all([{"table": "shop.orders", "from": "abc", "to": 2.5}])
    with pytest.raises(ConfigurationError, match="'from' 'abc' is not a value of its chunk key 'id' \\(int\\(11\\)\\)"):
        check_request_bounds(request, int_key)
    [fine] = ResnapshotRequest.parse_all([{"table": "shop.orders", "from": 5, "to": "9"}])
    check_request_bounds(fine, int_key)
    date_key = Column(name="d", data_type="date", column_type="date", nullable=False)
    with pytest.raises(ConfigurationError, match="'to' '2024-13-01'"):
        check_request_bounds(ResnapshotRequest.parse_all([{"table": "shop.t", "to": "2024-13-01"}])[0], date_key)
