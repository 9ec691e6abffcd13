"""Table names and patterns (cdc/source/selection.py): how an entry is read, what a selection
resolves to among a server's tables, and the errors for entries that cannot be right."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.selection import (
    TablePattern,
    TableSelection,
    parse_entry,
    split_entries,
)

SERVER = [TableId("shop", "orders"), TableId("shop", "order_1"), TableId("shop", "order_22"),
          TableId("shop", "order_x"), TableId("shop_1", "orders"), TableId("shop_2", "orders"),
          TableId("crm", "people"), TableId("crm", "deals"), TableId("crmx", "t"), TableId("mysql", "user"),
          TableId("odd.db", "a.b"), TableId("shop", "price$")]


@pytest.mark.parametrize("entry, table", [
    ("shop.orders", TableId("shop", "orders")),
    ("`odd.db`.`a.b`", TableId("odd.db", "a.b")),
    ("shop.price$", TableId("shop", "price$")),  # $ is a name character in MariaDB
    ("`shop`.`order_\\d+`", TableId("shop", "order_\\d+")),  # backticks: a name, whatever it holds
])
def test_an_entry_without_pattern_characters_or_in_backticks_is_a_name(entry, table):
    assert parse_entry(entry) == table


@pytest.mark.parametrize("entry", ["shop.order_\\d+", "shop_\\d+.orders", "crm.*", "*.orders", "shop.order_[0-9]{1,2}",
                                   "`odd.db`.a\\.b", "shop.(orders|order_1)"])
def test_an_entry_with_pattern_characters_in_a_part_is_a_pattern(entry):
    assert isinstance(parse_entry(entry), TablePattern)


@pytest.mark.parametrize("entry, matched", [
    ("shop.order_\\d+", ["shop.order_1", "shop.order_22"]),
    ("shop_\\d+.orders", ["shop_1.orders", "shop_2.orders"]),
    ("crm.*", ["crm.deals", "crm.people"]),  # the whole database name: not crmx
    ("*.orders", ["shop.orders", "shop_1.orders", "shop_2.orders"]),
    ("`odd.db`.a\\.b", ["odd.db.a.b"]),
    ("shop.order_[0-9]{1,1}", ["shop.order_1"]),
])
def test_a_pattern_matches_whole_database_and_table_names(entry, matched):
    assert [str(t) for t in TableSelection.parse([entry]).resolve(SERVER)] == matched


def test_a_pattern_never_matches_the_servers_own_schemas():
    assert TableId("mysql", "user") not in TableSelection.parse(["*.*"]).resolve(SERVER)


def test_names_keep_their_order_and_each_table_is_captured_once():
    selection = TableSelection.parse(["shop.orders", "shop.order_\\d+", "shop.order_1"])
    assert selection.resolve(SERVER) == [TableId("shop", "orders"), TableId("shop", "order_1"),
                                         TableId("shop", "order_22")]


def test_excluded_names_and_patterns_are_left_out():
    selection = TableSelection.parse(["shop.*"], exclude_tables=["shop.order_\\d+", "shop.price$"])
    assert [str(t) for t in selection.resolve(SERVER)] == ["shop.order_x", "shop.orders"]


def test_a_named_table_is_kept_even_when_the_server_lacks_it_preflight_says_why():
    assert TableSelection.parse(["shop.gone"]).resolve(SERVER) == [TableId("shop", "gone")]


def test_a_pattern_that_matches_nothing_is_refused_naming_it_and_the_tables_nearby():
    with pytest.raises(ConfigurationError, match=r"'shop\.ordr_\\d\+' matches no table on the source \(tables there: "
                                                 r"shop\.order_1, shop\.order_22"):
        TableSelection.parse(["shop.ordr_\\d+"]).resolve(SERVER)


@pytest.mark.parametrize("entry, message", [
    ("orders", "names no database"),
    ("shop.order_(\\d+", "is not a regular expression"),
    (".orders", "empty database or table part"),
])
def test_a_malformed_entry_is_refused_before_anything_is_read(entry, message):
    with pytest.raises(ConfigurationError, match=message):
        TableSelection.parse([entry])


def test_a_comma_separated_string_keeps_commas_inside_backticks_and_repetition_counts():
    assert split_entries("shop.orders, `a,b`.t ,shop.order_\\d{1,3}") == ["shop.orders", "`a,b`.t",
                                                                          "shop.order_\\d{1,3}"]


#: names the server accepts that hold every character the entry syntax gives a meaning to
HAZARDS = ["dot.ted", "back`tick", 'dou"ble', "{brace}", "pct%s", "sp ace", "1leading", "ünï", "select", ".", "..",
           "com,ma", "sl/ash", "back\\slash", "hash#q?", "a%2Fb", "(paren)", "[br]", "a|b", "^x", "x+y*", "price$"]


def test_every_quoted_name_reads_back_as_itself_alone_and_in_a_comma_separated_list():
    tables = [TableId("cdc hazard.db`%s", name) for name in HAZARDS]
    assert [parse_entry(t.quoted) for t in tables] == tables
    assert [parse_entry(e) for e in split_entries(", ".join(t.quoted for t in tables))] == tables
