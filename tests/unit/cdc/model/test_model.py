import datetime as dt
import decimal
import json

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, quote_identifier
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit


@pytest.mark.parametrize("start, end", [
    (None, 2**64 - 1), (decimal.Decimal("-1.500"), decimal.Decimal("99999999999999999999.1234")),
    ("näme 😀 ", "Z"), (b"\x00\xff", b"\x01"), (dt.datetime(2024, 1, 1, 0, 0, 0, 5), None),
    (dt.date(2020, 2, 29), dt.date(2021, 1, 1)), (dt.timedelta(hours=-838), dt.timedelta(0)), (1.5, 2.25),
])
def test_finished_splits_round_trip_through_json_exactly(start, end):
    split = SnapshotSplit(TableId("db", "t-1"), 3, "k", start, end)
    finished = FinishedSplit(split, BinlogOffset("binlog.000002", 777, "0-1-9"), BinlogOffset("binlog.000002", 500),
                             rows=10, binlog_events_merged=2)
    back = FinishedSplit.from_dict(json.loads(json.dumps(finished.to_dict())))
    assert back == finished
    assert type(back.split.start) is type(start) and type(back.split.end) is type(end)


def test_table_id_parsing_and_quoting():
    assert TableId.parse("shop.orders") == TableId("shop", "orders")
    assert TableId.parse("`my.db`.`line items`") == TableId("my.db", "line items")
    assert TableId.parse("orders", default_database="shop") == TableId("shop", "orders")
    assert quote_identifier("we`ird") == "`we``ird`"
    assert TableId("select", "a-b").quoted == "`select`.`a-b`"
    with pytest.raises(ConfigurationError, match="database.table"):
        TableId.parse("orders")


def test_table_names_round_trip_through_their_quoted_text_whatever_they_hold():
    from airflow_provider_mysqlcdc.cdc.model.schema import TableId

    for database, table in [("db", "t"), ("cdc hazard.db`%s", "dot.ted"), ("d", "back`tick"), ("d", "com,ma"),
                            ("d", ".."), ("ünï", "{brace}")]:
        table_id = TableId(database, table)
        assert TableId.parse(table_id.quoted) == table_id


def test_a_table_list_splits_on_commas_outside_backticks():
    from airflow_provider_mysqlcdc.cdc.model.schema import TableId

    assert TableId.parse_list("shop.orders, `odd,db`.`a,b`,shop.`x.y`") == [
        TableId("shop", "orders"), TableId("odd,db", "a,b"), TableId("shop", "x.y")]


def test_tables_whose_names_differ_only_in_odd_characters_get_different_task_groups():
    from airflow_provider_mysqlcdc.pipeline import group_id_for

    assert group_id_for("shop.orders") == "shop__orders"  # plain names keep their plain group
    odd = ["`a.b`.c", "a.`b.c`", "a_b.c", "`a b`.c", "`a`.`b_c`"]
    groups = [group_id_for(t) for t in odd]
    assert len(set(groups)) == len(odd), groups
    assert all(len(g) <= 120 and g.replace("_", "").isalnum() for g in groups)
    assert len(group_id_for(f"db.`{'x y' * 100}`")) <= 120
