"""The row filter language (cdc/records/row_filter.py): what each form keeps, SQL's NULL logic, a
literal taking its column's type, and the errors for filters that cannot be right."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError, SchemaChangedError, is_table_fault
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.records.row_filter import check_row_filter

SCHEMA = TableSchema(TableId("shop", "orders"), (
    Column("id", "int", "int(11)", False),
    Column("status", "varchar", "varchar(10)", True),
    Column("amount", "decimal", "decimal(10,2)", True),
    Column("ratio", "double", "double", True),
    Column("day", "date", "date", True),
    Column("at", "datetime", "datetime(6)", True),
    Column("ts", "timestamp", "timestamp", True),
    Column("dur", "time", "time", True),
    Column("raw", "varbinary", "varbinary(10)", True),
    Column("odd name", "int", "int(11)", True),
    Column("spot", "point", "point", True),
), ("id",))

ROW = {"id": 7, "status": "paid", "amount": decimal.Decimal("10.50"), "ratio": 0.25, "day": dt.date(2024, 5, 1),
       "at": dt.datetime(2024, 5, 1, 10, 0, 0, 5), "ts": dt.datetime(2024, 5, 1, 10, tzinfo=dt.timezone.utc),
       "dur": dt.timedelta(hours=-1, minutes=-30), "raw": b"\x00ab", "odd name": None, "spot": b"..."}


def keeps(text: str, row: dict | None = None) -> bool:
    return check_row_filter(text, SCHEMA).keeps(ROW if row is None else row)


@pytest.mark.parametrize("text, kept", [
    ("status = 'paid'", True), ("status = 'PAID'", False), ("status <> 'paid'", False), ("status != 'x'", True),
    ("amount >= 10.5", True), ("amount > 10.5", False), ("amount = 10.50", True), ("amount < -1", False),
    ("ratio < 0.3", True), ("id = 7 AND status = 'paid'", True), ("id = 8 OR status = 'paid'", True),
    ("NOT id = 7", False), ("NOT (id = 8 OR amount > 100)", True),
    ("day = '2024-05-01'", True), ("day BETWEEN '2024-01-01' AND '2024-12-31'", True),
    ("day NOT BETWEEN '2024-01-01' AND '2024-12-31'", False),
    ("at > '2024-05-01 10:00:00'", True), ("at = '2024-05-01 10:00:00.000005'", True),
    ("ts = '2024-05-01 10:00:00'", True), ("ts = '2024-05-01 12:00:00+02:00'", True),
    ("dur = '-01:30:00'", True), ("dur < '00:00:00'", True),
    ("raw = '\\0ab'", True), ("raw LIKE '%b'", True),
    ("status IN ('paid', 'shipped')", True), ("status NOT IN ('paid')", False), ("id IN (1, 2)", False),
    ("status LIKE 'p_i%'", True), ("status LIKE 'P%'", False), ("status NOT LIKE '%x%'", True),
    ("status LIKE 'pai\\_'", False), ("`odd name` IS NULL", True), ("`ODD NAME` IS NOT NULL", False),
    ("STATUS = \"paid\"", True), ("status = 'it''s'", False), ("TRUE = 1", True), ("id = TRUE", False),
    ("id > amount", False), ("amount > id", True),
])
def test_each_form_keeps_what_sql_would_keep(text, kept):
    assert keeps(text) is kept


@pytest.mark.parametrize("text", [
    "`odd name` = 1", "`odd name` <> 1", "NOT `odd name` = 1", "`odd name` IN (1, 2)", "id IN (1, NULL)",
    "`odd name` BETWEEN 1 AND 2", "status = NULL", "id = 7 AND `odd name` = 1",
])
def test_unknown_is_not_kept_as_sql_three_valued_logic_says(text):
    assert keeps(text) is False


@pytest.mark.parametrize("text", ["id = 7 OR `odd name` = 1", "NOT (id = 8 AND `odd name` = 1)", "id IN (7, NULL)"])
def test_true_or_unknown_is_true_and_false_and_unknown_is_false(text):
    assert keeps(text) is True


def test_a_zero_date_key_compares_as_unknown():
    from airflow_provider_mysqlcdc.cdc.records.values import ZeroDate

    assert keeps("day > '2024-01-01'", {**ROW, "day": ZeroDate("0000-00-00")}) is False
    assert keeps("NOT day > '2024-01-01'", {**ROW, "day": ZeroDate("0000-00-00")}) is False


def test_the_filter_names_the_columns_it_reads():
    assert check_row_filter("status = 'paid' OR `ODD NAME` > 3", SCHEMA).columns == {"status", "odd name"}


@pytest.mark.parametrize("text, message", [
    ("status = ", r"expected a column name or a value, found 'the end'"),
    ("status = 'paid' amount > 1", "expected AND, OR or the end, found 'amount'"),
    ("upper(status) = 'PAID'", r"functions such as upper\(\) are not part of the language, found 'upper'"),
    ("status = 'paid'; DROP TABLE orders", "cannot be read at '; DROP TABLE"),
    ("(id = 1", "expected \\), found 'the end'"),
    ("id NOT = 1", "expected IN, BETWEEN or LIKE after NOT"),
    ("missing = 1", "names column 'missing', which shop.orders does not capture; its columns are: id, status"),
    ("amount = 'lots'", r"'lots' is not a value of amount \(decimal\(10,2\)\)"),
    ("day = '2024-13-01'", "is not a value of day"),
    ("status = 3", "3 is not a value of status"),
    ("spot = 'POINT(1 1)'", "is not a value of spot"),
    ("amount LIKE '1%'", "LIKE needs a text or binary column"),
    ("status LIKE amount", "LIKE compares a column with a quoted pattern"),
    ("id IN (amount)", "IN takes values, not columns"),
    ("", "must be a predicate"),
])
def test_a_filter_that_cannot_be_right_is_refused_naming_the_problem(text, message):
    with pytest.raises(ConfigurationError, match=message):
        check_row_filter(text, SCHEMA)


def test_a_row_without_a_filtered_column_is_a_fault_of_that_table_alone():
    with pytest.raises(SchemaChangedError, match="uses column 'status', which its rows no longer have") as caught:
        keeps("status = 'paid'", {"id": 1})
    assert is_table_fault(caught.value)


@pytest.mark.parametrize("text", ["status = 'paid' ; DROP", "status =", "nope = 1", "amount LIKE 'x%'",
                                  "created < 'yesterday'", "   "])
def test_every_row_filter_error_names_its_table(text):
    with pytest.raises(ConfigurationError, match=r"shop\.orders"):
        check_row_filter(text, SCHEMA)


@pytest.mark.parametrize("text", ["status = 'paid' ; DROP", "status =", "(amount > 1"])
def test_a_filter_that_cannot_be_read_is_refused_when_the_dag_is_parsed_naming_its_entry(text):
    from airflow_provider_mysqlcdc.cdc.source.rules import TableRules

    with pytest.raises(ConfigurationError, match=r"of shop\.order_\\d\+"):
        TableRules.parse(row_filters={r"shop.order_\d+": text})
