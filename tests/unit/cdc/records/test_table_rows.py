"""A table's rule on its rows (cdc/records/table_rows.py): the filter decides on clear values, the
masks apply after, and an update keeps CDC's meaning as its row enters or leaves the filter."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.errors import SchemaChangedError
from airflow_provider_mysqlcdc.cdc.model.rules import TableRule
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.records.table_rows import RowRules, update_changes
from airflow_provider_mysqlcdc.cdc.source.rules import captured_schema

SCHEMA = TableSchema(TableId("shop", "orders"), (
    Column("id", "int", "int(11)", False), Column("status", "varchar", "varchar(10)", True),
    Column("email", "varchar", "varchar(50)", True)), ("id",))


def rules(where: str | None, **columns: tuple[str, ...]) -> RowRules:
    found = RowRules.of(captured_schema(SCHEMA, TableRule(where=where, **columns), chunk_key="id"), lambda: "salt")
    assert found is not None
    return found


def row(key: int, status: str | None, email: str = "a@b") -> dict:
    return {"id": key, "status": status, "email": email}


@pytest.mark.parametrize("before, after, key_changed, expected", [
    ("paid", "paid", False, ["update"]),
    ("paid", "open", False, ["delete"]),  # leaves the filter
    ("open", "paid", False, ["insert"]),  # enters it
    ("open", "void", False, []),  # outside before and after
    ("paid", "paid", True, ["delete", "insert"]),  # a new key: as without a filter
    ("paid", None, False, ["delete"]),  # NULL is not 'paid'
    ("open", "paid", True, ["insert"]),
])
def test_an_update_becomes_what_the_sink_needs_as_its_row_enters_or_leaves_the_filter(before, after, key_changed,
                                                                                       expected):
    pairs = list(update_changes(row(1, before), row(2 if key_changed else 1, after), key_changed,
                                rules("status = 'paid'")))
    kinds = ["update" if b is not None and a is not None else "delete" if a is None else "insert" for b, a in pairs]
    assert kinds == expected


def test_the_filter_reads_clear_values_and_what_passes_is_masked():
    masked = rules("email = 'a@b'", hash=("email",))
    kept = masked.row(row(1, "paid", "a@b"))
    assert kept is not None and kept["email"] != "a@b" and len(kept["email"]) == 64
    assert masked.row(row(2, "paid", "c@d")) is None
    [(before, after)] = list(update_changes(row(1, "x"), row(1, "y"), False, masked))
    assert before["email"] == after["email"] != "a@b"


def test_a_filter_the_schema_no_longer_fits_stops_the_table_only():
    later = TableSchema(SCHEMA.table_id, SCHEMA.columns[:2], ("id",), (), TableRule(where="email = 'x'"))
    found = RowRules.of(later, lambda: "")
    assert found is not None
    with pytest.raises(SchemaChangedError, match="names column 'email'.*schema changed under its row filter"):
        found.keeps(row(1, "paid"))


def test_a_rule_that_only_filters_needs_no_masks_and_no_salt():
    only = RowRules.of(captured_schema(SCHEMA, TableRule(where="id > 1"), chunk_key="id"),
                       lambda: pytest.fail("the salt was asked for"))
    assert only is not None and only.masks is None and only.row(row(1, "x")) is None
