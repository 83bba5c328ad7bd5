"""Rates, against OpenTSDB's ``TestRateSpan`` and the rate cases of spec §6 / §9 D."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.flat import FlatSeries
from app.engine.rate import rate
from app.query.ast import LONG_MAX, RateOptions
from tests.unit.engine.data import BASE_S, dps, query, series

T0 = 1356998430


def flat(ts_s: list[int], values: list[int] | list[float], ints: bool = True) -> FlatSeries:
    ts = np.array(ts_s, dtype=np.int64) * 1000
    longs = np.array(values, dtype=np.int64) if ints else np.zeros(len(ts), dtype=np.int64)
    return FlatSeries(ts, np.array(values, dtype=np.float64), longs,
                      np.full(len(ts), not ints), np.array([0, len(ts)], dtype=np.int64))


def rates(ts_s: list[int], values: list[int] | list[float], options: RateOptions,
          ints: bool = True) -> list[tuple[int, float]]:
    out = rate(flat(ts_s, values, ints), options)
    assert out.is_float.all()  # rates are always doubles
    return list(zip((out.ts_ms // 1000).tolist(), out.values.tolist(), strict=True))


def test_first_rate_is_against_time_zero() -> None:
    # RateSpan: the first rate is taken against (t=0, v=0).
    assert rates([T0, T0 + 30], [5, 6], RateOptions()) == [(T0, 5 / T0), (T0 + 30, 1 / 30)]


def test_integer_differences_are_exact_longs() -> None:
    # 2**60 + 1 and 2**60 + 3 are both 2**60 as doubles; the long difference is 2.
    out = rate(FlatSeries(np.array([1000, 2000], dtype=np.int64), np.array([2.0**60, 2.0**60]),
                          np.array([2**60 + 1, 2**60 + 3], dtype=np.int64),
                          np.zeros(2, dtype=bool), np.array([0, 2], dtype=np.int64)),
               RateOptions())
    assert out.values[1] == 2.0


def test_counter_rolls_over_counter_max() -> None:
    # TestRateSpan#testNext_counter: max 70, 50 -> 40 over 1600 s: (70 - 50 + 40) / 1600.
    got = rates([T0, T0 + 1600], [50, 40], RateOptions(counter=True, counter_max=70))
    assert got[1] == (T0 + 1600, 60 / 1600)


def test_reset_value_zeroes_only_rollover_rates() -> None:
    # TestRateSpan#testNext_counterWithResetValue: max 70, reset 1, [40, 50, 40] one second
    # apart: +10 is never compared with resetValue; the rollover (60/s > 1) becomes 0.
    got = rates([T0, T0 + 1, T0 + 2], [40, 50, 40],
                RateOptions(counter=True, counter_max=70, reset_value=1))
    assert got[1:] == [(T0 + 1, 10.0), (T0 + 2, 0.0)]


@pytest.mark.parametrize(("values", "options", "expected"), [
    # Spec §9 cases 38-41 (TestTsdbQueryQueries#runRateCounter*), points 30 s apart.
    ([LONG_MAX - 55, LONG_MAX - 25, 5], RateOptions(counter=True),
     [(T0 + 30, 1.0), (T0 + 60, 1.0)]),
    ([45, 75, 5], RateOptions(counter=True, counter_max=100), [(T0 + 30, 1.0), (T0 + 60, 1.0)]),
    ([45, 75, 25], RateOptions(counter=True, counter_max=10000, reset_value=35),
     [(T0 + 30, 1.0), (T0 + 60, 0.0)]),
    # dropResets: the 75 -> 25 rate disappears; the next is measured from 25.
    ([45, 75, 25, 55], RateOptions(counter=True, counter_max=10000, reset_value=35,
                                   drop_resets=True), [(T0 + 30, 1.0), (T0 + 90, 1.0)]),
])
def test_counter_queries(values: list[int], options: RateOptions,
                         expected: list[tuple[int, float]]) -> None:
    ts = [(T0 + 30 * i) * 1000 for i in range(len(values))]
    data = [series("web01", ts, np.array(values, dtype=np.float64))]
    data[0].long_values = np.array(values, dtype=np.int64)
    [result] = query("sum", data, rate=True, rate_options=options)
    assert dps(result) == expected
    assert not result.int_mask.any()


def test_mixed_integer_and_double_points_subtract_as_doubles() -> None:
    out = rate(FlatSeries(np.array([1000, 3000], dtype=np.int64), np.array([1.0, 2.5]),
                          np.array([1, 0], dtype=np.int64), np.array([False, True]),
                          np.array([0, 2], dtype=np.int64)), RateOptions())
    assert out.values.tolist() == [1.0, 0.75]


def test_nan_values_give_nan_rates_not_counter_resets() -> None:
    got = rates([T0, T0 + 10, T0 + 20], [1.0, float("nan"), 3.0],
                RateOptions(counter=True, drop_resets=True), ints=False)
    assert len(got) == 3 and np.isnan(got[1][1]) and np.isnan(got[2][1])


def test_rates_stay_within_their_series() -> None:
    two = FlatSeries(np.array([10_000, 20_000, 15_000], dtype=np.int64),
                     np.array([1.0, 3.0, 8.0]), np.array([1, 3, 8], dtype=np.int64),
                     np.zeros(3, dtype=bool), np.array([0, 2, 3], dtype=np.int64))
    out = rate(two, RateOptions())
    # The second series' first rate is again against time zero: 8 / 15 s.
    assert out.values.tolist() == [0.1, 0.2, 8 / 15]
    assert out.offsets.tolist() == [0, 2, 3]


def test_plain_rate_query_skips_the_first_point() -> None:
    # Spec case 37 (TestTsdbQueryQueries#runLongSingleTSRate): 299 rates of 1/30 from +60 s.
    ts = (BASE_S + 30 * np.arange(1, 301)) * 1000
    [result] = query("sum", [series("web01", ts, np.arange(1, 301))], rate=True)
    assert len(result.ts_ms) == 299
    assert dps(result)[0] == (BASE_S + 60, 1 / 30)
    assert set(result.values.tolist()) == {0.03333333333333333}
