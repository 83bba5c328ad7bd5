"""Per-second rates, as OpenTSDB 2.4's ``RateSpan``, for many series at once.

For consecutive points (t0, v0) -> (t1, v1): ``(v1 - v0) / ((t1 - t0) / 1000.0)``, the difference
taken in 64-bit integers when both values are integers. The first rate of a series is taken
against (t=0, v=0), the "time-zero" rate: the merge uses it as the series' value before its
second point but never emits its timestamp. Counter mode, when the difference is negative:
``dropResets`` drops that rate (the next one is measured from the dropped point, i.e. from the
point just before it, so only the rate disappears); otherwise the difference becomes
``counterMax - v0 + v1`` and, only on that path, a rate above a positive ``resetValue`` is 0.
"""

from __future__ import annotations

import numpy as np

from app.engine.flat import FlatSeries
from app.engine.model import Float64Array, Int64Array
from app.query.ast import RateOptions


def _previous(flat: FlatSeries) -> tuple[Int64Array, Float64Array, Int64Array, np.ndarray]:
    """Each point's predecessor in its series; the first point's is the integer (0, 0)."""
    prev_ts = np.empty_like(flat.ts_ms)
    prev_ts[1:] = flat.ts_ms[:-1]
    prev_val = np.empty_like(flat.values)
    prev_val[1:] = flat.values[:-1]
    prev_long = np.empty_like(flat.longs)
    prev_long[1:] = flat.longs[:-1]
    prev_float = np.empty_like(flat.is_float)
    prev_float[1:] = flat.is_float[:-1]
    heads = flat.offsets[:-1][flat.lengths > 0]
    prev_ts[heads], prev_val[heads], prev_long[heads], prev_float[heads] = 0, 0.0, 0, False
    return prev_ts, prev_val, prev_long, prev_float


def rate(flat: FlatSeries, options: RateOptions) -> FlatSeries:
    """Rates of every series; the output is all doubles and keeps the time-zero rate first."""
    if len(flat.ts_ms) == 0:
        return flat
    prev_ts, prev_val, prev_long, prev_float = _previous(flat)
    both_long = ~flat.is_float & ~prev_float
    with np.errstate(over="ignore", invalid="ignore"):
        # Java ignores overflow of the long difference; numpy int64 arithmetic wraps the same way.
        delta = np.where(both_long, (flat.longs - prev_long).astype(np.float64),
                         flat.values - prev_val)
        seconds = (flat.ts_ms - prev_ts).astype(np.float64) / 1000.0
        keep = np.ones(len(delta), dtype=bool)
        if options.counter:
            reset = delta < 0
            if options.drop_resets:
                keep = ~reset
            else:
                wrapped_long = (np.int64(options.counter_max) - prev_long) + flat.longs
                wrapped = np.where(both_long, wrapped_long.astype(np.float64),
                                   float(options.counter_max) - prev_val + flat.values)
                delta = np.where(reset, wrapped, delta)
        rates = delta / seconds
        if options.counter and not options.drop_resets and options.reset_value > 0:
            rates = np.where(reset & (rates > options.reset_value), 0.0, rates)
    out = FlatSeries(flat.ts_ms, rates, np.zeros(len(rates), dtype=np.int64),
                     np.ones(len(rates), dtype=bool), flat.offsets)
    return out if bool(keep.all()) else out.with_mask(keep)
