"""The ``columns`` setting (cdc/source/rules.py): how a rule is read, which table takes which
rule, the schema a rule captures, and the errors for rules that cannot be right."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.rules import Route, TableRule
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.source.rules import TableRules, captured_schema
from airflow_provider_mysqlcdc.cdc.source.selection import parse_entry
from airflow_provider_mysqlcdc.sinks.arrow_rows import arrow_schema

CUSTOMERS = TableId("shop", "customers")
SCHEMA = TableSchema(CUSTOMERS, (
    Column("id", "int", "int(11)", False),
    Column("Email", "varchar", "varchar(100)", True),
    Column("notes", "text", "text", True),
    Column("address", "varchar", "varchar(200)", True),
    Column("ssn", "char", "char(11)", False),
    Column("score", "int", "int(11)", True),
    Column("code", "varchar", "varchar(10)", False),
), ("id",), (("code",), ("code", "notes")))


def rules(value: object) -> TableRules:
    return TableRules.parse(value)


def test_a_rule_leaves_out_the_excluded_columns_and_marks_each_masked_one():
    schema = rules({"shop.customers": {"exclude": ["notes"], "hash": ["email"], "truncate": {"address": 3},
                                       "null": ["ssn"]}}).captured(SCHEMA, "id")
    assert schema.column_names == ("id", "Email", "address", "ssn", "score", "code")
    assert {c.name: c.mask for c in schema.columns} == {"id": None, "Email": "hash", "address": "truncate:3",
                                                        "ssn": "null", "score": None, "code": None}
    assert schema.table_rule is not None and schema.key_columns == ("id",)


def test_include_keeps_only_the_named_columns_and_the_key():
    schema = rules({"shop.customers": {"include": ["score"]}}).captured(SCHEMA, "id")
    assert schema.column_names == ("id", "score")


def test_a_unique_key_over_a_column_left_out_is_forgotten():
    schema = rules({"shop.customers": {"exclude": ["notes"]}}).captured(SCHEMA, "id")
    assert schema.unique_not_null_keys == (("code",),)


def test_a_hashed_column_is_text_in_the_sink_and_the_others_keep_their_types():
    schema = rules({"shop.customers": {"hash": ["score"], "null": ["email"]}}).captured(SCHEMA, "id")
    fields = arrow_schema(schema)
    assert str(fields.field("score").type) == "string"
    assert str(fields.field("Email").type) == "string" and fields.field("Email").nullable
    assert str(fields.field("id").type) == "int32"


def test_column_names_are_compared_without_case():
    schema = rules({"shop.customers": {"exclude": ["NOTES"], "hash": ["EMAIL"]}}).captured(SCHEMA, "id")
    assert "notes" not in schema.column_names and schema.column("Email").mask == "hash"


def test_a_named_table_takes_its_rule_before_any_pattern():
    setting = rules({"shop.*": {"exclude": ["notes"]}, "shop.customers": {"hash": ["email"]}})
    assert setting.for_table(CUSTOMERS)[0] == TableRule(hash=("email",))
    assert setting.for_table(TableId("shop", "orders"))[0] == TableRule(exclude=("notes",))
    assert setting.for_table(TableId("crm", "people")) == (None, None)


def test_a_table_no_rule_names_is_captured_as_it_is():
    assert rules({"crm.*": {"exclude": ["notes"]}}).captured(SCHEMA, "id") is SCHEMA
    assert captured_schema(SCHEMA, None) is SCHEMA


def test_a_pattern_rule_may_name_columns_a_matched_table_lacks():
    schema = rules({"shop.*": {"exclude": ["notes", "not_here"]}}).captured(SCHEMA, "id")
    assert "notes" not in schema.column_names


def test_the_setting_is_read_from_json_text_as_a_dag_param_gives_it():
    assert rules('{"shop.customers": {"hash": ["email"]}}').for_table(CUSTOMERS)[0] == TableRule(hash=("email",))
    assert rules(None).entries == () and rules("").entries == ()


@pytest.mark.parametrize("value, message", [
    ({"shop.customers": {"mask": ["email"]}}, r"unknown option\(s\) mask: the options are include, exclude"),
    ({"shop.customers": {"include": ["id"], "exclude": ["notes"]}}, "both include and exclude"),
    ({"shop.customers": {"hash": ["email"], "null": ["EMAIL"]}}, r"masks column\(s\) email twice"),
    ({"shop.customers": {"exclude": ["email"], "hash": ["email"]}}, "that it leaves out"),
    ({"shop.customers": {"truncate": {"address": 0}}}, "a length of at least 1"),
    ({"shop.customers": {"truncate": ["address"]}}, "must map column names to a length"),
    ({"shop.customers": {"hash": "email, "}}, "must be a list of column names"),
    ({"shop.customers": ["email"]}, "must be a dict of include, exclude"),
    (["shop.customers"], "must map a table"),
    ("{not json", "not valid JSON"),
    ({"shop.": {"hash": ["email"]}}, "empty database or table part"),
])
def test_a_malformed_setting_is_refused_naming_the_problem(value, message):
    with pytest.raises(ConfigurationError, match=message):
        TableRules.parse(value)


@pytest.mark.parametrize("rule", [{"exclude": ["id"]}, {"hash": ["id"]}, {"null": ["ID"]}, {"truncate": {"code": 2}}])
def test_a_rule_that_leaves_out_or_masks_the_key_or_the_chunk_key_is_refused(rule):
    with pytest.raises(ConfigurationError, match="leaves out or masks key column.*captured as it is"):
        rules({"shop.customers": rule}).captured(SCHEMA, "code" if "truncate" in rule else "id")


def test_include_keeps_the_chunk_key_without_naming_it():
    assert rules({"shop.customers": {"include": ["email"]}}).captured(SCHEMA, "code").column_names == \
        ("id", "Email", "code")


def test_a_rule_of_a_named_table_naming_a_column_it_lacks_is_refused_listing_its_columns():
    with pytest.raises(ConfigurationError, match=r"names column\(s\) emial that shop.customers does not have; "
                                                 "its columns are: id, Email"):
        rules({"shop.customers": {"hash": ["emial"]}}).captured(SCHEMA, "id")


def test_truncating_a_column_that_is_neither_text_nor_bytes_is_refused_when_planned():
    with pytest.raises(ConfigurationError, match="truncates score, a int\\(11\\) column: truncate cuts text and bytes"):
        rules({"shop.customers": {"truncate": {"score": 2}}}).captured(SCHEMA, "id")


def test_after_a_ddl_a_truncated_column_of_another_type_is_null_and_a_key_column_stays_as_it_is():
    rule = TableRule(include=("email",), truncate=(("score", 2),))
    schema = captured_schema(SCHEMA, TableRule(truncate=(("score", 2),)), chunk_key="id")
    assert schema.column("score").mask == "null"
    assert captured_schema(SCHEMA, rule, chunk_key="code").column_names == ("id", "Email", "code")


def test_a_row_filter_joins_the_tables_rule_by_name_or_pattern():
    setting = TableRules.parse({"shop.customers": {"hash": ["email"]}}, {"shop.*": "score > 3"})
    assert setting.for_table(CUSTOMERS)[0] == TableRule(hash=("email",), where="score > 3")
    assert setting.for_table(TableId("shop", "orders"))[0] == TableRule(where="score > 3")
    assert setting.captured(SCHEMA, "id").table_rule == TableRule(hash=("email",), where="score > 3")


def test_a_row_filter_may_read_a_masked_column_but_not_one_left_out():
    assert TableRules.parse({"shop.customers": {"hash": ["email"]}}, {"shop.customers": "email = 'a'"}).captured(
        SCHEMA, "id").table_rule.where == "email = 'a'"
    with pytest.raises(ConfigurationError, match="names column 'notes', which shop.customers does not capture"):
        TableRules.parse({"shop.customers": {"exclude": ["notes"]}}, {"shop.customers": "notes = 'x'"}).captured(
            SCHEMA, "id")


@pytest.mark.parametrize("filters, message", [
    ({"shop.customers": "score >"}, "expected a column name or a value"),
    ({"shop.customers": ""}, "must be a predicate"),
    ({"shop.customers": 3}, "must be a predicate"),
    ("[1]", "row_filters must map a table"),
])
def test_a_row_filter_that_cannot_be_read_is_refused_before_any_table_is_known(filters, message):
    with pytest.raises(ConfigurationError, match=message):
        TableRules.parse(None, filters)


def test_a_row_filter_comparing_a_column_with_a_value_not_of_its_type_is_refused_when_planned():
    setting = TableRules.parse(None, {"shop.customers": "score = 'high'"})
    with pytest.raises(ConfigurationError, match=r"'high' is not a value of score \(int\(11\)\)"):
        setting.captured(SCHEMA, "id")


def test_a_route_sends_every_table_its_pattern_matches_into_one_sink_table():
    rules = TableRules.parse(route={r"shop_\d+.orders": "shop.orders", "crm.people": {"sink": "crm.all", "key": "global"}})
    assert rules.for_table(TableId("shop_7", "orders"))[0] == TableRule(route=Route("shop", "orders"))
    assert rules.for_table(TableId("crm", "people"))[0] == TableRule(route=Route("crm", "all", global_key=True))
    assert rules.for_table(TableId("shop_7", "items"))[0] is None


def test_a_route_joins_the_tables_column_rule_and_row_filter():
    rules = TableRules.parse({"shop_1.orders": {"exclude": ["note"]}}, {r"shop_\d+.orders": "id > 1"},
                             {r"shop_\d+.orders": "shop.orders"})
    rule, _ = rules.for_table(TableId("shop_1", "orders"))
    assert rule == TableRule(exclude=("note",), where="id > 1", route=Route("shop", "orders"))


def test_a_bare_route_target_lies_in_the_entrys_database():
    assert TableRules.parse(route={r"shop.order_\d+": "orders"}).routes[0][1] == Route("shop", "orders")


@pytest.mark.parametrize(("route", "message"), [
    ({r"shop_\d+.orders": "orders"}, r"names no database and the entry's database is a pattern: write 'database.orders'"),
    ({r"shop_\d+.orders": r"shop.orders_\d+"}, "is a pattern; name one table"),
    ({r"shop_\d+.orders": {"sink": "shop.orders", "key": "unique"}}, r"\['key'\] must be 'shard'"),
    ({r"shop_\d+.orders": {"sink": "shop.orders", "keys": "global"}}, "unknown option"),
    ({r"shop_\d+.orders": {"key": "global"}}, "needs the sink table's name"),
    ({r"shop_\d+.orders": 3}, "must be the sink table's name or a dict"),
    ("[1]", "route must map a table"),
])
def test_a_malformed_route_is_refused_naming_the_problem(route, message):
    with pytest.raises(ConfigurationError, match=message):
        TableRules.parse(route=route)


@pytest.mark.parametrize("tables", [
    ["shop_1.orders", "shop_2.orders"],
    [r"shop_\d+.orders", "shop_2.orders"],
])
def test_a_route_whose_shards_span_two_entries_of_tables_is_refused(tables):
    rules = TableRules.parse(route={r"shop_\d+.orders": "shop.orders"})
    with pytest.raises(ConfigurationError, match=r"sends tables of 2 entries of tables .* Name the shards with one entry"):
        rules.check_route_groups([parse_entry(t) for t in tables])


def test_a_route_within_one_entry_of_tables_is_accepted():
    rules = TableRules.parse(route={r"shop_\d+.orders": "shop.orders"})
    rules.check_route_groups([parse_entry(t) for t in (r"shop_\d+.orders", "crm.people", r"crm.x_\d+")])
