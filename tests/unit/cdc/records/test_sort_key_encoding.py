"""encode_sort_key: string order of the encoding equals the order of the keys, for every key kind."""

import datetime as dt
import decimal
import math
import random

import pytest

from airflow_provider_mysqlcdc.cdc.records.ordering import encode_sort_key

rng = random.Random(42)
D = decimal.Decimal


def _ints():
    values = [0, 1, -1, 255, 256, -255, -256, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, 10**65, -(10**65)]
    return values + [rng.randint(-(2**70), 2**70) for _ in range(300)] + [rng.randint(-300, 300) for _ in range(100)]


def _decimals():
    with decimal.localcontext(decimal.Context(prec=100)):
        return [D(rng.randint(-(10**40), 10**40)).scaleb(-30) for _ in range(300)] + \
               [D(0).scaleb(-30), D("-0.000000000000000000000000000001")]


def _floats():
    return [0.0, -0.0 + 0.0, 1e-310, -1e-310, math.inf, -math.inf, 1.5, -1.5] + \
           [rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300) for _ in range(300)]


def _datetimes():
    return [dt.datetime(1000, 1, 1) + dt.timedelta(microseconds=rng.randint(0, 9000 * 365 * 86400 * 10**6))
            for _ in range(300)]


@pytest.mark.parametrize("values", [
    _ints(), _decimals(), _floats(), _datetimes(),
    [v.replace(tzinfo=dt.timezone.utc) for v in _datetimes()],
    [dt.date(1000, 1, 1) + dt.timedelta(days=rng.randint(0, 3_000_000)) for _ in range(300)],
    [dt.timedelta(microseconds=rng.randint(-(839 * 3600 * 10**6), 839 * 3600 * 10**6)) for _ in range(300)],
    [rng.randbytes(rng.randint(0, 6)) for _ in range(300)] + [b"", b"\x00", b"\x00\x00", b"\xff"],
], ids=["int", "decimal", "float", "datetime", "timestamp", "date", "time", "bytes"])
def test_encoding_preserves_order(values):
    by_value = sorted(set(values))
    by_encoding = sorted(set(values), key=encode_sort_key)
    assert by_encoding == by_value
    assert len({encode_sort_key(v) for v in by_value}) == len(by_value)


def test_vectorised_integer_encoding_matches_the_scalar_one():
    import pyarrow as pa

    from airflow_provider_mysqlcdc.cdc.records.ordering import encode_int_sort_keys

    values = [0, 1, -1, 255, 256, -255, -256, 2**63 - 1, -(2**63), 2**31, -(2**31) - 7] + \
             [rng.randint(-(2**63), 2**63 - 1) for _ in range(2000)] + [rng.randint(-70000, 70000) for _ in range(2000)]
    for arrow_type in (pa.int64(), pa.int32()):
        subset = [v for v in values if arrow_type == pa.int64() or -(2**31) <= v < 2**31]
        assert encode_int_sort_keys(pa.array(subset, arrow_type)).to_pylist() == [encode_sort_key(v) for v in subset]
