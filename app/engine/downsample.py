"""Downsampling, as OpenTSDB 2.4's ``Downsampler`` and ``FillingDownsampler``, for many series.

A bucket starts at ``ts - ts % interval`` (epoch-aligned, UTC) or, in calendar mode, at
``DateTime#previousInterval`` in the query's time zone; it holds ``start <= t < next start`` and
is stamped with its start. Its value is the function's ``runDouble`` over the bucket's points in
time order, so it is always a double. Before bucketing, the iterator seeks to the first bucket
boundary at or after the scan start: points before it are dropped. ``all`` makes one bucket per
series from the points in ``[query_start, query_end)``, stamped ``query_start``. With a filling
policy every series emits every bucket from the bucket of the scan start up to (excluding) the
bucket of the scan end, empty ones holding NaN or 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.engine import calendar
from app.engine.aggregators import AGGREGATORS, Aggregator
from app.engine.flat import FlatSeries, constant, ranges_to_index
from app.engine.model import Float64Array, Int64Array
from app.query.ast import Downsample


@dataclass(frozen=True)
class FillPolicy:
    """OpenTSDB's ``FillPolicy``: what an empty bucket holds, and how NaN is printed."""

    name: str
    fills: bool  # emit empty buckets at all
    value: float  # what an empty bucket holds
    json_null: bool  # NaN prints as JSON null instead of "NaN"


FILL_POLICIES: dict[str, FillPolicy] = {
    "none": FillPolicy("none", False, float("nan"), False),
    "nan": FillPolicy("nan", True, float("nan"), False),
    "null": FillPolicy("null", True, float("nan"), True),
    "zero": FillPolicy("zero", True, 0.0, False),
}
"""Lower-case names (``FillPolicy.fromString`` ignores case). ``scalar`` parses in OpenTSDB but
throws on the first empty bucket, so it is left out."""


@dataclass(frozen=True)
class Window:
    """The time bounds a downsampler works in (milliseconds)."""

    scan_start_ms: int
    scan_end_ms: int
    query_start_ms: int
    query_end_ms: int
    timezone: str = "UTC"


def reduce_segments(values: Float64Array, starts: Int64Array, lengths: Int64Array,
                    function: Aggregator) -> Float64Array:
    """``function.run_double`` over each ``values[start:start + length]``, in point order.

    The segments tile ``values`` in order. Segments of equal length are stacked into one
    (length x count) array, rows being the n-th point of each segment, so the aggregator sees
    points in time order (Java's order of summation) without a loop over segments.
    """
    if len(starts) == 0:
        return np.zeros(0)
    first = int(lengths[0])
    if bool((lengths == first).all()):
        return function.run_double(values[: first * len(starts)].reshape(-1, first).T, None)
    out = np.empty(len(starts))
    order = np.argsort(lengths, kind="stable")
    cuts = np.flatnonzero(np.diff(lengths[order])) + 1
    for group in np.split(order, cuts):
        length = int(lengths[group[0]])
        index = starts[group][None, :] + np.arange(length, dtype=np.int64)[:, None]
        out[group] = function.run_double(values[index], None)
    return out


def _bucket_starts(flat: FlatSeries, spec: Downsample, tz_name: str) -> Int64Array:
    """The bucket each point falls in (the points are already past the seek boundary)."""
    ts = flat.ts_ms
    if not spec.calendar:
        # Floor division, then multiply: cheaper than ``ts - ts % interval`` on int64; the
        # multiply in place (a temporary of 8 bytes per point fewer).
        starts = ts // spec.interval_ms
        starts *= spec.interval_ms
        return starts
    tz = calendar.zone(tz_name)
    out = np.empty_like(ts)
    nonempty = np.flatnonzero(flat.lengths > 0)
    firsts, ends = flat.offsets[nonempty], flat.offsets[nonempty + 1]
    anchors = [calendar.previous_interval(int(ts[i]), spec.count, spec.unit, tz) for i in firsts]
    for anchor in sorted(set(anchors)):
        rows = np.array([k for k, a in enumerate(anchors) if a == anchor], dtype=np.int64)
        index = ranges_to_index(firsts[rows], ends[rows] - firsts[rows])
        grid = calendar.boundaries(anchor, int(ts[index].max()), spec.count, spec.unit, tz)
        out[index] = grid[np.searchsorted(grid, ts[index], side="right") - 1]
    return out


def _seek_ms(spec: Downsample, window: Window) -> int:
    """First bucket boundary at or after the scan start (``ValuesInInterval#seekInterval``)."""
    start = window.scan_start_ms
    if not spec.calendar:
        return start + spec.interval_ms - 1 - (start + spec.interval_ms - 1) % spec.interval_ms
    tz = calendar.zone(window.timezone)
    snapped = calendar.previous_interval(start, spec.count, spec.unit, tz)
    if start > snapped:
        snapped = calendar.add_interval(snapped, spec.count, spec.unit, tz)
    return snapped


