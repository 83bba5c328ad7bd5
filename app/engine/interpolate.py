"""Merging a group's series into one, as OpenTSDB 2.4's ``AggregationIterator``.

Output timestamps are the union of the series' timestamps (up to ``end_ms``). At a timestamp
``x`` a series takes part only while it is *active*: from its first point to its last, never
extrapolated. An active series without a point at ``x`` contributes, by the aggregator's
interpolation: LERP between its neighbours (Java long arithmetic, truncating, when every value
involved is an integer), ZIM 0, MAX/MIN the type's extreme, PREV its previous value. Rows are
visited in span order, which decides ``first``, ``last``, ``diff`` and rounding.

Rate mode (``RateSpan`` inputs): no interpolation; a series contributes its latest rate, and
before its second point its time-zero rate, from the first emitted timestamp to its last point.
Its first point's timestamp is never emitted.

A point prints as an integer (``isInteger``) when not in rate mode and no series' current or
next value is a double. Work is done in column blocks of a (series x timestamps) matrix.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from app.engine.aggregators import (
    DOUBLE_MAX,
    LONG_MAX,
    LONG_MIN,
    Aggregator,
    Interpolation,
    java_trunc_div,
)
from app.engine.flat import FlatSeries, ranges_to_index
from app.engine.model import BoolArray, Float64Array, Int64Array
from app.errors import TsdbError

CELLS_PER_BLOCK = 1 << 21


@dataclass
class Merged:
    ts_ms: Int64Array
    values: Float64Array
    int_mask: BoolArray
    longs: Int64Array


@dataclass
class _Block:
    """One block of columns: matrices are (series x columns)."""

    values: Float64Array
    active: BoolArray
    floats: BoolArray  # per column: some current or next value is a double
    longs: Int64Array | None


def _empty() -> Merged:
    return Merged(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=bool),
                  np.zeros(0, dtype=np.int64))


def merge(flat: FlatSeries, agg: Aggregator, *, rate: bool, end_ms: int) -> Merged:
    """Aggregate all series of ``flat`` (already in span order) into one."""
    lengths = flat.lengths
    rows = np.flatnonzero(lengths >= (2 if rate else 1))
    if len(rows) == 0:
        return _empty()
    if len(rows) < flat.n_series:
        flat = flat.take(rows)
    emit = flat.ts_ms <= end_ms
    if rate:
        emit[flat.offsets[:-1]] = False
    union = np.unique(flat.ts_ms[emit])
    if len(union) == 0:
        return _empty()
    blocks = _aligned(flat, rate, len(union))
    if blocks is None:
        blocks = list(_general_blocks(flat, union, agg.interpolation, rate))
    return _reduce(union, blocks, agg, rate)


def _reduce(union: Int64Array, blocks: list[_Block], agg: Aggregator, rate: bool) -> Merged:
    values, int_mask, longs = [], [], []
    for block in blocks:
        present = None if bool(block.active.all()) else block.active
        doubles = agg.run_double(block.values, present)
        ints = ~block.floats if not rate else np.zeros(len(doubles), dtype=bool)
        if block.longs is not None and ints.any():
            exact = agg.run_long(block.longs, present)
        else:
            exact = np.zeros(len(doubles), dtype=np.int64)
        if np.isinf(doubles[~ints]).any():
            raise TsdbError(f"Got Infinity: aggregating with {agg.name} overflowed a double")
        values.append(np.where(ints, exact.astype(np.float64), doubles))
        int_mask.append(ints)
        longs.append(np.where(ints, exact, 0))
    return Merged(union, np.concatenate(values), np.concatenate(int_mask), np.concatenate(longs))


def _aligned(flat: FlatSeries, rate: bool, n_union: int) -> list[_Block] | None:
    """Fast path: every series has the very same timestamps, so nothing is interpolated."""
    n_rows, width = flat.n_series, int(flat.lengths[0])
    if not bool((flat.lengths == width).all()):
        return None
    ts = flat.ts_ms.reshape(n_rows, width)
    if not bool((ts == ts[0]).all()):
        return None
    first = 1 if rate else 0
    cols = slice(first, first + n_union)
    values = flat.values.reshape(n_rows, width)[:, cols]
    active = np.ones(values.shape, dtype=bool)
    if rate:
        return [_Block(values, active, np.ones(n_union, dtype=bool), None)]
    floats: BoolArray = np.asarray(flat.is_float.reshape(n_rows, width).any(axis=0))
    # A column is a double if any current (this column) or next (following column) value is.
    nxt = np.r_[floats[1:], False]
    col_floats = (floats | nxt)[cols]
    return [_Block(values, active, col_floats, flat.longs.reshape(n_rows, width)[:, cols])]


def _general_blocks(flat: FlatSeries, union: Int64Array, method: Interpolation,
                    rate: bool) -> Iterator[_Block]:
    """Blocks of the (series x union) matrix; ``current`` is each cell's latest point index."""
    n_rows, n_cols = flat.n_series, len(union)
    starts, ends = flat.offsets[:-1], flat.offsets[1:]
    row_of = flat.series_ids()
    pos = np.searchsorted(union, flat.ts_ms, side="left")
    stride = n_cols + 1
    cell = row_of * stride + pos
    width = max(1, CELLS_PER_BLOCK // n_rows)
    row_base = np.arange(n_rows, dtype=np.int64) * stride
    for c0 in range(0, n_cols, width):
        c1 = min(n_cols, c0 + width)
        lo = np.searchsorted(cell, row_base + c0, side="left")
        hi = np.searchsorted(cell, row_base + c1, side="left")
        index = np.full((n_rows, c1 - c0), -1, dtype=np.int64)
        idx = ranges_to_index(lo, hi - lo)
        if len(idx):
            # Several points can land in one cell only in rate mode (a time-zero rate that is
            # not an output timestamp); the latest one is the current value.
            last = np.r_[cell[idx][1:] != cell[idx][:-1], True]
            idx = idx[last]
            index[row_of[idx], pos[idx] - c0] = idx
        carry = np.where(lo > starts, lo - 1, -1)
        index[:, 0] = np.maximum(index[:, 0], carry)
        current = np.maximum.accumulate(index, axis=1)
        x = union[c0:c1][None, :]
        if rate:
            yield _rate_block(flat, current, x, starts, ends)
        else:
            yield _value_block(flat, current, x, starts, ends, method)


def _rate_block(flat: FlatSeries, current: Int64Array, x: Int64Array, starts: Int64Array,
                ends: Int64Array) -> _Block:
    last_ts = flat.ts_ms[ends - 1][:, None]
    active = np.broadcast_to(x <= last_ts, current.shape)
    source = np.where(current >= 0, current, starts[:, None])
    values = np.where(active, flat.values[source], np.nan)
    return _Block(values, active, np.ones(current.shape[1], dtype=bool), None)


def _value_block(flat: FlatSeries, current: Int64Array, x: Int64Array, starts: Int64Array,
                 ends: Int64Array, method: Interpolation) -> _Block:
    started = current >= 0
    cur = np.where(started, current, 0)
    last_ts = flat.ts_ms[ends - 1][:, None]
    active = started & (x <= last_ts)
    exact = active & (flat.ts_ms[cur] == x)
    missing = active & ~exact
    values = np.where(exact, flat.values[cur], np.nan)
    cur_float = active & flat.is_float[cur]
    nxt = np.where(started, current + 1, starts[:, None])
    has_next = nxt < ends[:, None]
    next_float = has_next & flat.is_float[np.where(has_next, nxt, 0)]
    floats: BoolArray = np.asarray((cur_float | next_float).any(axis=0))
    longs = None
    if not bool(floats.all()):
        longs = np.where(exact, flat.longs[cur], 0)
    if missing.any():
        at = cur[missing]
        xs = np.broadcast_to(x, current.shape)[missing]
        values[missing] = _fill_double(flat, at, xs, method)
        if longs is not None:
            longs[missing] = _fill_long(flat, at, xs, method)
    return _Block(values, active, floats, longs)


def _fill_double(flat: FlatSeries, at: Int64Array, x: Int64Array,
                 method: Interpolation) -> Float64Array:
    y0 = flat.values[at]
    if method is Interpolation.LERP:
        y1, x0, x1 = flat.values[at + 1], flat.ts_ms[at], flat.ts_ms[at + 1]
        return y0 + ((x - x0).astype(np.float64) * (y1 - y0)) / (x1 - x0).astype(np.float64)
    if method is Interpolation.PREV:
        return y0
    # MIN: Java writes Double.MIN_VALUE (the smallest positive double), which makes mimmax
    # return 4.9E-324 over negative series; the intended "lowest double" is used instead.
    fill = {Interpolation.ZIM: 0.0, Interpolation.MAX: DOUBLE_MAX,
            Interpolation.MIN: -DOUBLE_MAX}[method]
    return np.full(len(at), fill)


def _fill_long(flat: FlatSeries, at: Int64Array, x: Int64Array,
               method: Interpolation) -> Int64Array:
    y0 = flat.longs[at]
    if method is Interpolation.LERP:
        y1, x0, x1 = flat.longs[at + 1], flat.ts_ms[at], flat.ts_ms[at + 1]
        with np.errstate(over="ignore"):
            return y0 + java_trunc_div((x - x0) * (y1 - y0), x1 - x0)
    if method is Interpolation.PREV:
        return y0
    fill = {Interpolation.ZIM: 0, Interpolation.MAX: LONG_MAX, Interpolation.MIN: LONG_MIN}[method]
    return np.full(len(at), fill, dtype=np.int64)
