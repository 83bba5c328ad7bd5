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

from collections.abc import Iterable, Iterator
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
from app.engine.flat import FlatSeries, constant_value, ranges_to_index
from app.engine.model import BoolArray, Float64Array, Int64Array
from app.query.limits import NO_DEADLINE, Deadline

CELLS_PER_BLOCK = 1 << 19


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


def merge(flat: FlatSeries, agg: Aggregator, *, rate: bool, end_ms: int,
          deadline: Deadline = NO_DEADLINE, index: int = 0) -> Merged:
    """Aggregate all series of ``flat`` (already in span order) into one.

    The (series x union) blocks are reduced one at a time as they are built, so memory
    follows one block, and ``deadline`` (for sub-query ``index``) is checked between blocks:
    a group of many misaligned series is series x timestamps of work.
    """
    rows = np.flatnonzero(flat.lengths >= (2 if rate else 1))
    if len(rows) == 0:
        return _empty()
    if len(rows) < flat.n_series:
        flat = flat.take(rows)
    aligned = _aligned(flat, rate, end_ms)
    blocks: Iterable[_Block]
    if aligned is not None:
        union, blocks = aligned
    else:
        emit = flat.ts_ms <= end_ms
        if rate:
            emit[flat.offsets[:-1]] = False
        union = _union(flat.ts_ms[emit])
        blocks = _checked(_general_blocks(flat, union, agg.interpolation, rate), deadline,
                          index)
    if len(union) == 0:
        return _empty()
    return _reduce(union, blocks, agg, rate)


def _checked(blocks: Iterator[_Block], deadline: Deadline, index: int) -> Iterator[_Block]:
    for block in blocks:
        deadline.check(index)
        yield block


def merge_each(flat: FlatSeries, agg: Aggregator, *, rate: bool,
               end_ms: int) -> tuple[Merged, Int64Array]:
    """``merge`` of every series on its own (groups of one, and ``none``), in one pass.

    Returns the results concatenated, with offsets as in ``FlatSeries``.
    """
    emit = flat.ts_ms <= end_ms
    if rate:
        emit[flat.offsets[:-1][flat.lengths > 0]] = False
    ints = np.zeros(len(flat.ts_ms), dtype=bool)
    all_doubles = constant_value(flat.is_float)  # downsampled series: all doubles, one view
    if not rate and not (all_doubles is not None and bool(all_doubles)):
        # isInteger: this point and the series' next one (if any) are integers.
        next_float = np.r_[flat.is_float[1:], False]
        next_float[flat.offsets[1:][flat.lengths > 0] - 1] = False
        ints = ~flat.is_float & ~next_float
    doubles = agg.run_double(flat.values[None, :], None)
    exact = np.zeros(len(doubles), dtype=np.int64)
    values = doubles
    if ints.any():
        exact = np.where(ints, agg.run_long(flat.longs[None, :], None), 0)
        values = np.where(ints, exact.astype(np.float64), doubles)
    if emit.all():  # every point is emitted: no copies
        return Merged(flat.ts_ms, values, ints, exact), flat.offsets
    kept_before = np.concatenate(([0], np.cumsum(emit))).astype(np.int64)
    merged = Merged(flat.ts_ms[emit], values[emit], ints[emit], exact[emit])
    return merged, kept_before[flat.offsets]


def _reduce(union: Int64Array, blocks: Iterable[_Block], agg: Aggregator,
            rate: bool) -> Merged:
    values, int_mask, longs = [], [], []
    for block in blocks:
        present = None if bool(block.active.all()) else block.active
        doubles = agg.run_double(block.values, present)
        ints = ~block.floats if not rate else np.zeros(len(doubles), dtype=bool)
        if block.longs is not None and ints.any():
            exact = agg.run_long(block.longs, present)
        else:
            exact = np.zeros(len(doubles), dtype=np.int64)
        values.append(np.where(ints, exact.astype(np.float64), doubles))
        int_mask.append(ints)
        longs.append(np.where(ints, exact, 0))
    return Merged(union, np.concatenate(values), np.concatenate(int_mask), np.concatenate(longs))


def _aligned(flat: FlatSeries, rate: bool, end_ms: int) -> tuple[Int64Array, list[_Block]] | None:
    """Fast path: every series has the very same timestamps, so nothing is interpolated."""
    n_rows, width = flat.n_series, int(flat.lengths[0])
    if not bool((flat.lengths == width).all()):
        return None
    ts = flat.ts_ms.reshape(n_rows, width)
    if n_rows > 1 and not bool((ts[1:] == ts[0]).all()):
        return None
    first = 1 if rate else 0
    cols = slice(first, int(np.searchsorted(ts[0], end_ms, side="right")))
    union = ts[0, cols]
    values = flat.values.reshape(n_rows, width)[:, cols]
    active = np.ones(values.shape, dtype=bool)
    if rate:
        return union, [_Block(values, active, np.ones(len(union), dtype=bool), None)]
    floats: BoolArray = np.asarray(flat.is_float.reshape(n_rows, width).any(axis=0))
    # A column is a double if any current (this column) or next (following column) value is.
    nxt = np.r_[floats[1:], False]
    col_floats = (floats | nxt)[cols]
    longs = flat.longs.reshape(n_rows, width)[:, cols]
    return union, [_Block(values, active, col_floats, longs)]


