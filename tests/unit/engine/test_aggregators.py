"""Aggregators, against OpenTSDB's ``TestAggregators`` and ``Aggregators.java`` semantics.

Expected values are worked out by hand from the Java code (spec §4.1, §4.2).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.engine.aggregators import (
    AGGREGATORS,
    LONG_MAX,
    LONG_MIN,
    IllegalDataError,
    Interpolation,
    java_d2l,
    java_trunc_div,
)

NAN = float("nan")


def col(*values: float) -> np.ndarray:
    """One output column: the values down the rows."""
    return np.array(values, dtype=np.float64)[:, None]


def lcol(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)[:, None]


def double(name: str, values: np.ndarray, present: np.ndarray | None = None) -> float:
    return float(AGGREGATORS[name].run_double(values, present)[0])


def long(name: str, values: np.ndarray, present: np.ndarray | None = None) -> int:
    return int(AGGREGATORS[name].run_long(values, present)[0])


def test_registry_is_opentsdb_24s_35_names() -> None:
    # Spec §4.1: the names of Aggregators.set() in 2.4.0/2.4.1, exact case.
    expected = {
        "sum", "min", "max", "avg", "none", "median", "mult", "dev", "diff", "count", "zimsum",
        "mimmin", "mimmax", "first", "last", "pfsum", "squareSum", "p999", "p99", "p95", "p90",
        "p75", "p50", "ep999r3", "ep99r3", "ep95r3", "ep90r3", "ep75r3", "ep50r3", "ep999r7",
        "ep99r7", "ep95r7", "ep90r7", "ep75r7", "ep50r7",
    }
    assert set(AGGREGATORS) == expected
    assert "SUM" not in AGGREGATORS and "multiply" not in AGGREGATORS


@pytest.mark.parametrize(("name", "interpolation"), [
    # Spec §4.2 table, column "interp.".
    ("sum", Interpolation.LERP), ("pfsum", Interpolation.PREV), ("zimsum", Interpolation.ZIM),
    ("min", Interpolation.LERP), ("max", Interpolation.LERP), ("mimmin", Interpolation.MAX),
    ("mimmax", Interpolation.MIN), ("avg", Interpolation.LERP), ("median", Interpolation.LERP),
    ("dev", Interpolation.LERP), ("diff", Interpolation.LERP), ("mult", Interpolation.LERP),
    ("count", Interpolation.ZIM), ("first", Interpolation.ZIM), ("last", Interpolation.ZIM),
    ("squareSum", Interpolation.ZIM), ("none", Interpolation.ZIM), ("p99", Interpolation.LERP),
    ("ep50r3", Interpolation.LERP), ("ep999r7", Interpolation.LERP),
])
def test_interpolation_per_aggregator(name: str, interpolation: Interpolation) -> None:
    assert AGGREGATORS[name].interpolation is interpolation


def test_median_is_the_upper_median() -> None:
    # TestAggregators#testMedian: {5, 2, -1, 400, 3, -42} sorted -> [-42,-1,2,3,5,400], [6/2] = 3.
    assert long("median", lcol(5, 2, -1, 400, 3, -42)) == 3
    assert double("median", col(5, 2, -1, 400, 3, -42)) == 3.0
    assert double("median", col(NAN, 7, NAN)) == 7.0
    assert np.isnan(double("median", col(NAN, NAN)))


@pytest.mark.parametrize(("name", "expected"), [
    # TestAggregators#testPercentiles: 1..1000 gives these for p*, ep*r3 and ep*r7 (longs).
    ("p50", 500), ("p75", 750), ("p90", 900), ("p95", 950), ("p99", 990), ("p999", 999),
    ("ep50r3", 500), ("ep75r3", 750), ("ep90r3", 900), ("ep95r3", 950), ("ep99r3", 990),
    ("ep999r3", 999), ("ep50r7", 500), ("ep75r7", 750), ("ep90r7", 900), ("ep95r7", 950),
    ("ep99r7", 990), ("ep999r7", 999),
])
def test_percentiles_of_1_to_1000(name: str, expected: int) -> None:
    assert long(name, np.arange(1, 1001, dtype=np.int64)[:, None]) == expected


@pytest.mark.parametrize(("name", "as_long", "as_double"), [
    # Data [1, 2, 3, 4], worked by hand from commons-math3 EstimationType:
    # LEGACY p50: pos = .5 * 5 = 2.5 -> 2 + .5 * (3 - 2) = 2.5.
    ("p50", 2, 2.5),
    # LEGACY p75: pos = 3.75 -> 3.75; p999: pos = 4.995 >= 4 -> max.
    ("p75", 3, 3.75),
    ("p999", 4, 4.0),
    # R_3 p50 (long only): rint(4 * .5) = 2 -> 2nd smallest = 2. Doubles ignore the type: 2.5.
    ("ep50r3", 2, 2.5),
    # R_3 p75: rint(3.0) = 3 -> 3. R_7 p75: 1 + 3 * .75 = 3.25 -> 3.25 -> (long) 3.
    ("ep75r3", 3, 3.75),
    ("ep75r7", 3, 3.75),
])
def test_percentile_estimators(name: str, as_long: int, as_double: float) -> None:
    assert long(name, lcol(4, 1, 3, 2)) == as_long
    assert double(name, col(4, 1, 3, 2)) == as_double


def test_percentile_drops_nan_and_is_nan_when_empty() -> None:
    assert double("p50", col(NAN, 10, NAN)) == 10.0
    assert np.isnan(double("p50", col(NAN, NAN)))


def test_avg_truncates_longs() -> None:
    # TestTsdbQueryAggregators#runAvg: avg(1, 300) = 150 (not 150.5); Java division truncates.
    assert long("avg", lcol(1, 300)) == 150
    assert long("avg", lcol(-1, -300)) == -150
    assert double("avg", col(1, 300)) == 150.5


def test_dev_is_population_and_truncated() -> None:
    # TestTsdbQueryAggregators#runDev / #runDevFloat.
    assert long("dev", lcol(1, 300)) == 149
    assert double("dev", col(1.25, 75)) == 36.875
    assert long("dev", lcol(42)) == 0
    assert double("dev", col(NAN, 3.0, NAN)) == 0.0
    assert np.isnan(double("dev", col(NAN, NAN)))


def test_sum_skips_nan_and_is_nan_when_all_nan() -> None:
    assert double("sum", col(1.5, NAN, 2.0)) == 3.5
    assert np.isnan(double("sum", col(NAN, NAN)))
    assert double("count", col(1.5, NAN, 2.0)) == 2.0


def test_sum_adds_in_row_order_like_java() -> None:
    # Java: ((0 + 1e16) + 1) + ... + (-1e16); each +1 is lost to rounding (ulp(1e16) = 2), so
    # the sum is 0.0. Pairwise summation would keep the ones and return 18.0.
    rows = np.array([1e16] + [1.0] * 18 + [-1e16])
    for columns in (1, 2, 3, 50):
        values = np.ascontiguousarray(rows[:, None] * np.ones((1, columns)))
        assert AGGREGATORS["sum"].run_double(values, None).tolist() == [0.0] * columns
        transposed = np.ascontiguousarray(values.T).T  # same values, column-major layout
        assert AGGREGATORS["avg"].run_double(transposed, None).tolist() == [0.0] * columns
        assert AGGREGATORS["sum"].run_long(values.astype(np.int64), None).tolist() == [18] * columns


def test_min_max_skip_nan() -> None:
    assert double("min", col(NAN, 3, -2)) == -2.0
    assert double("max", col(NAN, 3, -2)) == 3.0
    assert np.isnan(double("max", col(NAN)))


def test_mult_propagates_nan_values_but_skips_absent_rows() -> None:
    assert double("mult", col(2, NAN, 4)) != double("mult", col(2, NAN, 4))  # NaN value
    present = np.array([[True], [False], [True]])
    assert double("mult", col(2, NAN, 4), present) == 8.0
    assert long("mult", lcol(2, 99, 4), present) == 8


def test_diff_first_non_nan_to_last_present() -> None:
    # Aggregators.Diff: first non-NaN value, then the last value present (NaN included).
    assert double("diff", col(NAN, 2, 5, 9)) == 7.0
    assert double("diff", col(4.0)) == 0.0
    assert np.isnan(double("diff", col(1, 5, NAN)))
    assert long("diff", lcol(10, 3, 7)) == -3
    present = np.array([[True], [True], [False]])
    assert double("diff", col(1, 5, NAN), present) == 4.0


def test_first_last_go_by_row_order() -> None:
    present = np.array([[False], [True], [True], [False]])
    assert double("first", col(NAN, 7, 8, NAN), present) == 7.0
    assert double("last", col(NAN, 7, 8, NAN), present) == 8.0
    assert long("last", lcol(0, 7, 8, 0), present) == 8


def test_square_sum() -> None:
    assert double("squareSum", col(1.5, NAN, 2.0)) == 6.25
    assert long("squareSum", lcol(3, -4)) == 25


def test_none_refuses_two_values() -> None:
    assert double("none", col(NAN, 4.0), np.array([[False], [True]])) == 4.0
    with pytest.raises(IllegalDataError, match="More than one value"):
        AGGREGATORS["none"].run_double(col(1, 2), None)


def test_long_arithmetic_wraps_like_java() -> None:
    assert long("sum", lcol(LONG_MAX, 1)) == LONG_MIN
    assert long("mimmin", lcol(LONG_MAX, 5)) == 5


def test_java_truncating_division() -> None:
    num = np.array([-7, 7, -7, 7, 0], dtype=np.int64)
    den = np.array([2, 2, -2, -2, 5], dtype=np.int64)
    assert java_trunc_div(num, den).tolist() == [-3, 3, 3, -3, 0]


def test_java_double_to_long_cast() -> None:
    values = np.array([NAN, 1e300, -1e300, -2.7, 2.7, 9.2e18])
    assert java_d2l(values).tolist() == [0, LONG_MAX, LONG_MIN, -2, 2, 9200000000000000000]


finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False)


@given(st.lists(finite, min_size=1, max_size=40))
def test_single_series_sum_is_the_series(values: list[float]) -> None:
    # Aggregating one row returns that row for every order-independent identity aggregator.
    row = np.array(values)[None, :]
    for name in ("sum", "avg", "min", "max", "median", "first", "last", "p50", "mimmax"):
        assert AGGREGATORS[name].run_double(row, None).tolist() == values


@given(st.lists(st.integers(-10**6, 10**6), min_size=1, max_size=30))
def test_long_sum_and_avg_match_python(values: list[int]) -> None:
    column = np.array(values, dtype=np.int64)[:, None]
    total = sum(values)
    assert long("sum", column) == total
    quotient = abs(total) // len(values)
    assert long("avg", column) == (quotient if total >= 0 else -quotient)


def test_what_an_aggregator_says_it_makes_of_one_value_is_what_it_makes() -> None:
    values = np.array([[1.5, -0.0, np.nan, np.inf, -np.inf, 2.0**60 + 1, 1e-310]])
    told = [agg for agg in AGGREGATORS.values() if agg.of_one is not None]
    assert {agg.name for agg in told} >= {"sum", "avg", "min", "max"}
    for agg in told:
        assert agg.of_one is not None
        said = agg.of_one(values[0].copy())
        assert agg.run_double(values, None).tobytes() == said.tobytes(), agg.name
    assert AGGREGATORS["sum"].of_one(np.array([-0.0])).tobytes() == np.array([0.0]).tobytes()
