import decimal

from airflow_provider_mysqlcdc.cdc.planning.splitter import distribution_factor, even_bounds, even_step

D = decimal.Decimal


def test_distribution_factor_dense_and_sparse():
    assert distribution_factor(1, 1000, 1000) == 1
    assert distribution_factor(1, 100_000, 1000) == D("100")
    assert distribution_factor(5, 5, 1) == 1
    assert distribution_factor(1, 10, 0) is None


def test_even_bounds_are_contiguous_open_ended_and_cover_the_range():
    bounds = even_bounds(1, 1000, 100)
    assert bounds[0] == (None, 101)
    assert bounds[-1] == (1001 - 100, None)
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    assert len(bounds) == 10


def test_even_bounds_do_not_exceed_bigint_unsigned_max():
    top = 2**64 - 1
    bounds = even_bounds(top - 999, top, 100)
    assert all(b <= top for pair in bounds for b in pair if b is not None)
    assert bounds[-1][1] is None and bounds[0][0] is None


def test_even_step_integral_and_decimal():
    assert even_step(D("1"), 8096, None) == 8096
    assert even_step(D("0.001"), 10, None) == 1  # never zero
    assert even_step(D("0.5"), 3, 2) == D("1.50")
    assert even_step(D("0.0001"), 1, 2) == D("0.01")  # at least one unit of the scale


def test_even_bounds_with_decimal_keys_are_exact():
    bounds = even_bounds(D("0.00"), D("10.00"), D("2.50"))
    assert [b for b, _ in bounds] == [None, D("2.50"), D("5.00"), D("7.50"), D("10.00")]
