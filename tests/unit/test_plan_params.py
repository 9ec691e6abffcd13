"""Trigger-time params of the plan task: rendered templates back to values, bad ones named clearly."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.source.schema import TableId
from airflow_provider_mysqlcdc.operators.plan import MySqlCdcPlanOperator, native, parse_tables


def plan(**params) -> MySqlCdcPlanOperator:
    return MySqlCdcPlanOperator(task_id="plan", tables=["shop.orders"], state="/tmp/unused", **params)


def test_rendered_params_become_values():
    assert native("None") is None and native("") is None and native("12") == 12
    assert native("['shop.a', 'shop.b']") == ["shop.a", "shop.b"]
    assert native("[{'table': 'shop.a', 'from': 1}]") == [{"table": "shop.a", "from": 1}]
    assert parse_tables("None") is None
    assert parse_tables("['shop.a', '`my.db`.`t`']") == [TableId("shop", "a"), TableId("my.db", "t")]
    settings = plan(split_rows="400", chunk_rows="1200", startup_mode="offset", start_offset="binlog.000003:120",
                    chunk_key_columns="{'shop.orders': 'created_id'}",
                    resnapshot="[{'table': 'shop.orders', 'from': 5, 'to': 9}]")._settings()
    assert settings["start_offset"] == BinlogOffset("binlog.000003", 120)
    assert settings["chunk_keys"] == {TableId("shop", "orders"): "created_id"}
    assert settings["resnapshot"][0].low == 5 and settings["split_rows"] == 400


@pytest.mark.parametrize("params, message", [
    ({"start_offset": "binlog.000003", "startup_mode": "offset"}, "Malformed binlog offset"),
    ({"startup_mode": "offset"}, "needs start_offset"),
    ({"split_rows": 500, "chunk_rows": 100}, "split_rows <= chunk_rows"),
    ({"chunk_key_columns": "['id']"}, "chunk_key_columns must map"),
    ({"resnapshot": "[{'table': 'shop.orders', 'below': 3}]"}, "Malformed re-snapshot request"),
    ({"resnapshot": "['orders']"}, "Malformed table name"),
    ({"startup_mode": "earliest"}, "Unknown startup mode 'earliest'"),
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
        _refuse_duplicates(parse_tables("shop.a, shop.b, `shop`.`a`"))
