"""The schema as of a change (cdc/binlog/table_map.py ``schema_as_of``): each column of its table map
described by the captured schema where that has the same column, else by the table map alone, masked
by the table's rule. The integration tests hold every type, collation and charset of the servers'
matrices to "the captured schema itself" (test_value_fidelity.py, test_charsets.py)."""

from __future__ import annotations

from dataclasses import replace

from airflow_provider_mysqlcdc.cdc.binlog.table_map import same_column_type, schema_as_of
from airflow_provider_mysqlcdc.cdc.model.rules import TableRule
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.source.rules import captured_schema

T = TableId("shop", "orders")
# as information_schema describes the columns
KNOWN = TableSchema(T, (
    Column("id", "int", "int(11)", False, default_constant=False),
    Column("note", "text", "text", True, charset="utf8mb4", collation="utf8mb4_general_ci"),
    Column("amount", "decimal", "decimal(10,2)", True, numeric_precision=10, numeric_scale=2, default_constant=True,
           fills_existing_rows=True),
), ("id",))


def mapped(*columns: Column) -> TableSchema:
    """A table map's columns, as ``column_from_table_map`` gives them (codec names as charsets)."""
    return TableSchema(T, columns, ("id",))


ID = Column("id", "int", "int", True)
NOTE = Column("note", "longtext", "longtext", True, charset="utf8", collation="utf8mb4_general_ci")
AMOUNT = Column("amount", "decimal", "decimal", True, numeric_precision=10, numeric_scale=2)


def test_a_table_map_of_the_captured_columns_is_the_captured_schema_itself():
    assert schema_as_of(mapped(ID, NOTE, AMOUNT), KNOWN) is KNOWN


def test_a_column_the_captured_schema_no_longer_has_or_has_with_another_type_is_described_by_its_table_map():
    old_scale = replace(AMOUNT, numeric_scale=4)  # written before MODIFY amount DECIMAL(10,2)
    gone = Column("gone", "varchar", "varchar", True, charset="utf8", collation="utf8mb4_bin")  # dropped since
    as_of = schema_as_of(mapped(ID, NOTE, old_scale, gone), KNOWN)
    assert as_of.column_names == ("id", "note", "amount", "gone") and as_of.key_columns == ("id",)
    assert as_of.column("id") is KNOWN.column("id") and as_of.column("note") is KNOWN.column("note")
    assert as_of.column("amount").numeric_scale == 4 and not as_of.column("amount").default_constant
    assert as_of.column("gone").charset == "utf8mb4"  # SQL's name, from its collation (the codec's is utf8)


def test_a_column_only_the_table_map_names_is_masked_and_left_out_by_the_tables_rule():
    rule = TableRule(exclude=("secret",), hash=("gone",))
    known = captured_schema(KNOWN, rule)
    gone, secret = Column("gone", "int", "int", True), Column("secret", "int", "int", True)
    as_of = schema_as_of(mapped(ID, NOTE, AMOUNT, gone, secret), known)
    assert as_of.column_names == ("id", "note", "amount", "gone") and as_of.column("gone").mask == "hash"
    assert schema_as_of(mapped(ID, NOTE, AMOUNT, secret), known) is known  # left out: the captured schema


def test_a_table_map_names_types_as_it_stores_them():
    assert same_column_type(NOTE, KNOWN.column("note"))  # TEXT is a BLOB with a charset there
    assert same_column_type(Column("y", "year", "year", True, unsigned=True), Column("y", "year", "year(4)", True))
    assert same_column_type(Column("e", "enum", "enum", True, labels=("", "a", "b")),  # '' first: an invalid value
                            Column("e", "enum", "enum('a','b')", True, labels=("a", "b")))
    assert not same_column_type(Column("b", "bit", "bit(8)", True), Column("b", "bit", "bit(9)", True))
    assert not same_column_type(replace(NOTE, collation="utf8mb4_bin"), KNOWN.column("note"))
