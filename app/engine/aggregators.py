"""OpenTSDB 2.4's aggregators (``src/core/Aggregators.java``), vectorised.

Each aggregator reduces a 2-D array column by column: rows are the inputs in OpenTSDB's visiting
order (series in span order when merging series; points in time order when downsampling), columns
are output points. Two flavours mirror Java's ``runDouble`` and ``runLong``:

* ``run_double(values, present)``: ``values`` is float64 with NaN wherever there is no value;
  ``present`` (same shape) is False where a row has no value at all (an inactive series), or None
  when every cell is a value. The distinction matters only to aggregators that do not skip NaN
  (``mult``, ``first``, ``last``, ``diff``, ``none``): with fill policy ``nan`` a NaN is a value.
* ``run_long(values, present)``: int64, 64-bit wrap-around and Java's truncating division.

``interpolation`` says how the merge fills a series that has no point at a timestamp.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.engine.model import BoolArray, Float64Array, Int64Array
from app.errors import TsdbError

LONG_MAX = np.iinfo(np.int64).max
LONG_MIN = np.iinfo(np.int64).min
DOUBLE_MAX = float(np.finfo(np.float64).max)

DoubleReducer = Callable[[Float64Array, "BoolArray | None"], Float64Array]
LongReducer = Callable[[Int64Array, "BoolArray | None"], Int64Array]


class Interpolation(enum.Enum):
    """What a series adds where it has no point (``Aggregators.Interpolation``)."""

    LERP = "lerp"  # linear interpolation between its neighbours
    ZIM = "zim"  # zero if missing
    MAX = "max"  # the type's largest value (so min ignores it)
    MIN = "min"  # the type's smallest value (so max ignores it)
    PREV = "prev"  # its previous value


class IllegalDataError(TsdbError):
    """OpenTSDB's IllegalDataException, e.g. ``none`` handed more than one value."""


@dataclass(frozen=True)
class Aggregator:
    name: str
    interpolation: Interpolation
    run_double: DoubleReducer
    run_long: LongReducer
    # What ``run_double`` makes of one value, elementwise (None: nothing this simple): a
    # downsample whose every bucket holds one point (a rollup read) then reduces nothing.
    of_one: Callable[[Float64Array], Float64Array] | None = None


# --------------------------------------------------------------------------- helpers


def java_trunc_div(num: Int64Array, den: Int64Array) -> Int64Array:
    """Java ``long / long``: truncates toward zero (numpy's ``//`` floors)."""
    den = np.where(den == 0, 1, den)
    quot = num // den
    fix = (num % den != 0) & ((num < 0) != (den < 0))
    return quot + fix


def java_d2l(values: Float64Array) -> Int64Array:
    """Java's ``(long) double``: truncate, NaN to 0, saturate at the long range."""
    clean = np.where(np.isnan(values), 0.0, np.trunc(values))
    fits = (clean >= -(2.0**63)) & (clean < 2.0**63)
    out = np.where(clean > 0, LONG_MAX, LONG_MIN).astype(np.int64)
    out[fits] = clean[fits].astype(np.int64)
    return out


def _mask(values: np.ndarray, present: BoolArray | None) -> BoolArray:
    return np.ones(values.shape, dtype=bool) if present is None else present


def _value_mask(values: Float64Array, present: BoolArray | None) -> BoolArray:
    """Cells holding a non-NaN value."""
    ok = ~np.isnan(values)
    return ok if present is None else ok & present


def _first_row(mask: BoolArray) -> Int64Array:
    return np.argmax(mask, axis=0).astype(np.int64)


def _last_row(mask: BoolArray) -> Int64Array:
    return (mask.shape[0] - 1 - np.argmax(mask[::-1], axis=0)).astype(np.int64)


def _pick(values: np.ndarray, rows: Int64Array) -> np.ndarray:
    return np.take_along_axis(values, rows[None, :], axis=0)[0]


