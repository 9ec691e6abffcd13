"""A column rule on rows (cdc/records/masking.py): what each mask gives, that both read paths get
the same result, and that a column the schema does not know yet is treated by the rule's names."""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import hmac

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.rules import TableRule
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.records.masking import ColumnMasks, hashed
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.rules import captured_schema

T = TableId("shop", "customers")
SCHEMA = TableSchema(T, (
    Column("id", "int", "int(11)", False),
    Column("email", "varchar", "varchar(100)", True),
    Column("photo", "blob", "blob", True),
    Column("address", "varchar", "varchar(200)", True),
    Column("ssn", "char", "char(11)", True),
    Column("notes", "text", "text", True),
    Column("born", "datetime", "datetime", True),
), ("id",))
RULE = TableRule(exclude=("notes", "later_secret"), hash=("email", "born", "later_hashed"),
                  truncate=(("address", 3), ("photo", 2)), null=("ssn",))


def masks(salt: str = "pepper") -> ColumnMasks:
    found = ColumnMasks.of(captured_schema(SCHEMA, RULE, chunk_key="id"), lambda: salt)
    assert found is not None
    return found


def test_hash_is_hmac_sha256_of_the_value_keyed_by_the_salt_as_hex():
    assert hashed("a@b.c", b"pepper") == hmac.new(b"pepper", b"a@b.c", hashlib.sha256).hexdigest()
    assert hashed(b"\x00\xff", b"k") == hmac.new(b"k", b"\x00\xff", hashlib.sha256).hexdigest()
    assert hashed(decimal.Decimal("12.50"), b"k") == hashed("12.50", b"k")
    assert hashed(None, b"k") is None


def test_each_mask_gives_its_value_and_the_key_and_plain_columns_stay():
    row = masks().row({"id": 7, "email": "a@b.c", "photo": b"\x01\x02\x03", "address": "Main St", "ssn": "123",
                       "notes": "secret", "born": dt.datetime(2000, 1, 2, 3, 4, 5)})
    assert row == {"id": 7, "email": hashed("a@b.c", b"pepper"), "photo": b"\x01\x02", "address": "Mai",
                   "ssn": None, "born": hashed("2000-01-02 03:04:05", b"pepper")}


def test_the_same_value_hashes_the_same_in_every_row_and_differently_under_another_salt():
    one, two = masks().row({"email": "x"}), masks().row({"email": "x"})
    assert one == two and one != masks("other").row({"email": "x"})


def test_a_column_a_ddl_added_is_left_out_or_masked_by_the_rules_names():
    row = masks().row({"id": 1, "later_secret": "s", "later_hashed": "h", "later_plain": "p"})
    assert row == {"id": 1, "later_hashed": hashed("h", b"pepper"), "later_plain": "p"}


def test_truncating_a_value_that_is_neither_text_nor_bytes_gives_null():
    assert masks().row({"address": 12345}) == {"address": None}


def test_a_rule_that_hashes_without_a_salt_is_refused_naming_the_connection_extra():
    with pytest.raises(ConfigurationError, match="extra 'mask_salt' of the source connection"):
        masks("")


def test_a_rule_without_hash_needs_no_salt_and_a_table_without_rule_no_masks():
    schema = captured_schema(SCHEMA, TableRule(exclude=("notes",)), chunk_key="id")
    assert ColumnMasks.of(schema, lambda: pytest.fail("the salt was asked for")) is not None
    assert ColumnMasks.of(SCHEMA, lambda: "x") is None


def test_the_salt_travels_like_the_password_never_in_the_settings_sent_to_spark(tmp_path):
    source = SourceConfig("db", password="pw", mask_salt="pepper")
    assert "pepper" not in repr(source)
    with pytest.raises(ValueError, match="hold the password or the masking salt"):
        SourceConfig("db", mask_salt="pepper").to_json()
    private = source.to_private_file(tmp_path / "source.json")
    shipped = source.for_executors(str(private))
    assert "pepper" not in shipped.to_json() and shipped.salt() == "pepper"
