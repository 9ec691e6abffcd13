"""The compiled row decoder and its pure-Python twin give the same values on the same bytes.

Random layouts of every kind and random row images built value by value (extremes included), then
the same images cut short: both decoders agree on every value and both refuse bytes that do not end
on a row. The decoders' agreement with python-mysql-replication on real binlog events is
tests/integration/test_row_decoders.py's.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
import struct

import pytest

from airflow_provider_mysqlcdc.cdc.binlog import row_decoder as rd
from airflow_provider_mysqlcdc.cdc.binlog.row_decoder import ColumnLayout, PythonRowDecoder, RowLayout
from airflow_provider_mysqlcdc.cdc.records.values import zero_date_text


def _compiled(layout: RowLayout):
    compiled = rd.compiled_decoder_class()
    assert compiled is not None, "mysqlcdc_rowcodec is not installed: bin/setup builds it (pip install ./native)"
    return compiled(layout.names, layout.columns)


def _random_column(rng: random.Random) -> ColumnLayout:
    kind = rng.choice([rd.SIGNED, rd.UNSIGNED, rd.FLOAT, rd.DOUBLE, rd.UTF8, rd.BYTES, rd.DATE, rd.DATETIME,
                       rd.TIMESTAMP, rd.YEAR, rd.FIXED, rd.PREFIXED, rd.DECIMAL])
    if kind == rd.DECIMAL:
        return _decimal_column(*rng.choice([(65, 30), (10, 0), (18, 4), (5, 5), (1, 0), (20, 10), (38, 9)]))
    if kind in (rd.SIGNED, rd.UNSIGNED):
        return ColumnLayout(kind, rng.choice([1, 2, 3, 4, 8]))
    if kind in (rd.UTF8, rd.BYTES):
        return ColumnLayout(kind, rng.choice([1, 2, 3, 4]))
    if kind == rd.PREFIXED:
        return ColumnLayout(kind, rng.choice([1, 2]), convert=lambda raw: raw[::-1])
    if kind == rd.FIXED:
        return ColumnLayout(kind, rng.choice([1, 3, 9, 30]), convert=lambda raw: raw.hex())
    key = rng.random() < 0.5  # a key column's layout gives a date with no calendar date as its text
    if kind in (rd.DATETIME, rd.TIMESTAMP):
        fsp = rng.randint(0, 6)
        return ColumnLayout(kind, 5 if kind == rd.DATETIME else 4, fsp=fsp,
                            convert=zero_date_text(False, fsp) if key else None)
    if kind == rd.DATE:
        return ColumnLayout(kind, 3, convert=zero_date_text(True, 0) if key else None)
    return ColumnLayout(kind, {rd.FLOAT: 4, rd.DOUBLE: 8, rd.YEAR: 1}[kind])


def _value_bytes(rng: random.Random, column: ColumnLayout) -> bytes:
    kind, width = column.kind, column.width
    if kind == rd.DECIMAL:
        value = decimal.Decimal(rng.choice([0, 1, -1, rng.randint(-10**column.precision + 1, 10**column.precision - 1)]))
        return _decimal_bytes(value.scaleb(-column.scale), column.precision, column.scale)
    if kind in (rd.UTF8, rd.BYTES, rd.PREFIXED):
        if kind == rd.UTF8:
            data = "".join(chr(rng.choice([rng.randint(32, 126), rng.randint(0x80, 0xD7FF), rng.randint(0x10000, 0x1F9FF)]))
                           for _ in range(rng.randint(0, 30))).encode()
        else:
            data = rng.randbytes(rng.randint(0, 300 if width > 1 else 255))
        return len(data).to_bytes(width, "little") + data
    if kind == rd.DATE:  # valid dates, the zero date and dates with a zero part
        year, month, day = rng.choice([(rng.randint(1, 9999), rng.randint(1, 12), rng.randint(1, 28)), (0, 0, 0),
                                       (2024, 0, 10), (2024, 5, 0), (0, 5, 6)])
        return (year << 9 | month << 5 | day).to_bytes(3, "little")
    if kind == rd.DATETIME:
        year, month = rng.choice([(rng.randint(1, 9999), rng.randint(1, 12)), (0, 0), (2024, 0)])
        packed = 1 << 39 | (year * 13 + month) << 22 | rng.randint(0, 31) << 17 | rng.randint(0, 23) << 12 \
            | rng.randint(0, 59) << 6 | rng.randint(0, 59)
        return packed.to_bytes(5, "big") + _fraction(rng, column.fsp)
    if kind == rd.TIMESTAMP:
        seconds = rng.choice([0, 1, 2**31 - 1, rng.randint(0, 2**31 - 1), 951782400])  # 2000-02-29
        return seconds.to_bytes(4, "big") + (_fraction(rng, column.fsp) if seconds else bytes((column.fsp + 1) // 2))
    if kind == rd.FLOAT:
        return struct.pack("<f", rng.choice([0.0, -1.5, 3.4028234663852886e38, rng.uniform(-1e30, 1e30)]))
    if kind == rd.DOUBLE:
        return struct.pack("<d", rng.choice([0.0, -2.2250738585072014e-308, 1.7976931348623157e308, rng.random()]))
    return rng.choice([b"\x00" * width, b"\xff" * width, bytes([0x80]).rjust(width, b"\x00"), rng.randbytes(width)])


def _fraction(rng: random.Random, fsp: int) -> bytes:
    if not fsp:
        return b""
    value = rng.randint(0, 10**fsp - 1) * (10 if fsp % 2 else 1)  # an odd fsp stores one digit more, a 0
    return value.to_bytes((fsp + 1) // 2, "big")


def _row(rng: random.Random, columns: tuple[ColumnLayout, ...]) -> bytes:
    nulls = [rng.random() < 0.2 for _ in columns]
    bitmap = sum(1 << i for i, null in enumerate(nulls) if null).to_bytes((len(columns) + 7) // 8, "little")
    return bitmap + b"".join(_value_bytes(rng, c) for c, null in zip(columns, nulls) if not null)


@pytest.mark.parametrize("seed", range(40))
def test_both_decoders_give_the_same_values_on_random_layouts_and_rows(seed):
    rng = random.Random(seed)
    columns = tuple(_random_column(rng) for _ in range(rng.randint(1, 40)))
    layout = RowLayout(tuple(f"c{i}" for i in range(len(columns))), columns)
    body = b"".join(_row(rng, columns) for _ in range(rng.randint(1, 20)))
    expected = PythonRowDecoder(layout).decode(body)
    got = _compiled(layout).decode(memoryview(body))
    assert [[repr(v) for v in row.values()] for row in got] == [[repr(v) for v in row.values()] for row in expected]
    assert [list(row) for row in got] == [list(layout.names)] * len(expected)


@pytest.mark.parametrize("seed", range(20))
def test_both_decoders_give_as_value_lists_the_values_they_give_as_dicts(seed):
    rng = random.Random(1000 + seed)
    columns = tuple(_random_column(rng) for _ in range(rng.randint(1, 40)))
    layout = RowLayout(tuple(f"c{i}" for i in range(len(columns))), columns)
    body = b"".join(_row(rng, columns) for _ in range(rng.randint(0, 20)))
    by_row = PythonRowDecoder(layout).decode(body)
    expected = [[repr(image[name]) for name in layout.names] for image in by_row]
    for decoder in (PythonRowDecoder(layout), _compiled(layout)):
        got = decoder.decode_values(memoryview(body))
        assert [[repr(v) for v in values] for values in got] == expected


@pytest.mark.parametrize("seed", range(10))
def test_both_decoders_refuse_bytes_that_do_not_end_on_a_row(seed):
    rng = random.Random(seed)
    columns = tuple(_random_column(rng) for _ in range(rng.randint(1, 10)))
    layout = RowLayout(tuple(f"c{i}" for i in range(len(columns))), columns)
    body = b"".join(_row(rng, columns) for _ in range(3))
    cut = body[:rng.randint(1, len(body) - 1)]
    for decoder in (PythonRowDecoder(layout), _compiled(layout)):
        try:
            decoded = decoder.decode(cut)
        except ValueError:
            with pytest.raises(ValueError):
                decoder.decode_values(cut)
            continue
        # a cut that happens to end on a row boundary is whole rows: the rows before it
        assert decoded == PythonRowDecoder(layout).decode(cut)
        assert len(decoded) < 3


def test_the_extremes_of_the_temporal_kinds_decode_as_the_sql_path_has_them():
    columns = (ColumnLayout(rd.TIMESTAMP, 4, fsp=6), ColumnLayout(rd.DATETIME, 5, fsp=6), ColumnLayout(rd.DATE, 3),
               ColumnLayout(rd.YEAR, 1))
    layout = RowLayout(("ts", "dt", "da", "y"), columns)
    top = b"\x00" + (2**31 - 1).to_bytes(4, "big") + (999999).to_bytes(3, "big") \
        + (1 << 39 | (9999 * 13 + 12) << 22 | 31 << 17 | 23 << 12 | 59 << 6 | 59).to_bytes(5, "big") \
        + (999999).to_bytes(3, "big") + (9999 << 9 | 12 << 5 | 31).to_bytes(3, "little") + bytes([255])
    zero = b"\x00" + bytes(4 + 3) + (1 << 39).to_bytes(5, "big") + bytes(3) + bytes(3) + bytes(1)
    for decoder in (PythonRowDecoder(layout), _compiled(layout)):
        high, low = decoder.decode(top + zero)
        assert high == {"ts": dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=dt.timezone.utc),
                        "dt": dt.datetime(9999, 12, 31, 23, 59, 59, 999999), "da": dt.date(9999, 12, 31), "y": 2155}
        assert low == {"ts": None, "dt": None, "da": None, "y": 0}


def _decimal_column(precision: int, scale: int) -> ColumnLayout:
    return ColumnLayout(rd.DECIMAL, rd.decimal_bytes(precision, scale), convert=rd._decimal_reader(precision, scale),
                        precision=precision, scale=scale)


@pytest.mark.parametrize("precision,scale,text", [
    (65, 30, "99999999999999999999999999999999999.999999999999999999999999999999"),
    (65, 30, "-99999999999999999999999999999999999.999999999999999999999999999999"),
    (10, 0, "-9999999999"), (18, 4, "1234.5000"), (5, 5, "-0.00001"), (14, 4, "0.0000"), (20, 10, "-12.3456789012"),
])
def test_binary_decimals_read_back_exactly_with_their_places(precision, scale, text):
    value = decimal.Decimal(text)
    layout = RowLayout(("d",), (_decimal_column(precision, scale),))
    for decoder in (PythonRowDecoder(layout), _compiled(layout)):
        [row] = decoder.decode(b"\x00" + _decimal_bytes(value, precision, scale))
        assert row["d"] == value and row["d"].as_tuple().exponent == -scale and str(row["d"]) == text


def test_a_decimal_group_with_more_digits_than_it_may_hold_is_refused_by_both_decoders():
    layout = RowLayout(("d",), (_decimal_column(10, 0),))  # a 1-digit group (1 byte), then nine digits (4 bytes)
    for decoder in (PythonRowDecoder(layout), _compiled(layout)):
        with pytest.raises(ValueError, match="more than 9 digits"):
            decoder.decode(b"\x00" + bytes([0x80]) + (10**9).to_bytes(4, "big"))


def _decimal_bytes(value: decimal.Decimal, precision: int, scale: int) -> bytes:
    """MySQL's binary DECIMAL, written the way the server writes it (decimal2bin)."""
    whole_digits = precision - scale
    sign, digits, exponent = value.quantize(decimal.Decimal(1).scaleb(-scale), context=decimal.Context(prec=100)).as_tuple()
    text = "".join(map(str, digits)).rjust(precision, "0")
    whole, fraction = text[:whole_digits], text[whole_digits:]
    parts = []
    if whole_digits % 9:
        parts.append((whole[:whole_digits % 9], rd._DIGITS_BYTES[whole_digits % 9]))
    parts += [(whole[i:i + 9], 4) for i in range(whole_digits % 9, whole_digits, 9)]
    parts += [(fraction[i:i + 9], 4) for i in range(0, scale - scale % 9, 9)]
    if scale % 9:
        parts.append((fraction[scale - scale % 9:], rd._DIGITS_BYTES[scale % 9]))
    data = bytearray(b"".join(int(d).to_bytes(size, "big") for d, size in parts))
    if sign:
        data = bytearray(b ^ 0xFF for b in data)
    data[0] ^= 0x80
    return bytes(data)