def _in_row_order(ufunc: np.ufunc, values: np.ndarray) -> np.ndarray:
    """Reduce down the rows strictly in row order, like Java's loop.

    numpy's axis-0 reduce of a C-contiguous array with several columns adds whole rows one
    after another, but along a contiguous axis (one column, a transposed view) it switches to
    pairwise summation, which changes the last bits. A loop over row views, or ``accumulate``
    (sequential by definition), covers those layouts.
    """
    if values.shape[0] == 0:
        return ufunc.reduce(values, axis=0)
    if values.flags.c_contiguous and values.ndim == 2 and values.shape[1] >= 2:
        return ufunc.reduce(values, axis=0)
    if values.shape[0] <= 16:  # a few rows (points per bucket): add row views, no copy
        out = np.array(values[0], copy=True)
        for row in values[1:]:
            ufunc(out, row, out=out)
        return out
    return ufunc.accumulate(values, axis=0)[-1]


def _seq_sum(values: np.ndarray) -> np.ndarray:
    return _in_row_order(np.add, values)


# --------------------------------------------------------------------------- double flavour


def _nan_skipping_sum(values: Float64Array) -> tuple[Float64Array, Int64Array]:
    """Java's ``result = 0.; for v: if (!isNaN(v)) result += v`` per column, and the count."""
    nan = np.isnan(values)
    if not nan.any():  # the common case: skip the masking passes
        return _seq_sum(values) + 0.0, np.full(values.shape[1], values.shape[0], np.int64)
    total = _seq_sum(np.where(nan, 0.0, values)) + 0.0
    return total, values.shape[0] - np.count_nonzero(nan, axis=0)


def _sum_d(values: Float64Array, present: BoolArray | None) -> Float64Array:
    total, count = _nan_skipping_sum(values)
    return np.where(count > 0, total, np.nan)


def _square_sum_d(values: Float64Array, present: BoolArray | None) -> Float64Array:
    total, count = _nan_skipping_sum(values * values)
    return np.where(count > 0, total, np.nan)


def _min_d(values: Float64Array, present: BoolArray | None) -> Float64Array:
    return np.fmin.reduce(values, axis=0)


def _max_d(values: Float64Array, present: BoolArray | None) -> Float64Array:
    return np.fmax.reduce(values, axis=0)


def _avg_d(values: Float64Array, present: BoolArray | None) -> Float64Array:
    total, count = _nan_skipping_sum(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / count, np.nan)


def _count_d(values: Float64Array, present: BoolArray | None) -> Float64Array:
    return (values.shape[0] - np.count_nonzero(np.isnan(values), axis=0)).astype(np.float64)


