"""Histogram sub-queries (``percentiles`` / ``show-histogram-buckets``), as OpenTSDB 2.4 runs
them (``TsdbQuery#runHistogramAsync``, ``HistogramSpanGroup``, ``HistogramDownsampler``,
``HistogramAggregationIterator``).

Per series, histograms are downsampled (counts summed per interval, stamped with the
interval's start; ``all`` sums the points in ``[start, end)`` under the query start); the
series of a group are then merged by summing the histograms that share a timestamp. The
aggregator only decides the groups: ``none`` keeps each series apart, ``sum`` groups as a
numeric query does. Each group answers, in this order, one series per requested percentile
(``<metric>_pct_<p>``, doubles) and, with buckets shown, one series per bucket of the group's
first histogram (``<metric>_<lower>_<upper>``, ``_UNDERFLOW`` first, ``_OVERFLOW`` last,
integer counts). The output is cut to ``[start, end]`` as for numeric queries. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.engine.calendar import add_interval, previous_interval, zone
from app.engine.execute import compute_tags, group_series, scan_bounds_ms
from app.engine.model import GroupResult, Series
from app.query.ast import Downsample, SubQuery
from app.storage.codec_histogram import SimpleHistogram, java_float_text, to_float32

Points = list[tuple[int, SimpleHistogram]]
UNDERFLOW, OVERFLOW = "_UNDERFLOW", "_OVERFLOW"


@dataclass
class HistogramSeries:
    """One series' histogram points (ascending ``ts_ms``) and what names it."""

    tsuid: str
    tags: dict[str, str]
    points: Points
    row_order: bytes = b""
    tag_uids: dict[str, tuple[bytes, bytes]] = field(default_factory=dict)
    annotations: list[dict[str, Any]] = field(default_factory=list)

    def meta(self) -> Series:
        """A pointless :class:`Series` with this one's names: for grouping and tags."""
        empty = np.zeros(0, dtype=np.int64)
        return Series(tsuid=self.tsuid, tags=self.tags, ts_ms=empty,
                      values=np.zeros(0), is_int=np.zeros(0, dtype=bool),
                      annotations=self.annotations, row_order=self.row_order,
                      tag_uids=self.tag_uids)


def is_histogram_query(sub: SubQuery) -> bool:
    return bool(sub.percentiles) or sub.show_histogram_buckets


def run_histogram_subquery(sub: SubQuery, metric: str, series: Sequence[HistogramSeries],
                           start_ms: int, end_ms: int, timezone: str = "UTC"
                           ) -> list[GroupResult]:
    """The response groups of a histogram sub-query over its series' points."""
    scan_start, scan_end = scan_bounds_ms(start_ms, end_ms, sub.downsample)
    ordered = sorted((s for s in series if s.points), key=lambda s: s.row_order)
    results: list[GroupResult] = []
    for rows in group_series(sub, [s.meta() for s in ordered]):
        members = [ordered[i] for i in rows]
        spans = [_downsampled(s.points, sub.downsample, start_ms, end_ms, timezone)
                 for s in members]
        merged = _merge([[(ts, h) for ts, h in span if scan_start <= ts < scan_end]
                         for span in spans])
        results += _group_results(sub, metric, members, merged, start_ms, end_ms)
    return results


def _downsampled(points: Points, spec: Downsample | None, start_ms: int, end_ms: int,
                 timezone: str) -> Points:
    if spec is None:
        return points
    if spec.run_all:
        inside = [h for ts, h in points if start_ms <= ts < end_ms]
        return [(start_ms, _sum(inside))] if inside else []
    out: Points = []
    bucket_start, bucket_end = 0, -1
    for ts, histogram in points:
        if ts >= bucket_end:
            bucket_start, bucket_end = _interval(ts, spec, timezone, out, bucket_start)
            out.append((bucket_start, histogram.copy()))
        else:
            out[-1][1].add(histogram)
    return out


def _interval(ts: int, spec: Downsample, timezone: str, out: Points,
              previous_start: int) -> tuple[int, int]:
    """``[start, end)`` of the interval holding ``ts``: fixed intervals align to the epoch;
    calendar ones start at the first point's interval and step forward (``Calendar.add``)."""
    if not spec.calendar:
        start = ts - ts % spec.interval_ms
        return start, start + spec.interval_ms
    tz = zone(timezone)
    count, unit = (spec.count * 7, "d") if spec.unit == "w" else (spec.count, spec.unit)
    start = previous_interval(ts, spec.count, spec.unit, tz) if not out else previous_start
    end = add_interval(start, count, unit, tz)
    while ts >= end:
        start, end = end, add_interval(end, count, unit, tz)
    return start, end


def _sum(histograms: Sequence[SimpleHistogram]) -> SimpleHistogram:
    total = histograms[0].copy()
    for histogram in histograms[1:]:
        total.add(histogram)
    return total


def _merge(spans: list[Points]) -> Points:
    """``HistogramAggregationIterator``: the spans' histograms summed per timestamp."""
    by_time: dict[int, SimpleHistogram] = {}
    for span in spans:
        for ts, histogram in span:
            mine = by_time.get(ts)
            if mine is None:
                by_time[ts] = histogram.copy()
            else:
                mine.add(histogram)
    return sorted(by_time.items(), key=lambda item: item[0])


def _group_results(sub: SubQuery, metric: str, members: list[HistogramSeries], merged: Points,
                   start_ms: int, end_ms: int) -> list[GroupResult]:
    tags, aggregate_tags = compute_tags([s.meta() for s in members])
    shown = [(ts, h) for ts, h in merged if start_ms <= ts <= end_ms]
    ts_ms = np.array([ts for ts, _ in shown], dtype=np.int64)

    def result(suffix: str, values: list[float] | list[int], is_int: bool) -> GroupResult:
        longs = np.array(values, dtype=np.int64) if is_int else None
        return GroupResult(metric=metric + suffix, tags=dict(tags),
                           aggregate_tags=list(aggregate_tags),
                           tsuids=sorted(s.tsuid for s in members), ts_ms=ts_ms,
                           values=np.array(values, dtype=np.float64), is_int=is_int,
                           query_index=sub.index,
                           annotations=[n for s in members for n in s.annotations],
                           int_mask=np.full(len(values), is_int), long_values=longs)

    out = []
    for percentile in sub.percentiles:
        p = to_float32(percentile)  # a Java Float, widened to double
        out.append(result("_pct_" + java_float_text(p), [h.percentile(p) for _, h in shown],
                          False))
    if sub.show_histogram_buckets and merged:
        first = merged[0][1]
        out.append(result(UNDERFLOW, [h.underflow for _, h in shown], True))
        for key, ((lower, upper), _) in sorted(first.buckets.items()):
            suffix = f"_{java_float_text(lower)}_{java_float_text(upper)}"
            out.append(result(suffix, [_count(h, key) for _, h in shown], True))
        out.append(result(OVERFLOW, [h.overflow for _, h in shown], True))
    return out


def _count(histogram: SimpleHistogram, key: tuple[int, int]) -> int:
    found = histogram.buckets.get(key)
    return found[1] if found is not None else 0