@dataclass
class _Source:
    """A group's points plus what every block needs from them."""

    flat: FlatSeries
    ts_f: Float64Array  # timestamps as doubles: exact, and so are their differences
    starts: Int64Array  # (series x 1)
    ends: Int64Array  # (series x 1)
    last_ts: Int64Array  # (series x 1)
    has_ints: bool
    has_floats: bool

    @classmethod
    def of(cls, flat: FlatSeries) -> _Source:
        return cls(flat, flat.ts_ms.astype(np.float64), flat.offsets[:-1][:, None],
                   flat.offsets[1:][:, None], flat.ts_ms[flat.offsets[1:] - 1][:, None],
                   not bool(flat.is_float.all()), bool(flat.is_float.any()))


def _union(ts: Int64Array) -> Int64Array:
    """Sorted distinct timestamps (a sort beats ``np.unique``'s hashing here)."""
    ordered = np.sort(ts)
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]] if len(ordered) else ordered


def _general_blocks(flat: FlatSeries, union: Int64Array, method: Interpolation,
                    rate: bool) -> Iterator[_Block]:
    """Blocks of the (series x union) matrix; ``current`` is each cell's latest point index."""
    src = _Source.of(flat)
    n_rows, n_cols = flat.n_series, len(union)
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
        carry = np.where(lo > flat.offsets[:-1], lo - 1, -1)
        index[:, 0] = np.maximum(index[:, 0], carry)
        current = np.maximum.accumulate(index, axis=1)
        x = union[c0:c1][None, :]
        if rate:
            yield _rate_block(src, current, x)
        else:
            yield _value_block(src, current, x, method)


def _rate_block(src: _Source, current: Int64Array, x: Int64Array) -> _Block:
    active = np.broadcast_to(x <= src.last_ts, current.shape)
    source = np.where(current >= 0, current, src.starts)
    values = np.where(active, src.flat.values[source], np.nan)
    return _Block(values, active, np.ones(current.shape[1], dtype=bool), None)


def _value_block(src: _Source, current: Int64Array, x: Int64Array,
                 method: Interpolation) -> _Block:
    """Values of every cell, computed densely (cheaper than masking when most cells of a
    misaligned group need interpolating); inactive cells end up NaN."""
    flat = src.flat
    started = current >= 0
    cur = np.maximum(current, 0)
    active = started & (x <= src.last_ts)
    exact = flat.ts_ms[cur] == x
    # Active cells that are not exact sit before their series' last point, so cur + 1 is
    # their next point; elsewhere ``nxt`` only has to be a valid index.
    nxt = np.minimum(cur + 1, len(flat.ts_ms) - 1)
    values = np.where(active, _fill_double(src, cur, nxt, x, exact, method), np.nan)
    if not src.has_ints:
        return _Block(values, active, np.ones(current.shape[1], dtype=bool), None)
    floats: BoolArray = np.zeros(current.shape[1], dtype=bool)
    if src.has_floats:
        following = np.where(started, current + 1, src.starts)
        has_next = following < src.ends
        next_float = has_next & flat.is_float[np.where(has_next, following, 0)]
        floats = np.asarray(((active & flat.is_float[cur]) | next_float).any(axis=0))
    longs = None
    if not bool(floats.all()):
        longs = np.where(active, _fill_long(src, cur, nxt, x, exact, method), 0)
    return _Block(values, active, floats, longs)


def _fill_double(src: _Source, cur: Int64Array, nxt: Int64Array, x: Int64Array,
                 exact: BoolArray, method: Interpolation) -> Float64Array:
    y0 = src.flat.values[cur]
    if method is Interpolation.PREV:
        return y0
    if method is Interpolation.LERP:
        # Java: y0 + (x - x0) * (y1 - y0) / (x1 - x0), the long differences made doubles.
        x0 = src.ts_f[cur]
        with np.errstate(all="ignore"):
            lerp = y0 + ((x.astype(np.float64) - x0) * (src.flat.values[nxt] - y0)) / (
                src.ts_f[nxt] - x0)
        return np.where(exact, y0, lerp)
    # MIN: Java writes Double.MIN_VALUE (the smallest positive double), which makes mimmax
    # return 4.9E-324 over negative series; the intended "lowest double" is used instead.
    fill = {Interpolation.ZIM: 0.0, Interpolation.MAX: DOUBLE_MAX,
            Interpolation.MIN: -DOUBLE_MAX}[method]
    return np.where(exact, y0, fill)


def _fill_long(src: _Source, cur: Int64Array, nxt: Int64Array, x: Int64Array,
               exact: BoolArray, method: Interpolation) -> Int64Array:
    y0 = src.flat.longs[cur]
    if method is Interpolation.PREV:
        return y0
    if method is Interpolation.LERP:
        x0 = src.flat.ts_ms[cur]
        with np.errstate(over="ignore"):
            lerp = y0 + java_trunc_div((x - x0) * (src.flat.longs[nxt] - y0),
                                       src.flat.ts_ms[nxt] - x0)
        return np.where(exact, y0, lerp)
    fill = {Interpolation.ZIM: 0, Interpolation.MAX: LONG_MAX, Interpolation.MIN: LONG_MIN}[method]
    return np.where(exact, y0, fill)