def _median_d(values: Float64Array, present: BoolArray | None) -> Float64Array:
    count = (~np.isnan(values)).sum(axis=0)
    ordered = np.sort(values, axis=0)  # NaN sorts last
    picked = _pick(ordered, np.minimum(count // 2, values.shape[0] - 1))
    return np.where(count > 0, picked, np.nan)


def _welford(values: Float64Array, ok: BoolArray) -> tuple[Float64Array, Float64Array]:
    """Per-column count and M2 by Welford's update in row order (``StdDev``)."""
    cols = values.shape[1]
    count = np.zeros(cols)
    mean = np.zeros(cols)
    m2 = np.zeros(cols)
    for row, use in zip(values, ok, strict=True):
        first = use & (count == 0)
        mean = np.where(first, row, mean)
        later = use & ~first
        n = count + 1.0
        with np.errstate(invalid="ignore"):
            new_mean = mean + (row - mean) / n
            m2 = np.where(later, m2 + (row - mean) * (row - new_mean), m2)
        mean = np.where(later, new_mean, mean)
        count = count + use
    return count, m2


def _dev_d(values: Float64Array, present: BoolArray | None) -> Float64Array:
    count, m2 = _welford(values, ~np.isnan(values))
    with np.errstate(invalid="ignore", divide="ignore"):
        dev = np.sqrt(m2 / count)
    return np.where(count == 0, np.nan, np.where(count == 1, 0.0, dev))


def _diff_d(values: Float64Array, present: BoolArray | None) -> Float64Array:
    # First non-NaN value, then the very last value present (NaN included), as ``Diff``.
    has = _value_mask(values, present)
    pres = _mask(values, present)
    first = _first_row(has)
    last = _last_row(pres)
    delta = _pick(values, last) - _pick(values, first)
    return np.where(~has.any(axis=0), np.nan, np.where(last > first, delta, 0.0))


def _mult_d(values: Float64Array, present: BoolArray | None) -> Float64Array:
    padded = values if present is None else np.where(present, values, 1.0)
    return _in_row_order(np.multiply, padded)


def _first_d(values: Float64Array, present: BoolArray | None) -> Float64Array:
    return _pick(values, _first_row(_mask(values, present)))


def _last_d(values: Float64Array, present: BoolArray | None) -> Float64Array:
    return _pick(values, _last_row(_mask(values, present)))


def _none_d(values: Float64Array, present: BoolArray | None) -> Float64Array:
    if _mask(values, present).sum(axis=0).max(initial=0) > 1:
        raise IllegalDataError("More than one value in aggregator none")
    return _first_d(values, present)


# --------------------------------------------------------------------------- long flavour


def _sum_l(values: Int64Array, present: BoolArray | None) -> Int64Array:
    padded = values if present is None else np.where(present, values, 0)
    return _seq_sum(padded)


def _square_sum_l(values: Int64Array, present: BoolArray | None) -> Int64Array:
    return _sum_l(values * values, present)


def _min_l(values: Int64Array, present: BoolArray | None) -> Int64Array:
    padded = values if present is None else np.where(present, values, LONG_MAX)
    return np.min(padded, axis=0)


def _max_l(values: Int64Array, present: BoolArray | None) -> Int64Array:
    padded = values if present is None else np.where(present, values, LONG_MIN)
    return np.max(padded, axis=0)


def _avg_l(values: Int64Array, present: BoolArray | None) -> Int64Array:
    count = _mask(values, present).sum(axis=0).astype(np.int64)
    return java_trunc_div(_sum_l(values, present), count)


def _count_l(values: Int64Array, present: BoolArray | None) -> Int64Array:
    return _mask(values, present).sum(axis=0).astype(np.int64)


def _median_l(values: Int64Array, present: BoolArray | None) -> Int64Array:
    count = _count_l(values, present)
    padded = values if present is None else np.where(present, values, LONG_MAX)
    return _pick(np.sort(padded, axis=0), count // 2)


def _dev_l(values: Int64Array, present: BoolArray | None) -> Int64Array:
    count, m2 = _welford(values.astype(np.float64), _mask(values, present))
    with np.errstate(invalid="ignore", divide="ignore"):
        dev = np.sqrt(m2 / count)
    return np.where(count <= 1, 0, java_d2l(dev))


def _diff_l(values: Int64Array, present: BoolArray | None) -> Int64Array:
    pres = _mask(values, present)
    return _pick(values, _last_row(pres)) - _pick(values, _first_row(pres))


def _mult_l(values: Int64Array, present: BoolArray | None) -> Int64Array:
    padded = values if present is None else np.where(present, values, 1)
    return _in_row_order(np.multiply, padded)


def _first_l(values: Int64Array, present: BoolArray | None) -> Int64Array:
    return _pick(values, _first_row(_mask(values, present)))


def _last_l(values: Int64Array, present: BoolArray | None) -> Int64Array:
    return _pick(values, _last_row(_mask(values, present)))


def _none_l(values: Int64Array, present: BoolArray | None) -> Int64Array:
    if _mask(values, present).sum(axis=0).max(initial=0) > 1:
        raise IllegalDataError("More than one value in aggregator none")
    return _first_l(values, present)


# --------------------------------------------------------------------------- percentiles


class Estimation(enum.Enum):
    """commons-math3 ``Percentile.EstimationType`` variants OpenTSDB uses."""

    LEGACY = "legacy"
    R_3 = "r3"
    R_7 = "r7"


def _percentile_pos(p: float, n: Int64Array, estimation: Estimation) -> Float64Array:
    """``EstimationType#index`` (1-based position) for quantile ``p`` in (0, 1)."""
    nf = n.astype(np.float64)
    if estimation is Estimation.R_3:
        with np.errstate(divide="ignore"):
            min_limit = 1.0 / 2 / nf
        return np.where(p <= min_limit, 0.0, np.rint(nf * p))
    if estimation is Estimation.R_7:
        return 1.0 + (nf - 1.0) * p
    return p * (nf + 1.0)


def percentile(values: Float64Array, quantile: float, estimation: Estimation) -> Float64Array:
    """commons-math3 ``Percentile(quantile).evaluate()`` per column, NaN cells dropped."""
    n = (~np.isnan(values)).sum(axis=0).astype(np.int64)
    ordered = np.sort(values, axis=0)
    pos = _percentile_pos(quantile / 100.0, n, estimation)
    fpos = np.floor(pos)
    last = np.maximum(n - 1, 0)
    upper_row = np.clip(fpos.astype(np.int64), 0, last)
    lower_row = np.clip(upper_row - 1, 0, last)
    lower = _pick(ordered, lower_row)
    upper = _pick(ordered, upper_row)
    with np.errstate(invalid="ignore"):
        mid = lower + (pos - fpos) * (upper - lower)
    out = np.where(pos < 1, ordered[0], np.where(pos >= n, _pick(ordered, last), mid))
    return np.where(n == 0, np.nan, out)


def _percentile_agg(name: str, quantile: float, estimation: Estimation) -> Aggregator:
    def run_double(values: Float64Array, present: BoolArray | None) -> Float64Array:
        # PercentileAgg#runDouble builds ``new Percentile(p)``: the estimation type is ignored.
        return percentile(values, quantile, Estimation.LEGACY)

    def run_long(values: Int64Array, present: BoolArray | None) -> Int64Array:
        as_double = values.astype(np.float64)
        if present is not None:
            as_double = np.where(present, as_double, np.nan)
        return java_d2l(percentile(as_double, quantile, estimation))

    return Aggregator(name, Interpolation.LERP, run_double, run_long)


# --------------------------------------------------------------------------- registry


def _agg(name: str, interp: Interpolation, run_d: DoubleReducer, run_l: LongReducer) -> Aggregator:
    return Aggregator(name, interp, run_d, run_l, _OF_ONE.get(name))


def _itself(values: Float64Array) -> Float64Array:
    return values


def _plus_zero(values: Float64Array) -> Float64Array:
    """A sum starts at 0.0, so one -0.0 sums to 0.0 (Java's ``0.0 + -0.0``)."""
    return values + 0.0


_OF_ONE = {**dict.fromkeys(["sum", "pfsum", "zimsum", "avg"], _plus_zero),
           **dict.fromkeys(["min", "max", "mimmin", "mimmax", "median", "first", "last"],
                           _itself)}


_L, _Z = Interpolation.LERP, Interpolation.ZIM
_BASIC = [
    _agg("sum", _L, _sum_d, _sum_l),
    _agg("pfsum", Interpolation.PREV, _sum_d, _sum_l),
    _agg("zimsum", _Z, _sum_d, _sum_l),
    _agg("min", _L, _min_d, _min_l),
    _agg("max", _L, _max_d, _max_l),
    _agg("mimmin", Interpolation.MAX, _min_d, _min_l),
    _agg("mimmax", Interpolation.MIN, _max_d, _max_l),
    _agg("avg", _L, _avg_d, _avg_l),
    _agg("median", _L, _median_d, _median_l),
    _agg("none", _Z, _none_d, _none_l),
    _agg("mult", _L, _mult_d, _mult_l),
    _agg("dev", _L, _dev_d, _dev_l),
    _agg("diff", _L, _diff_d, _diff_l),
    _agg("count", _Z, _count_d, _count_l),
    _agg("first", _Z, _first_d, _first_l),
    _agg("last", _Z, _last_d, _last_l),
    _agg("squareSum", _Z, _square_sum_d, _square_sum_l),
]

_QUANTILES = {"999": 99.9, "99": 99.0, "95": 95.0, "90": 90.0, "75": 75.0, "50": 50.0}
_PERCENTILES = (
    [_percentile_agg(f"p{k}", q, Estimation.LEGACY) for k, q in _QUANTILES.items()]
    + [_percentile_agg(f"ep{k}r3", q, Estimation.R_3) for k, q in _QUANTILES.items()]
    + [_percentile_agg(f"ep{k}r7", q, Estimation.R_7) for k, q in _QUANTILES.items()]
)

AGGREGATORS: dict[str, Aggregator] = {agg.name: agg for agg in _BASIC + _PERCENTILES}
"""Every name OpenTSDB 2.4's ``/api/aggregators`` lists (35), exact case (``squareSum``)."""