def fill_grid(spec: Downsample, window: Window) -> Int64Array:
    """Bucket starts a filling downsampler emits for every series."""
    if not spec.calendar:
        width = spec.interval_ms
        first = window.scan_start_ms - window.scan_start_ms % width
        last = window.scan_end_ms - window.scan_end_ms % width
        return np.arange(first, last, width, dtype=np.int64)
    tz = calendar.zone(window.timezone)
    first = calendar.previous_interval(window.scan_start_ms, spec.count, spec.unit, tz)
    end = calendar.previous_interval(window.scan_end_ms, spec.count, spec.unit, tz)
    if end == first:
        end = calendar.add_interval(end, spec.count, spec.unit, tz)
    grid = calendar.boundaries(first, end, spec.count, spec.unit, tz)
    # AggregationIterator skips points before the scan start: a zone whose buckets are not
    # hour-aligned in UTC (Asia/Kolkata) starts the grid before it. It matters with a rate,
    # whose first point (the one consumed) must be the first bucket at or after the scan start.
    return grid[(grid >= window.scan_start_ms) & (grid < end)]


def _doubles(ts: Int64Array, values: Float64Array, offsets: Int64Array) -> FlatSeries:
    """Downsampled output: every point is a double (``Downsampler#isInteger`` is false).
    Its longs and flags are read-only views of one value (no 9 bytes per point to fill)."""
    return FlatSeries(ts, values, constant(0, np.int64, len(ts)), constant(True, np.bool_, len(ts)),
                      offsets)


def apply_fill(out: FlatSeries, grid: Int64Array, value: float) -> FlatSeries:
    """Every series gets every grid bucket; buckets off the grid are never emitted."""
    n, width = out.n_series, len(grid)
    filled = np.full(n * width, value)
    pos = np.searchsorted(grid, out.ts_ms)
    on_grid = pos < width
    on_grid[on_grid] = grid[pos[on_grid]] == out.ts_ms[on_grid]
    cell = out.series_ids()[on_grid] * width + pos[on_grid]
    filled[cell] = out.values[on_grid]
    offsets = width * np.arange(n + 1, dtype=np.int64)
    return _doubles(np.tile(grid, n), filled, offsets)


def _seek(flat: FlatSeries, spec: Downsample, window: Window) -> FlatSeries:
    """Drop the points the downsampler never reads: before the first bucket boundary at or
    after the scan start, or for ``all`` outside ``[query_start, query_end)``."""
    if spec.run_all:
        low, high = window.query_start_ms, window.query_end_ms
    else:
        low, high = _seek_ms(spec, window), np.iinfo(np.int64).max
    heads = flat.offsets[:-1][flat.lengths > 0]
    tails = flat.offsets[1:][flat.lengths > 0] - 1
    if bool((flat.ts_ms[heads] >= low).all()) and bool((flat.ts_ms[tails] < high).all()):
        return flat
    return flat.with_mask((flat.ts_ms >= low) & (flat.ts_ms < high))


def downsample(flat: FlatSeries, spec: Downsample, window: Window,
               fill: str = "none") -> FlatSeries:
    """Downsample every series of ``flat`` (the points must lie inside the scan window)."""
    function = AGGREGATORS[spec.function]
    flat = _seek(flat, spec, window)
    if spec.run_all:
        buckets = np.full(len(flat.ts_ms), window.query_start_ms, dtype=np.int64)
    else:
        buckets = _bucket_starts(flat, spec, window.timezone)
    heads = np.empty(len(buckets), dtype=bool)
    if len(buckets):
        heads[0] = True
        np.not_equal(buckets[1:], buckets[:-1], out=heads[1:])
        heads[flat.offsets[:-1][flat.lengths > 0]] = True
    if heads.all() and function.of_one is not None:  # every point alone in its bucket
        out = _doubles(buckets, function.of_one(flat.values), flat.offsets)
    else:
        starts = np.flatnonzero(heads).astype(np.int64)
        lengths = np.diff(np.r_[starts, len(buckets)]).astype(np.int64)
        offsets = np.searchsorted(starts, flat.offsets, side="left").astype(np.int64)
        out = _doubles(buckets[starts], reduce_segments(flat.values, starts, lengths, function),
                       offsets)
    policy = FILL_POLICIES[fill]
    if policy.fills and not spec.run_all:
        out = apply_fill(out, fill_grid(spec, window), policy.value)
    return out
