"""Whole sub-queries: scan window, grouping, tags, pipeline order and the output cut.

Expected values come from spec §2.8, §2.9 (``computeTags``) and the §9 acceptance cases.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.engine.execute import group_series, run_subquery, scan_bounds_ms
from app.engine.flat import count_inside
from app.engine.model import Series
from app.query.ast import Filter, SubQuery
from tests.unit.engine.data import (
    BASE_S,
    END_MS,
    GROUP_BY_HOST,
    START_MS,
    dps,
    long_series,
    missing_data_series,
    ms_series,
    query,
    series,
    spec,
)

T1 = (BASE_S + 60) * 1000
DC, HOST, OWNER = 1, 2, 3  # tagk UIDs: dc sorts before host
DAL, LAX, JDOE = 4, 5, 6


def d7(number: int) -> Series:
    """Spec §9 data set D7: seven sys.cpu.system series, one point each at T1."""
    layout = {1: ("web01", "dal", 3), 2: ("web02", "dal", 2), 3: ("web03", "dal", 10),
              4: ("web01", None, 1), 5: ("web01", None, 4), 6: ("web01", "lax", 8),
              7: ("web02", "lax", 4)}
    host, dc, value = layout[number]
    extra = {}
    if dc is not None:
        extra["dc"] = (dc, DC, DAL if dc == "dal" else LAX)
    if number == 5:
        extra["owner"] = ("jdoe", OWNER, JDOE)
    return series(host, [T1], [value], extra_tags=extra, host_tagk=HOST)


def group_by(*tagks: str) -> tuple[Filter, ...]:
    return tuple(Filter("wildcard", tagk, "*", group_by=True) for tagk in tagks)


def summary(results: list) -> list[tuple[dict[str, str], list[str], float]]:
    return [(r.tags, r.aggregate_tags, float(r.values[0])) for r in results]


def test_tags_keep_keys_only_some_series_have() -> None:
    # Spec case 12a: {host=web01} over series 1, 4, 5, 6: dc differs, owner only on one.
    results = query("sum", [d7(n) for n in (1, 4, 5, 6)], filters=group_by("host"))
    assert summary(results) == [({"host": "web01", "owner": "jdoe"}, ["dc"], 16.0)]


def test_groups_ordered_by_tagv_uid() -> None:
    # Spec case 12d: {dc=dal|lax}.
    results = query("sum", [d7(n) for n in (7, 6, 3, 2, 1)], filters=group_by("dc"))
    assert summary(results) == [({"dc": "dal"}, ["host"], 15.0),
                                ({"dc": "lax"}, ["host"], 12.0)]


def test_group_of_one_keeps_every_tag() -> None:
    # Spec case 12f: explicit_tags {host=*}{dc=*} over series 1, 2, 3, 6, 7.
    filters = group_by("host") + (Filter("wildcard", "dc", "*", group_by=False),)
    results = query("sum", [d7(n) for n in (1, 2, 3, 6, 7)], filters=filters)
    assert summary(results) == [({"host": "web01"}, ["dc"], 11.0),
                                ({"host": "web02"}, ["dc"], 6.0),
                                ({"dc": "dal", "host": "web03"}, [], 10.0)]
    assert list(results[2].tags) == ["dc", "host"]  # tagk-UID order


def test_no_group_by_is_one_group() -> None:
    # Spec case 2 (runLongTwoAggSum).
    [result] = query("sum", long_series())
    assert (result.tags, result.aggregate_tags) == ({}, ["host"])
    assert result.tsuids == ["000001000001000001", "000001000001000002"]


def test_none_gives_one_result_per_series_in_row_key_order() -> None:
    # Spec §4.3: full tags, no aggregateTags, span order (row key), grouping ignored.
    data = [d7(7), d7(1), d7(4)]
    results = query("none", data, filters=group_by("host"))
    assert [(r.tags.get("dc"), r.tags["host"]) for r in results] == [
        ("dal", "web01"), ("lax", "web02"), (None, "web01")]
    assert all(r.aggregate_tags == [] for r in results)


def test_series_missing_a_group_by_tag_is_dropped() -> None:
    sub = SubQuery("sum", filters=group_by("dc"))
    assert group_series(sub, [d7(4), d7(1)]) == [[1]]


@pytest.mark.parametrize(("start_s", "end_s", "text", "expected"), [
    # TestTsdbQueryDownsample#downsampleUnaligned: 12 h ending 1427415547 with 15m.
    (1427415547 - 43200, 1427415547, "15m-avg", (1427371200, 1427418000)),
    # #downsampleFullyAligned: an aligned end still scans a whole extra interval -> next hour.
    (1356998400, 1357041600, "1m-avg", (1356998400, 1357045200)),
    # No downsampling: the end always moves to the next hour boundary.
    (1356998430, 1357041600, None, (1356998400, 1357045200)),
    (1356998430, 1357041000, None, (1356998400, 1357041600)),
])
def test_scan_bounds(start_s: int, end_s: int, text: str | None,
                     expected: tuple[int, int]) -> None:
    ds = spec(text) if text else None
    bounds = scan_bounds_ms(start_s * 1000, end_s * 1000, ds)
    assert bounds == (expected[0] * 1000, expected[1] * 1000)


def test_bucket_before_the_start_is_cut_but_late_points_count() -> None:
    # Spec case 36: start 1356998430 drops the 1356998400 bucket; the last bucket includes
    # k = 7 (1356998610) although it is past the end.
    [result] = query("sum", long_series()[:1], start_ms=1356998430000, end_ms=1356998600000,
                     downsample=spec("1m-avg"))
    assert dps(result) == [(1356998460, 2.5), (1356998520, 4.5), (1356998580, 6.5)]


def test_downsample_then_rate() -> None:
    # Spec case 42 (runLongSingleTSDownsampleAndRate): 150 rates, 0.025 at both ends.
    [result] = query("sum", long_series()[:1], downsample=spec("1m-avg"), rate=True)
    got = dps(result)
    assert len(got) == 150
    assert got[0] == (BASE_S + 60, 0.025) and got[-1] == (1357007400, 0.025)
    assert got[1][1] == 2 / 60


def test_ms_downsample() -> None:
    # Spec case 27 (runLongSingleTSDownsampleMs): 151 points, 1.0, 2.5, ..., 300.0.
    [result] = query("sum", ms_series()[:1], downsample=spec("1s-avg"))
    got = dps(result)
    assert len(got) == 151
    assert got[:2] == [(BASE_S, 1.0), (BASE_S + 1, 2.5)] and got[-1] == (BASE_S + 150, 300.0)
    assert not result.int_mask.any()


@pytest.mark.parametrize(("start_ms", "end_ms", "expected"), [
    # Spec case 28: one value stamped with the query start; [start, end) for the points.
    (START_MS, END_MS, [(BASE_S, 45150.0)]),
    (1356998500000, 1356998600000, [(1356998500, 15.0)]),
])
def test_run_all(start_ms: int, end_ms: int, expected: list[tuple[int, float]]) -> None:
    [result] = query("sum", long_series()[:1], start_ms=start_ms, end_ms=end_ms,
                     downsample=spec("0all-sum"))
    assert dps(result) == expected


@pytest.mark.parametrize(("aggregator", "text", "head", "filled"), [
    # Spec cases 30-33 (TestTsdbQueryDownsample#run*LongSingleTSDownsampleWNulls).
    ("sum", "30s-avg-nan", [301.5, 301.5], "nan"),
    ("sum", "30s-avg-null", [301.5, 301.5], "nan"),
    ("avg", "30s-avg-zero", [150.75, 150.75], 0.0),
    ("avg", "30s-sum-nan", [152.0, 301.5, 155.0, 301.5, 158.0], "nan"),
    ("sum", "30s-min-nan", [301.0, 300.0, 301.0, 300.0], "nan"),
])
def test_fill_policies_over_gaps(aggregator: str, text: str, head: list[float],
                                 filled: object) -> None:
    [result] = query(aggregator, missing_data_series(), downsample=spec(text))
    assert len(result.ts_ms) == 1441  # every 30 s bucket with start <= t <= end
    assert result.ts_ms[0] == START_MS and result.ts_ms[-1] == END_MS
    assert result.values[: len(head)].tolist() == head
    tail = result.values[100:]
    assert bool(np.isnan(tail).all()) if filled == "nan" else bool((tail == filled).all())
    assert result.json_null == text.endswith("null")
    assert result.aggregate_tags == ["host"]


def test_gaps_are_lerped_across_downsampled_series() -> None:
    # Spec case 29 (TestTsdbQueryQueries#runInterpolationMsDownsampled).
    i1 = np.arange(1, 101)
    i2 = np.arange(101, 121)
    web01 = series("web01", np.r_[START_MS + 500 * i1, START_MS + 50000 + 5000 * (i2 - 100)],
                   np.r_[i1, i2])
    j = np.arange(300)
    web02 = series("web02", START_MS + 750 + 500 * j, 300 - j)
    [result] = query("sum", [web01, web02], downsample=spec("1s-sum"))
    got = dps(result)
    assert len(got) == 151
    assert got[:2] == [(BASE_S, 301.0), (BASE_S + 1, 602.0)]
    assert got[49:53] == [(BASE_S + 49, 602.0), (BASE_S + 50, 501.0), (BASE_S + 51, 497.2),
                          (BASE_S + 52, 493.4)]
    assert got[-2:] == [(BASE_S + 149, 124.8), (BASE_S + 150, 121.0)]


def test_calendar_day_in_a_time_zone() -> None:
    # Spec case 34: EST calendar days.
    points = [1357016400000, 1357059600000, 1357102800000, 1357146000000]
    [result] = query("sum", [series("web01", points, [1, 2, 4, 8])], start_ms=points[0],
                     end_ms=points[-1], downsample=spec("1dc-sum"), timezone="EST")
    assert dps(result) == [(1357016400, 3.0), (1357102800, 12.0)]


def test_output_is_cut_to_the_query_range_inclusive() -> None:
    [result] = query("sum", long_series()[:1], start_ms=1356998460000, end_ms=1356998520000)
    assert dps(result) == [(1356998460, 2), (1356998490, 3), (1356998520, 4)]


def test_series_without_points_in_the_scan_window_take_no_part() -> None:
    late = series("web02", [(BASE_S + 86400) * 1000], [7])
    [result] = query("sum", [long_series()[0], late], filters=())
    assert result.tsuids == ["000001000001000001"]
    assert result.aggregate_tags == []


def test_a_matching_series_without_points_in_range_gives_empty_dps() -> None:
    # Spec §2.8.7: points in the scanned hour but none in [start, end].
    early = series("web01", [START_MS + 1000], [5])
    [result] = query("sum", [early], start_ms=START_MS + 2000, end_ms=START_MS + 3000)
    assert len(result.ts_ms) == 0 and result.tags == {"host": "web01"}


def test_annotations_and_metric_pass_through() -> None:
    data = long_series()
    data[0].annotations = [{"startTime": BASE_S + 90, "description": "Hello DiscWorld!"}]
    [result] = run_subquery(SubQuery("sum"), "sys.cpu.user", data, START_MS, END_MS)
    assert result.metric == "sys.cpu.user"
    assert result.annotations == data[0].annotations


def test_no_series_no_results() -> None:
    assert run_subquery(SubQuery("sum", filters=GROUP_BY_HOST), "m", [], START_MS, END_MS) == []


def test_count_inside() -> None:
    assert sum(count_inside(s, START_MS, START_MS + 90001) for s in long_series()) == 6
    one = Series(tsuid="", tags={}, ts_ms=np.array([10, 20, 30], np.int64),
                 values=np.zeros(3), is_int=np.zeros(3, bool))
    assert [count_inside(one, start, end) for start, end in
            [(10, 31), (0, 100), (11, 31), (10, 30), (31, 40), (0, 10), (20, 21)]] == [
        3, 3, 2, 2, 0, 0, 1]


def test_fill_null_prints_null_and_nan_is_a_value() -> None:
    [result] = query("sum", missing_data_series(), downsample=spec("30s-avg-null"))
    assert result.json_null and math.isnan(result.values[-1])


@given(st.lists(st.tuples(st.integers(0, 7199), st.integers(-10**9, 10**9)), min_size=1,
                max_size=60, unique_by=lambda p: p[0]))
def test_sum_of_one_integer_series_is_the_series(points: list[tuple[int, int]]) -> None:
    points.sort()
    ts = [START_MS + 1000 * t for t, _ in points]
    [result] = query("sum", [series("web01", ts, [v for _, v in points])],
                     end_ms=START_MS + 7_200_000)
    assert result.ts_ms.tolist() == ts
    assert result.long_values is not None and result.long_values.tolist() == [
        v for _, v in points]
    assert result.int_mask is not None and result.int_mask.all() and result.is_int
