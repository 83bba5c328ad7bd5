"""Downsampling, against OpenTSDB's ``TestDownsampler`` and ``TestFillingDownsampler``.

Those Java tests drive the downsampler directly with no seek, so the window here starts at 0
(or at the FillingDownsampler's start) to read every point, as they do.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.engine.aggregators import AGGREGATORS
from app.engine.downsample import FILL_POLICIES, Window, downsample, reduce_segments
from app.engine.flat import FlatSeries
from tests.unit.engine.data import spec

BASE = 1356998400000
DST_TS = 1450137600000
FAR = 2**62


def flat(points: list[tuple[int, float]]) -> FlatSeries:
    ts = np.array([p[0] for p in points], dtype=np.int64)
    values = np.array([p[1] for p in points], dtype=np.float64)
    return FlatSeries(ts, values, values.astype(np.int64), np.zeros(len(ts), dtype=bool),
                      np.array([0, len(ts)], dtype=np.int64))


def run(points: list[tuple[int, float]], text: str, *, start: int = 0, end: int = FAR,
        query: tuple[int, int] = (0, FAR), tz: str = "UTC") -> list[tuple[int, float]]:
    ds = spec(text)
    out = downsample(flat(points), ds, Window(start, end, query[0], query[1], tz), ds.fill)
    assert out.is_float.all()  # Downsampler#isInteger is always false
    return list(zip(out.ts_ms.tolist(), out.values.tolist(), strict=True))


def same(actual: list[tuple[int, float]], expected: list[tuple[int, float]]) -> bool:
    return len(actual) == len(expected) and all(
        a[0] == e[0] and (a[1] == e[1] or (math.isnan(a[1]) and math.isnan(e[1])))
        for a, e in zip(actual, expected, strict=True))


def test_fill_policy_names() -> None:
    # FillPolicy enum names (scalar is left out: it throws on the first empty bucket).
    assert set(FILL_POLICIES) == {"none", "nan", "null", "zero"}
    assert FILL_POLICIES["null"].json_null and not FILL_POLICIES["nan"].json_null
    assert FILL_POLICIES["zero"].value == 0.0 and math.isnan(FILL_POLICIES["nan"].value)
    assert not FILL_POLICIES["none"].fills


SIX = [(BASE, 40), (BASE + 2000000, 50), (BASE + 3600000, 40), (BASE + 3605000, 50),
       (BASE + 7200000, 40), (BASE + 9200000, 50)]
POWERS = [(BASE + 5000 * i, 2.0**i) for i in range(11)]
STEPS = [(BASE + 5000 + 10000 * i, 2.0**i) for i in range(6)]


@pytest.mark.parametrize(("points", "text", "expected"), [
    # TestDownsampler#testDownsampler: 1000 s buckets are epoch-aligned, so BASE falls in
    # the bucket starting 400 s earlier.
    (SIX, "1000s-avg", [(BASE - 400000, 40), (BASE + 1600000, 50), (BASE + 3600000, 45),
                        (BASE + 6600000, 40), (BASE + 8600000, 50)]),
    # #testDownsampler_10seconds: pairs of 5 s points per 10 s bucket.
    (POWERS, "10s-sum", [(BASE, 3), (BASE + 10000, 12), (BASE + 20000, 48),
                         (BASE + 30000, 192), (BASE + 40000, 768), (BASE + 50000, 1024)]),
    # #testDownsampler_15seconds.
    (STEPS, "15s-sum", [(BASE, 1), (BASE + 15000, 6), (BASE + 30000, 8), (BASE + 45000, 48)]),
    # #testDownsampler_1day: 86400000 ms buckets from the epoch.
    ([(BASE, 1), (BASE + 43200000, 2), (BASE + 86400000, 4), (BASE + 129600000, 8)], "1d-sum",
     [(BASE, 3), (1357084800000, 12)]),
])
def test_epoch_aligned_buckets(points: list[tuple[int, float]], text: str,
                               expected: list[tuple[int, float]]) -> None:
    assert run(points, text) == expected


@pytest.mark.parametrize(("query", "expected"), [
    # #testDownsampler_allFullRange: one value stamped with the query start.
    ((0, FAR), [(0, 63)]),
    # #testDownsampler_allFilterOnQuery: [start, end) - the end is exclusive: 2 + 4 + 8.
    ((BASE + 15000, BASE + 45000), [(BASE + 15000, 14)]),
    # #..OutOfRangeEarly / #..OutOfRangeLate: nothing.
    ((BASE + 65000, BASE + 75000), []),
    ((BASE - 15000, BASE - 5000), []),
])
def test_run_all(query: tuple[int, int], expected: list[tuple[int, float]]) -> None:
    assert run(STEPS, "0all-sum", query=query) == expected
    assert run(STEPS, "0all-sum-nan", query=query) == expected  # fill changes nothing


HOURS = [(BASE, 1), (BASE + 1800000, 2), (BASE + 3599000, 3), (BASE + 3600000, 4),
         (BASE + 5400000, 5), (BASE + 7199000, 6)]
DAYS = [(DST_TS, 1), (DST_TS + 86399000, 2), (DST_TS + 126001000, 3), (DST_TS + 172799000, 4),
        (DST_TS + 172800000, 5), (DST_TS + 242999000, 6)]
WEEKS = [(DST_TS, 1), (DST_TS + 86400000 * 7, 2), (1451129400000, 3),
         (DST_TS + 86400000 * 21, 4), (1452367799000, 5)]
MONTHS = [(1448928000000, 1), (1451559600000, 2), (1451606400000, 3), (1454284800000, 4),
          (1456704000000, 5), (1456772400000, 6)]
DAY_MS, WEEK_MS = 86400000, 7 * 86400000


@pytest.mark.parametrize(("points", "text", "tz", "expected"), [
    # TestDownsampler#testDownsampler_calendar: Denver midnight before 2013-01-01T00:00:05Z.
    (STEPS, "1dc-sum", "America/Denver", [(1356937200000, 63)]),
    # #testDownsampler_1day_timezone (EST days).
    ([(1357016400000, 1), (1357059600000, 2), (1357102800000, 4), (1357146000000, 8)],
     "1dc-sum", "EST", [(1357016400000, 3), (1357102800000, 12)]),
    # #testDownsampler_calendarHour: Funafuti (+12), Kabul (+4:30), and 4 hours in Kabul.
    (HOURS, "1hc-sum", "Pacific/Funafuti", [(BASE, 6), (BASE + 3600000, 15)]),
    (HOURS, "1hc-sum", "Asia/Kabul",
     [(1356996600000, 1), (1357000200000, 9), (1357003800000, 11)]),
    (HOURS, "4hc-sum", "Asia/Kabul", [(1356996600000, 21)]),
    # #testDownsampler_calendarDay.
    (DAYS, "1dc-sum", "UTC", [(DST_TS, 3), (DST_TS + DAY_MS, 7), (DST_TS + 2 * DAY_MS, 11)]),
    (DAYS, "1dc-sum", "Pacific/Funafuti",
     [(1450094400000 + i * DAY_MS, v) for i, v in enumerate((1, 5, 9, 6))]),
    (DAYS, "1dc-sum", "Pacific/Fiji",
     [(1450090800000 + i * DAY_MS, v) for i, v in enumerate((1, 2, 12, 6))]),
    (DAYS, "1dc-sum", "Asia/Kabul",
     [(1450121400000 + i * DAY_MS, v) for i, v in enumerate((1, 5, 15))]),
    (DAYS, "3dc-sum", "Asia/Kabul", [(1450121400000, 21)]),
    # #testDownsampler_calendarWeek: weeks start on Sunday.
    (WEEKS, "1wc-sum", "UTC", [(1449964800000, 1), (1450569600000, 5), (1451779200000, 9)]),
    (WEEKS, "1wc-sum", "Pacific/Funafuti", [(1449921600000, 1), (1450526400000, 5),
                                            (1451736000000, 4), (1451736000000 + WEEK_MS, 5)]),
    (WEEKS, "1wc-sum", "Pacific/Fiji",
     [(1449918000000 + i * WEEK_MS, i + 1.0) for i in range(5)]),
    (WEEKS, "1wc-sum", "Asia/Kabul",
     [(1449948600000, 1), (1450553400000, 5), (1451763000000, 9)]),
    (WEEKS, "2wc-sum", "Asia/Kabul", [(1449948600000, 6), (1451158200000, 9)]),
    # #testDownsampler_calendarMonth (2016 is a leap year).
    (MONTHS, "1nc-sum", "UTC",
     [(1448928000000, 3), (1451606400000, 3), (1454284800000, 15)]),
    (MONTHS, "1nc-sum", "Pacific/Funafuti", [(1448884800000, 3), (1451563200000, 3),
                                             (1454241600000, 9), (1456747200000, 6)]),
    (MONTHS, "1nc-sum", "Asia/Kabul",
     [(1448911800000, 3), (1451590200000, 3), (1454268600000, 15)]),
    (MONTHS, "3nc-sum", "Pacific/Funafuti", [(1443614400000, 3), (1451563200000, 18)]),
])
def test_calendar_buckets(points: list[tuple[int, float]], text: str, tz: str,
                          expected: list[tuple[int, float]]) -> None:
    assert run(points, text, tz=tz) == expected


GAPPY = [(500 + 25 * i, 1.0) for i in (4, 5, 7, 12, 15, 24, 25, 26, 27)]


@pytest.mark.parametrize(("fill", "empty"), [("nan", float("nan")), ("zero", 0.0)])
def test_filling_missing_intervals(fill: str, empty: float) -> None:
    # TestFillingDownsampler#testNaNMissingInterval / #testZeroMissingInterval:
    # buckets from align(500) up to align(500 + 900) exclusive, every one emitted.
    actual = run(GAPPY, f"100ms-sum-{fill}", start=500, end=500 + 36 * 25)
    values = [empty, 3, empty, 2, empty, empty, 4, empty, empty]
    assert same(actual, [(500 + 100 * i, v) for i, v in enumerate(values)])


def test_filling_without_gaps() -> None:
    # TestFillingDownsampler#testWithoutMissingIntervals.
    points = [(1000 + 25 * i, 12.0 - i) for i in range(12)]
    assert run(points, "100ms-sum-nan", start=1000, end=1000 + 12 * 25) == [
        (1000, 42), (1100, 26), (1200, 10)]


def test_filling_ignores_data_outside_the_grid() -> None:
    # TestFillingDownsampler#testWithOutOfBoundsData, with the window starting on the bucket
    # boundary (the query path always seeks there first): 9+8+7+6, then 5+4.
    base = 1425335895000
    points = [(base - 300000 + 320, 53), (base - 120000 + 8839, 16), (base + 849, 9),
              (base + 3849, 8), (base + 6210, 7), (base + 42216, 6), (base + 60167, 5),
              (base + 88593, 4), (base + 150384, 37), (base + 241530, 86)]
    actual = run(points, "1m-sum-nan", start=1425335880000, end=base + 120000)
    assert actual == [(1425335880000, 30), (1425335940000, 9)]


def test_filling_calendar_hours() -> None:
    # TestFillingDownsampler#testDownsampler_calendarHour (Funafuti): 6, 15, then NaN.
    actual = run(HOURS, "1hc-sum-nan", start=BASE, end=BASE + 3 * 3600000,
                 tz="Pacific/Funafuti")
    assert same(actual, [(BASE, 6), (BASE + 3600000, 15), (BASE + 7200000, float("nan"))])


def test_seek_drops_points_before_the_first_boundary() -> None:
    # ValuesInInterval#seekInterval rounds the scan start up to a bucket boundary.
    points = [(BASE + 10000, 1), (BASE + 70000, 2)]
    assert run(points, "1m-sum", start=BASE + 1) == [(BASE + 60000, 2)]


def test_reduce_segments_with_uneven_lengths() -> None:
    values = np.array([1.0, 2.0, 3.0, 10.0, 20.0, 5.0])
    starts = np.array([0, 3, 5], dtype=np.int64)
    lengths = np.array([3, 2, 1], dtype=np.int64)
    assert reduce_segments(values, starts, lengths, AGGREGATORS["sum"]).tolist() == [6, 30, 5]
    assert reduce_segments(values, starts, lengths, AGGREGATORS["last"]).tolist() == [3, 20, 5]
    assert reduce_segments(values, starts, lengths, AGGREGATORS["count"]).tolist() == [3, 2, 1]


@given(st.lists(st.floats(-1e9, 1e9, allow_nan=False), min_size=1, max_size=50))
def test_avg_of_one_point_per_bucket_is_identity(values: list[float]) -> None:
    points = [(BASE + 60000 * i, v) for i, v in enumerate(values)]
    assert run(points, "1m-avg") == points


@pytest.mark.parametrize("function", ["sum", "avg", "max", "first", "count", "dev", "squareSum",
                                      "p95", "none"])
def test_one_point_per_bucket_answers_as_the_aggregator_does(function: str) -> None:
    # Every point alone in its bucket (what a rollup read hands the downsampler) takes a short
    # cut for aggregators that know what they make of one value; the answer is still what
    # the aggregator itself makes of each bucket's one value.
    alone = [(BASE + 60000 * i, v) for i, v in enumerate([3.5, -0.0, 7.0, 1e15, -2.0])]
    values = np.array([[v for _, v in alone]])  # one row: each column a bucket of one point
    expected = AGGREGATORS[function].run_double(values, None)
    out = run(alone, f"1m-{function}")
    assert [ts for ts, _ in out] == [ts for ts, _ in alone]
    assert np.array([v for _, v in out]).tobytes() == expected.tobytes()
    if function in ("sum", "avg"):
        assert str(out[1][1]) == "0.0"  # Java: 0.0 + -0.0
