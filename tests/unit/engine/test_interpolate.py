"""Merging series (``AggregationIterator``): spec §4.4, §4.5 and §9 cases 14-24."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine import interpolate
from app.engine.aggregators import AGGREGATORS
from app.engine.flat import FlatSeries
from app.engine.interpolate import merge
from tests.unit.engine import reference
from tests.unit.engine.data import (
    BASE_S,
    K,
    dps,
    float_series,
    long_offset_series,
    long_series,
    missing_data_series,
    query,
    series,
)
from tests.unit.engine.reference import Point

B = 1356998400000


def flat(*rows: list[tuple[int, float]], floats: bool = True) -> FlatSeries:
    ts = np.array([t for row in rows for t, _ in row], dtype=np.int64)
    values = np.array([v for row in rows for _, v in row], dtype=np.float64)
    offsets = np.concatenate(([0], np.cumsum([len(r) for r in rows]))).astype(np.int64)
    return FlatSeries(ts, values, values.astype(np.int64), np.full(len(ts), floats), offsets)


def merged(name: str, data: FlatSeries, rate: bool = False) -> list[tuple[int, float]]:
    out = merge(data, AGGREGATORS[name], rate=rate, end_ms=2**62)
    return list(zip(out.ts_ms.tolist(), out.values.tolist(), strict=True))


A = [(B, 40.0), (B + 10000, 50.0), (B + 30000, 70.0)]
C = [(B + 10000, 37.0), (B + 20000, 48.0)]


def test_lerp_sum_of_two_doubles_spans() -> None:
    # TestAggregationIterator#testAggregate_doubleSpans: A is lerped to 60 at 20 s.
    assert merged("sum", flat(A, C)) == [(B, 40), (B + 10000, 87), (B + 20000, 108),
                                         (B + 30000, 70)]


def test_pfsum_uses_the_previous_value() -> None:
    # TestAggregationIterator#pfsum: A = {0: 40, 30 s: 70}: 40 + 37, 40 + 48.
    assert merged("pfsum", flat([(B, 40.0), (B + 30000, 70.0)], C)) == [
        (B, 40), (B + 10000, 77), (B + 20000, 88), (B + 30000, 70)]


def test_zim_and_mim_fill() -> None:
    assert merged("zimsum", flat(A, C))[2] == (B + 20000, 48)
    assert merged("mimmin", flat(A, C))[2] == (B + 20000, 48)
    # mimmax over negative doubles: the absent series must not win (Java's Double.MIN_VALUE
    # filler would return 4.9E-324 here; pytsd uses the lowest double).
    negative = flat([(B, -4.0), (B + 20000, -6.0)], [(B + 10000, -9.0)])
    assert merged("mimmax", negative) == [(B, -4), (B + 10000, -9), (B + 20000, -6)]


def test_no_extrapolation_at_the_edges() -> None:
    # Outside its own first..last range a series is absent (count drops to 1).
    assert merged("count", flat(A, C)) == [(B, 1), (B + 10000, 2), (B + 20000, 2),
                                           (B + 30000, 1)]


def test_interpolation_of_integers_truncates() -> None:
    # Spec case 14 (TestTsdbQueryQueries#runInterpolationSeconds): web01 = k at 30 s steps,
    # web02 = 301 - k 15 s later; lerping web01 halfway gives k + 0.5 -> truncated to k.
    [result] = query("sum", long_offset_series())
    got = dps(result)
    assert len(got) == 600
    assert got[:4] == [(BASE_S + 30, 1), (BASE_S + 45, 301), (BASE_S + 60, 302),
                       (BASE_S + 75, 301)]
    assert got[-2:] == [(BASE_S + 9000, 302), (BASE_S + 9015, 1)]
    assert result.int_mask.all()


def test_truncation_is_toward_zero_for_negative_slopes() -> None:
    # y0 + (x - x0) * (y1 - y0) / (x1 - x0) = 10 + 1 * (-5) / 2 = 10 + (-2) = 8 in Java.
    rows = flat([(B, 10.0), (B + 2000, 5.0)], [(B + 1000, 0.0)], floats=False)
    assert merged("sum", rows) == [(B, 10), (B + 1000, 8), (B + 2000, 5)]


@pytest.mark.parametrize(("name", "expected"), [
    # Spec cases 18-22 with data sets LO and L.
    ("zimsum", [1, 300, 2, 299]),  # runZimSumOffset
    ("mimmin", [1, 300, 2, 299]),  # runMimMinOffset
    ("count", [1, 2, 2, 2]),  # runCountOffset
])
def test_offset_series_aggregators(name: str, expected: list[float]) -> None:
    [result] = query(name, long_offset_series())
    assert result.values[:4].tolist() == expected
    assert len(result.ts_ms) == 600


@pytest.mark.parametrize(("name", "data", "head", "tail"), [
    ("avg", long_series(), [150, 150], [150]),  # runAvg: integer division
    ("avg", float_series(), [38.125], [38.125]),  # runAvgFloat
    ("dev", long_series(), [149, 148, 147], [148, 149]),  # runDev
    ("dev", float_series(), [36.875, 36.625], [37.875]),  # runDevFloat
    ("mimmax", long_series(), [300, 299], [300]),  # runMimMax
    ("sum", long_series(), [301, 301], [301]),  # runLongTwoAggSum
])
def test_aligned_aggregators(name: str, data: list, head: list[float],
                             tail: list[float]) -> None:
    [result] = query(name, data)
    assert result.values[: len(head)].tolist() == head
    assert result.values[-len(tail):].tolist() == tail
    assert len(result.ts_ms) == 300


def test_dev_reaches_zero_in_the_middle() -> None:
    # Spec case 21: 0 at k = 150 and k = 151 (|k - (301 - k)| / 2 truncated).
    [result] = query("dev", long_series())
    assert result.values[149:151].tolist() == [0, 0]


def test_zimsum_with_missing_data() -> None:
    # Spec case 17 (TestTsdbQueryAggregators#runZimSumWithMissingData).
    [result] = query("zimsum", missing_data_series())
    got = dps(result)
    assert len(got) == 250
    assert got[:6] == [(BASE_S + 10, 301), (BASE_S + 20, 3), (BASE_S + 30, 297),
                       (BASE_S + 40, 5), (BASE_S + 50, 301), (BASE_S + 70, 301)]
    assert got[-1] == (1357001390, 301)


def test_integer_or_double_per_point() -> None:
    # Spec case 23 (TestTsdbQueryQueries#runMixedSingleTS): 1.25, 1.5, ... 76 with the even
    # whole numbers stored as integers: a point is an integer only if its next one is too,
    # so only the last (76) prints as an integer.
    values = 1.25 + 0.25 * (K - 1)
    stored_int = (values % 2 == 0)
    [result] = query("avg", [series("web01", (BASE_S + 30 * K) * 1000, values, stored_int)])
    assert result.int_mask.tolist() == [False] * 299 + [True]
    assert result.values[3] == 2.0 and not result.int_mask[3]
    assert result.long_values is not None and result.long_values[-1] == 76


def test_a_double_series_makes_every_merged_point_a_double() -> None:
    ints = flat([(B, 1.0), (B + 2000, 3.0)], floats=False)
    doubles = flat([(B + 1000, 0.5)])
    both = FlatSeries(np.r_[ints.ts_ms, doubles.ts_ms], np.r_[ints.values, doubles.values],
                      np.r_[ints.longs, doubles.longs], np.r_[ints.is_float, doubles.is_float],
                      np.array([0, 2, 3], dtype=np.int64))
    out = merge(both, AGGREGATORS["sum"], rate=False, end_ms=2**62)
    # At B the double series has not started, but its next value (0.5) is a double.
    assert out.int_mask.tolist() == [False, False, True]
    assert out.values.tolist() == [1.0, 2.5, 3.0]


def test_rate_merge_uses_latest_rate_and_time_zero_rate() -> None:
    # Rate mode: no lerp. Series 2 starts later; before its second point it contributes its
    # time-zero rate (its first rate, value / first_ts_secs), and its first timestamp is not
    # emitted.
    s1 = [(10000, 1.0), (20000, 3.0), (30000, 4.0), (40000, 10.0)]
    s2 = [(25000, 100.0), (35000, 2.0)]
    got = merged("sum", flat(s1, s2), rate=True)
    assert [t for t, _ in got] == [20000, 30000, 35000, 40000]
    assert got == [(20000, 3.0 + 100.0), (30000, 4.0 + 100.0), (35000, 4.0 + 2.0),
                   (40000, 10.0)]


def test_blocks_give_the_same_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    # Force many column blocks; the expected values are spec case 14's again.
    monkeypatch.setattr(interpolate, "CELLS_PER_BLOCK", 6)
    [result] = query("sum", long_offset_series())
    assert result.values[:4].tolist() == [1, 301, 302, 301]
    assert result.values[-2:].tolist() == [302, 1]
    assert len(result.values) == 600


# --------------------------------------------------------------------------- oracle


@st.composite
def groups(draw: st.DrawFn) -> list[list[Point]]:
    """1-4 series of up to 8 points on a 0..40 s grid; each value an integer or a double."""
    out = []
    for _ in range(draw(st.integers(1, 4))):
        times = sorted(draw(st.sets(st.integers(0, 40), min_size=0, max_size=8)))
        points = []
        for t in times:
            as_int = draw(st.booleans())
            value = draw(st.integers(-50, 50)) if as_int else draw(
                st.floats(-50, 50, allow_nan=False).map(lambda v: round(v, 3)))
            points.append(Point(B + 1000 * t, value, as_int))
        out.append(points)
    return out


def to_flat(group: list[list[Point]]) -> FlatSeries:
    points = [p for row in group for p in row]
    offsets = np.concatenate(([0], np.cumsum([len(r) for r in group]))).astype(np.int64)
    return FlatSeries(np.array([p.ts for p in points], dtype=np.int64),
                      np.array([float(p.value) for p in points], dtype=np.float64),
                      np.array([int(p.value) if p.is_int else 0 for p in points], dtype=np.int64),
                      np.array([not p.is_int for p in points], dtype=bool), offsets)


@settings(max_examples=150, deadline=None)
@given(groups(), st.sampled_from(sorted(reference.AGGREGATORS)), st.booleans())
def test_matches_a_literal_port_of_the_java_iterator(group: list[list[Point]], name: str,
                                                     rate: bool) -> None:
    expected = reference.aggregate(group, name, rate)
    out = merge(to_flat(group), AGGREGATORS[name], rate=rate, end_ms=2**62)
    assert out.ts_ms.tolist() == [t for t, _, _ in expected]
    assert out.int_mask.tolist() == [i for _, _, i in expected]
    for value, exact, (_, want, is_int) in zip(out.values.tolist(), out.longs.tolist(),
                                               expected, strict=True):
        if is_int:
            assert exact == want
        else:
            assert value == want or (math.isnan(value) and math.isnan(want))
