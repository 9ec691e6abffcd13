"""Normalisation rules: both library shapes of a value map to one Python value."""

import datetime as dt
import decimal
import struct

from airflow_provider_mysqlcdc.cdc.model.schema import Column
from airflow_provider_mysqlcdc.cdc.records.values import converter_for, read_expression, select_list


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


# --- MySQL's binary JSON, built byte by byte as the server writes it (json_binary.cc) ----------------
SMALL_OBJECT, INT16, DOUBLE, STRING, OPAQUE = 0x0, 0x5, 0xB, 0xC, 0xF


def _varlen(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _opaque(field_type: int, payload: bytes) -> tuple[int, bytes]:
    return OPAQUE, bytes([field_type]) + _varlen(len(payload)) + payload


def _packed(year=0, month=0, day=0, hour=0, minute=0, second=0, micros=0) -> bytes:
    """MySQL's TIME_to_longlong_datetime_packed."""
    ymd = ((year * 13 + month) << 5) | day
    hms = (hour << 12) | (minute << 6) | second
    return ((((ymd << 17) | hms) << 24) + micros).to_bytes(8, "little", signed=True)


def _packed_time(hour=0, minute=0, second=0, micros=0, negative=False) -> bytes:
    """MySQL's TIME_to_longlong_time_packed: hours take 10 bits, no date."""
    value = ((((hour << 12) | (minute << 6) | second) << 24) + micros) * (-1 if negative else 1)
    return value.to_bytes(8, "little", signed=True)


def _small_object(members: dict[str, tuple[int, bytes]]) -> bytes:
    """A small JSON object: count, size, key entries, value entries, keys, then values (offsets from its start)."""
    keys = [k.encode() for k in members]
    header = 4 + 4 * len(keys) + 3 * len(keys)
    key_area = b"".join(keys)
    value_area, entries, offset = b"", [], header + len(key_area)
    for json_type, data in members.values():
        if json_type == INT16:
            entries.append(bytes([json_type]) + data)
        else:
            entries.append(bytes([json_type]) + (offset + len(value_area)).to_bytes(2, "little"))
            value_area += data
    key_entries, at = b"", header
    for key in keys:
        key_entries += at.to_bytes(2, "little") + len(key).to_bytes(2, "little")
        at += len(key)
    size = header + len(key_area) + len(value_area)
    return (len(keys).to_bytes(2, "little") + size.to_bytes(2, "little") + key_entries + b"".join(entries)
            + key_area + value_area)


def test_json_opaque_scalars_from_the_binlog_equal_mysqls_json_text():
    """A JSON document holding a DECIMAL, dates and times (a negative TIME past 24 hours, a partial
    date), a DOUBLE, an integer, a string and another type's bytes: the binlog's binary form and the
    text the SELECT gets (as MySQL prints each of them) give one canonical document."""
    from pymysqlreplication import json_binary
    from pymysqlreplication.constants import FIELD_TYPE

    import airflow_provider_mysqlcdc.cdc.binlog.library_fixes  # noqa: F401 (applies the fixes)

    document = _small_object({
        "dec": _opaque(FIELD_TYPE.NEWDECIMAL, bytes([4, 2, 0x8C, 0x22])),  # DECIMAL(4,2) 12.34
        "dec0": _opaque(FIELD_TYPE.NEWDECIMAL, bytes([2, 0, 0x80 ^ 0x07])),  # DECIMAL(2,0) 7
        "da": _opaque(FIELD_TYPE.DATE, _packed(2024, 1, 2)),
        "partial": _opaque(FIELD_TYPE.DATE, _packed(2024, 0, 10)),
        "dt": _opaque(FIELD_TYPE.DATETIME, _packed(2024, 1, 2, 3, 4, 5, 6)),
        "ts": _opaque(FIELD_TYPE.TIMESTAMP, _packed(2038, 1, 19, 3, 14, 7)),
        "tm": _opaque(FIELD_TYPE.TIME, _packed_time(838, 59, 58, 999999, negative=True)),
        "bits": _opaque(FIELD_TYPE.BIT, b"\x01\xff"),
        "dbl": (DOUBLE, struct.pack("<d", 1e300)),
        "int": (INT16, (5).to_bytes(2, "little")),
        "str": (STRING, _varlen(4) + "😀".encode()),
    })
    from_binlog = json_binary.parse_json(SMALL_OBJECT, document)
    mysql_text = ('{"dec": 12.34, "dec0": 7, "da": "2024-01-02", "partial": "2024-00-10", '
                  '"dt": "2024-01-02 03:04:05.000006", "ts": "2038-01-19 03:14:07.000000", '
                  '"tm": "-838:59:58.999999", "bits": "base64:type16:Af8=", "dbl": 1e300, "int": 5, "str": "😀"}')
    convert = converter_for(col("json"))
    assert convert(from_binlog) == convert(mysql_text)
    assert convert(mysql_text) == ('{"bits":"base64:type16:Af8=","da":"2024-01-02","dbl":1e+300,"dec":12.34,"dec0":7,'
                                   '"dt":"2024-01-02 03:04:05.000006","int":5,"partial":"2024-00-10","str":"😀",'
                                   '"tm":"-838:59:58.999999","ts":"2038-01-19 03:14:07.000000"}')


def test_json_numbers_are_canonical_by_value_and_kind():
    convert = converter_for(col("json"))
    # a DECIMAL's scale and a DOUBLE's spelling do not matter, its value does, exactly
    assert convert("[1.50, 5.00, 1e300, 1E-7, 0.1, -0.0]") == convert(
        [decimal.Decimal("1.50"), decimal.Decimal("5.00"), 1e300, 1e-7, 0.1, -0.0]) == "[1.5,5.0,1e+300,1e-07,0.1,-0.0]"
    assert convert("[12345678901234567890.123456789]") == "[1.2345678901234567890123456789e+19]"  # no float rounding
    # an integer stays one; a DECIMAL without scale is an integer, as MySQL prints it
    assert convert("[5, 18446744073709551615]") == convert([decimal.Decimal("5"), 2**64 - 1]) == "[5,18446744073709551615]"


def test_zero_and_partial_dates_become_none():
    assert converter_for(col("date"))("0000-00-00") is None
    assert converter_for(col("date"))("2024-00-10") is None
    assert converter_for(col("datetime"))("0000-00-00 00:00:00") is None
    assert converter_for(col("timestamp"))(dt.datetime(1970, 1, 1)) is None  # the binlog's zero TIMESTAMP


def test_text_bytes_are_decoded():
    assert converter_for(col("longtext", charset="utf8mb4"))("héllo😀".encode()) == "héllo😀"


def test_float_columns_are_read_as_double_under_their_own_name():
    assert read_expression(col("float", name="we`ird")) == "CAST(`we``ird` AS DOUBLE)"
    assert select_list((col("int", name="id"), col("float", name="f"))) == "`id`, CAST(`f` AS DOUBLE) AS `f`"
