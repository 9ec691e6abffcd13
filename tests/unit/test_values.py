"""Normalisation rules: both library shapes of a value map to one Python value."""

import datetime as dt
import decimal

from airflow_provider_mysqlcdc.cdc.records.values import converter_for, read_expression, select_list
from airflow_provider_mysqlcdc.cdc.source.schema import Column


def col(data_type: str, **kw) -> Column:
    return Column(name=kw.pop("name", "c"), data_type=data_type, column_type=data_type, nullable=True, **kw)


def test_float_is_float32_exact_from_both_paths():
    convert = converter_for(col("float"))
    assert convert(1.2345677614212036) == convert(1.2345677614212036) == 1.2345677614212036
    assert convert(1.1) == 1.100000023841858


def test_bit_from_bytes_and_bit_string():
    convert = converter_for(col("bit"))
    assert convert(b"\x80\x00\x00\x00\x00\x00\x00\x01") == convert("1" + "0" * 62 + "1") == 2**63 + 1
    assert convert(b"\x01") == convert("1") == 1


def test_binary_is_padded_and_empty_varbinary_is_bytes():
    assert converter_for(col("binary", char_max_length=4))(b"\x01\x02") == b"\x01\x02\x00\x00"
    assert converter_for(col("varbinary"))("") == b""


def test_set_in_definition_order_and_empty_set():
    convert = converter_for(col("set", labels=("p", "q", "r")))
    assert convert({"r", "p"}) == convert("p,r") == "p,r"
    assert convert("") == ""


def test_timestamp_is_utc_aware():
    value = converter_for(col("timestamp"))(dt.datetime(2024, 1, 2, 3, 4, 5, 123000))
    assert value == dt.datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=dt.timezone.utc)


def test_decimal_has_exactly_the_column_scale():
    convert = converter_for(col("decimal", numeric_scale=30))
    value = convert(decimal.Decimal("-12345678901234567890123456789012345.12345"))
    assert value.as_tuple().exponent == -30
    assert converter_for(col("decimal", numeric_scale=2))(decimal.Decimal("1.5")) == decimal.Decimal("1.50")


def test_json_is_canonical_text_from_text_and_from_parsed_object():
    convert = converter_for(col("json"))
    assert convert('{"b": 1, "a": [1, 2.5]}') == convert({b"b": 1, "a": [1, 2.5]}) == '{"a":[1,2.5],"b":1}'


def test_zero_dates_become_none():
    assert converter_for(col("date"))("0000-00-00") is None
    assert converter_for(col("datetime"))("0000-00-00 00:00:00") is None


def test_text_bytes_are_decoded():
    assert converter_for(col("longtext", charset="utf8mb4"))("héllo😀".encode()) == "héllo😀"


def test_float_columns_are_read_as_double_under_their_own_name():
    assert read_expression(col("float", name="we`ird")) == "CAST(`we``ird` AS DOUBLE)"
    assert select_list((col("int", name="id"), col("float", name="f"))) == "`id`, CAST(`f` AS DOUBLE) AS `f`"