def test_an_impossible_date_is_none_in_both_decoders_as_the_select_path_has_it_and_text_in_a_key():
    layout = RowLayout(("da", "dt", "kda", "kdt"), (
        ColumnLayout(rd.DATE, 3), ColumnLayout(rd.DATETIME, 5),
        ColumnLayout(rd.DATE, 3, convert=zero_date_text(True, 0)),
        ColumnLayout(rd.DATETIME, 5, convert=zero_date_text(False, 0))))
    date = (2024 << 9 | 2 << 5 | 30).to_bytes(3, "little")  # ALLOW_INVALID_DATES: 2024-02-30
    datetime = (1 << 39 | (2024 * 13 + 2) << 22 | 30 << 17).to_bytes(5, "big")
    body = b"\x00" + date + datetime + date + datetime
    for decoder in (PythonRowDecoder(layout), _compiled(layout)):
        assert decoder.decode(body) == [{"da": None, "dt": None, "kda": "2024-02-30", "kdt": "2024-02-30 00:00:00"}]


def test_a_timestamp_fraction_of_a_whole_second_or_more_is_refused_by_both_decoders():
    layout = RowLayout(("ts",), (ColumnLayout(rd.TIMESTAMP, 4, fsp=6),))
    body = b"\x00" + (5).to_bytes(4, "big") + (1_000_000).to_bytes(3, "big")
    for decoder in (PythonRowDecoder(layout), _compiled(layout)):
        with pytest.raises(ValueError):
            decoder.decode(body)


def test_the_compiled_decoder_refuses_a_layout_whose_names_and_columns_differ_in_number():
    compiled = rd.compiled_decoder_class()
    with pytest.raises(ValueError, match="2 names for 1 columns"):
        compiled(("a", "b"), (ColumnLayout(rd.SIGNED, 4),))
