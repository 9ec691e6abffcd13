"""Which DDL of tables that are not captured the binlog reader hands on (``BinlogReader(watch=...)``),
for every statement form that gives a table a name: the stream records a table that takes a name a
pattern matches (stream/schema_changes.py), the next run captures it."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.binlog.ddl import parse_ddl
from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import TableEventKind
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.selection import TableSelection

CAPTURED = TableId("shop", "orders")
PATTERNS = TableSelection.parse(["shop.order_\\d+"], exclude_tables=["shop.order_0"])


def handed_on(statement: str, watch=PATTERNS.pattern_matches) -> list[TableId]:
    """The names the changes of ``statement`` the reader keeps for ``watch`` give tables."""
    reader = BinlogReader(SourceConfig(host="127.0.0.1", port=1), start=BinlogOffset("binlog.000001", 4),
                          tables=[CAPTURED], key_columns={}, watch=watch)
    ddl = parse_ddl(statement, "shop")
    assert ddl is not None, statement
    return sorted({c.other if c.kind is TableEventKind.RENAMED else c.table
                   for c in ddl.changes if reader._watched(c)})


@pytest.mark.parametrize("statement, names", [
    ("CREATE TABLE order_1 (id INT PRIMARY KEY)", ["order_1"]),
    ("CREATE TABLE IF NOT EXISTS `order_2` (id INT PRIMARY KEY)", ["order_2"]),
    ("CREATE OR REPLACE TABLE order_3 (id INT PRIMARY KEY)", ["order_3"]),
    ("CREATE TABLE order_4 LIKE orders", ["order_4"]),
    ("CREATE TABLE order_5 AS SELECT * FROM orders", ["order_5"]),
    ("RENAME TABLE staging TO order_6", ["order_6"]),
    ("RENAME TABLE orders TO order_7", ["order_7"]),  # the captured table leaves, its new name matches
    ("ALTER TABLE staging RENAME TO order_8", ["order_8"]),
    ("CREATE TABLE order_0 (id INT PRIMARY KEY)", []),  # excluded
    ("CREATE TABLE orders_archive (id INT PRIMARY KEY)", []),  # no pattern matches
    ("DROP TABLE order_9", []),  # takes no name
    ("ALTER TABLE order_9 ADD COLUMN c INT", []),
])
def test_every_statement_that_gives_a_table_a_matching_name_is_handed_on(statement, names):
    assert [t.table for t in handed_on(statement)] == names


def test_without_patterns_only_the_captured_tables_ddl_is_handed_on():
    assert handed_on("CREATE TABLE order_1 (id INT PRIMARY KEY)", watch=None) == []
