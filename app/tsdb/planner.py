"""The query planner: answer a downsampled sub-query from rollup tables where that is exact.

2.4's ``TsdbQuery#transformDownSamplerToRollupQuery``: with rollups enabled, a downsample
whose interval is a multiple of a rollup interval reads the coarsest such rollup table
instead of raw rows (``RollupConfig#getRollupInterval``); ``rollupUsage`` says what happens
when that table has nothing (``ROLLUP_NOFALLBACK``, the default: nothing;
``ROLLUP_FALLBACK``: the next finer rollup, then raw; ``ROLLUP_FALLBACK_RAW``: raw) and
``ROLLUP_RAW`` skips rollups.

pytsd departs from 2.4 to stay exact: rollups answer only downsamples they answer exactly
(``avg`` = sum of sums / sum of counts, ``sum``, ``min``, ``max`` and their ``zim``/``mim``
twins, epoch-aligned, not calendar, not ``all``), each downsample bucket is first combined
from the rollup intervals it holds (so the engine sees one point per bucket) and the buckets
after the *rollup horizon* (the open hour, plus ``tsd.rollups.compute.lag_s``) are read from
raw rows. Anything else reads raw data, as with rollups off.

When pytsd computes the rollups (``tsd.rollups.compute.background``) the rollup tables answer
only the buckets whose hours the coverage record (``rollup_coverage``) says are rolled and
unchanged since; the other buckets are read raw (:func:`covered_read`), whatever the usage but
an explicit ``ROLLUP_NOFALLBACK`` (docs/rollups.md, "Coverage").
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from app.engine.execute import scan_bounds_ms
from app.engine.model import Series
from app.query.ast import Downsample, SubQuery
from app.tsdb.read.keys import scan_hours_s
from app.tsdb.read.rows import RowReader
from app.tsdb.read.series import read_rows
from app.tsdb.rollup_config import RollupConfig, RollupInterval
from app.tsdb.rollup_coverage import coverage_mode, hour_local
from app.tsdb.rollup_reader import PreAggregateReader, RollupReader

DEFAULT_USAGE = "ROLLUP_NOFALLBACK"
# Downsample function -> (rollup aggregate read, how buckets combine).
EXACT: dict[str, tuple[str, str]] = {
    "avg": ("sum", "avg"), "sum": ("sum", "sum"), "zimsum": ("sum", "sum"),
    "min": ("min", "min"), "mimmin": ("min", "min"), "max": ("max", "max"),
    "mimmax": ("max", "max"),
}
HOUR_S = 3600


def rollup_horizon_ms(lag_s: int, now_s: float | None = None) -> int:
    """Before this instant every hour is closed and rolled up: the current hour's start,
    less the configured lag rounded up to whole hours."""
    now = int(time.time() if now_s is None else now_s)
    return (now - lag_s - (now - lag_s) % HOUR_S) * 1000


def candidates(config: RollupConfig, spec: Downsample | None, usage: str,
               tracked_only: bool = False) -> list[RollupInterval]:
    """Rollup intervals to try, coarsest first; empty when the raw path must answer.
    ``tracked_only``: only intervals the coverage record tracks (pytsd computes them)."""
    if (spec is None or spec.run_all or spec.calendar or spec.interval_ms <= 0
            or usage == "ROLLUP_RAW" or spec.function.lower() not in EXACT):
        return []
    found = config.best_matches(spec.interval_ms)
    if tracked_only:
        found = [i for i in found if i.default_interval or hour_local(i)]
    if not found or found[0].default_interval:
        return []  # the best match is the raw table itself
    usable = [i for i in found if not i.default_interval and _epoch_aligned(i)]
    if usage == "ROLLUP_FALLBACK":
        return usable
    return usable[:1] if usable and usable[0] is found[0] else []


def _epoch_aligned(interval: RollupInterval) -> bool:
    """Its intervals start at multiples of its length, as downsample buckets do (so each
    bucket is a union of whole intervals): fixed row spans that the length divides."""
    return interval.units in ("h", "d") and interval.row_span_s % interval.interval_s == 0


def planned_read(reader: RowReader, sub: SubQuery, start_ms: int,
                 end_ms: int) -> list[Series] | None:
    """The sub-query's series from rollups (+ raw after the horizon), or None for raw only."""
    config = reader.tsdb.rollup_config
    if config is None:
        return None
    if sub.pre_aggregate or _filters_pre_aggregate(sub, reader.tsdb.config):
        return _pre_aggregated(reader, config, sub, start_ms, end_ms)
    usage = sub.rollup_usage or DEFAULT_USAGE
    spec = sub.downsample
    covered = coverage_mode(reader.tsdb)
    tried = candidates(config, spec, usage, tracked_only=covered)
    if spec is None or not tried:
        return None
    scan_start_ms, scan_end_ms = scan_bounds_ms(start_ms, end_ms, spec)
    step_ms = spec.interval_ms
    first_ms = -(-scan_start_ms // step_ms) * step_ms
    horizon_ms = rollup_horizon_ms(reader.tsdb.config["tsd.rollups.compute.lag_s"])
    split_ms = min(scan_end_ms, horizon_ms) // step_ms * step_ms
    if split_ms <= first_ms:
        return None
    if covered:
        window = (first_ms, split_ms, scan_end_ms)
        if sub.rollup_usage != "ROLLUP_NOFALLBACK":
            return covered_read(reader, sub, tried[0], window)
        reader.stats.hours_not_rolled += int((~_hours_rolled(reader, tried[0], window)[0]).sum())
    rolled = _read_rollups(reader, sub, tried, first_ms, split_ms, pre_aggregate=False)
    if not rolled and usage != "ROLLUP_NOFALLBACK":
        return None
    raw: list[Series] = []
    if split_ms < scan_end_ms:
        first_s = split_ms // 1000 - (split_ms // 1000) % HOUR_S
        last_s = (scan_end_ms - 1) // 1000
        raw = read_rows(reader, sub, first_s, last_s - last_s % HOUR_S)
    return merge_series(rolled, raw, split_ms)


def _read_rollups(reader: RowReader, sub: SubQuery, tried: list[RollupInterval],
                  first_ms: int, end_ms: int, *, pre_aggregate: bool) -> list[Series]:
    """Buckets in ``[first_ms, end_ms)`` from the first of ``tried`` that has any."""
    assert sub.downsample is not None
    exact = EXACT[sub.downsample.function.lower()]
    rolled: list[Series] = []
    for interval in tried:
        table = interval.pre_aggregation_table if pre_aggregate else interval.table
        rollup_reader = RollupReader(reader, interval, exact, sub.downsample.interval_ms, table)
        rolled = rollup_reader.read_between(sub, first_ms, end_ms)
        reader.stats.rows += rollup_reader.stats.rows
        reader.stats.points += rollup_reader.stats.points
        if rolled:
            break
    return rolled


def _filters_pre_aggregate(sub: SubQuery, settings: Mapping[str, Any]) -> bool:
    """2.4 reads pre-aggregates when a literal filter on ``tsd.rollups.agg_tag_key`` asks
    for another value than ``tsd.rollups.raw_agg_tag_value``."""
    key, raw = settings["tsd.rollups.agg_tag_key"], settings["tsd.rollups.raw_agg_tag_value"]
    return any(f.type == "literal_or" and f.tagk == key and f.filter != raw
               for f in sub.filters)


def _pre_aggregated(reader: RowReader, config: RollupConfig, sub: SubQuery,
                    start_ms: int, end_ms: int) -> list[Series]:
    """A pre-aggregate query: the rollup interval's pre-aggregate table when the downsample
    has one, else the default interval's (raw layout). Written by clients only (``/api/rollup``
    with ``groupByAggregator``), so there is no horizon and no raw tail."""
    usage = sub.rollup_usage or DEFAULT_USAGE
    spec = sub.downsample
    tried = candidates(config, spec, usage)
    if spec is not None and tried:
        scan_start_ms, scan_end_ms = scan_bounds_ms(start_ms, end_ms, spec)
        step_ms = spec.interval_ms
        first_ms = -(-scan_start_ms // step_ms) * step_ms
        rolled = _read_rollups(reader, sub, tried, first_ms, scan_end_ms // step_ms * step_ms,
                               pre_aggregate=True)
        if rolled or usage == "ROLLUP_NOFALLBACK":
            return rolled
    first_s, last_s = scan_hours_s(start_ms, end_ms, spec)
    pre = PreAggregateReader(reader, config.default_interval.pre_aggregation_table)
    series = read_rows(pre, sub, first_s, last_s)
    reader.stats.rows += pre.stats.rows
    reader.stats.points += pre.stats.points
    return series


def merge_series(rolled: list[Series], raw: list[Series], split_ms: int) -> list[Series]:
    """Each series' rollup buckets followed by its raw points from ``split_ms`` on."""
    merged = {s.row_order or s.tsuid.encode(): s for s in rolled}
    for series in raw:
        keep = series.ts_ms >= split_ms
        key = series.row_order or series.tsuid.encode()
        head = merged.get(key)
        if head is None:
            series.ts_ms, series.values = series.ts_ms[keep], series.values[keep]
            series.is_int = series.is_int[keep]
            if series.long_values is not None:
                series.long_values = series.long_values[keep]
            merged[key] = series
            continue
        head.ts_ms = np.concatenate((head.ts_ms, series.ts_ms[keep]))
        head.values = np.concatenate((head.values, series.values[keep]))
        head.is_int = np.concatenate((head.is_int, series.is_int[keep]))
        if series.long_values is not None:
            head.long_values = np.concatenate((np.zeros(head.ts_ms.size - int(keep.sum()),
                                                        np.int64), series.long_values[keep]))
        head.annotations = head.annotations + series.annotations
    return [merged[key] for key in sorted(merged)]


# --- coverage: rollups only for hours rolled from the raw rows as they are -------------------

Window = tuple[int, int, int]
"""``(first_ms, split_ms, scan_end_ms)``: rollup buckets from ``first_ms`` to the horizon
``split_ms``, raw rows after it."""


def _hours_rolled(reader: RowReader, interval: RollupInterval,
                  window: Window) -> tuple[np.ndarray, int]:
    """Whether each hour of ``[first_ms, split_ms)`` has a cover that holds, and the first
    hour's start (s)."""
    from app.tsdb import rollup_coverage

    first_ms, split_ms, _ = window
    first_hour = first_ms // 1000 - first_ms // 1000 % HOUR_S
    last_hour = (split_ms - 1) // 1000 - (split_ms - 1) // 1000 % HOUR_S
    record = rollup_coverage.read(reader.tsdb, first_hour, last_hour)
    hours = (last_hour - first_hour) // HOUR_S + 1
    return record.valid_hours(interval.interval, first_hour, hours), first_hour


def covered_read(reader: RowReader, sub: SubQuery, interval: RollupInterval,
                 window: Window) -> list[Series]:
    """Each downsample bucket from the rollup when every hour it touches is covered (rolled,
    and no raw write reached it since), else from raw rows; after the horizon from raw rows.
    Every bucket is answered by exactly one of the two, so the answer is the raw one."""
    assert sub.downsample is not None
    first_ms, split_ms, scan_end_ms = window
    step_ms = sub.downsample.interval_ms
    valid, first_hour = _hours_rolled(reader, interval, window)
    starts = np.arange(first_ms, split_ms, step_ms, dtype=np.int64)
    first_hours = (starts // 1000 - first_hour) // HOUR_S
    last_hours = ((starts + step_ms - 1) // 1000 - first_hour) // HOUR_S
    not_rolled = np.concatenate(([0], np.cumsum(~valid)))
    good = not_rolled[last_hours + 1] == not_rolled[first_hours]
    rolled: list[Series] = []
    if good.any():
        # Only the span from the first to the last bucket the rollup answers is read from it
        # (the hours after the data, often uncovered, cost nothing there); its buckets are
        # sifted only when some inside it are not answered.
        lo, hi = int(np.argmax(good)), good.size - int(np.argmax(good[::-1]))
        rolled = _read_rollups(reader, sub, [interval], first_ms + lo * step_ms,
                               first_ms + hi * step_ms, pre_aggregate=False)
        if not good[lo:hi].all():
            rolled = [s for s in (_kept(s, good[(s.ts_ms - first_ms) // step_ms])
                                  for s in rolled) if s.ts_ms.size]
    if good.all():
        spans = []
    else:
        spans = _bad_spans(good, first_ms, step_ms)
    if split_ms < scan_end_ms:
        if spans and spans[-1][1] == split_ms:
            spans[-1] = (spans[-1][0], _NO_END)
        else:
            spans.append((split_ms, _NO_END))
    if not spans:
        return rolled
    pieces = [rolled]
    for span_start, span_end in spans:
        last_ms = min(span_end, scan_end_ms) - 1
        first_s = span_start // 1000 - span_start // 1000 % HOUR_S
        raw = read_rows(reader, sub, first_s, last_ms // 1000 - last_ms // 1000 % HOUR_S)
        kept = [_kept(s, (s.ts_ms >= span_start) & (s.ts_ms < span_end)) for s in raw]
        pieces.append([s for s in kept if s.ts_ms.size or s.annotations])
    if not any(pieces[1:]):  # nothing raw to add (hours after the data, say)
        return rolled
    return _merged(pieces)


_NO_END = 1 << 62


def _bad_spans(good: np.ndarray, first_ms: int, step_ms: int) -> list[tuple[int, int]]:
    """``[start_ms, end_ms)`` of each run of buckets not answered from the rollup."""
    edges = np.flatnonzero(np.diff(np.concatenate(([1], good.astype(np.int8), [1]))))
    return [(first_ms + int(a) * step_ms, first_ms + int(b) * step_ms)
            for a, b in zip(edges[::2], edges[1::2])]


def _kept(series: Series, keep: np.ndarray) -> Series:
    """``series`` with only the points ``keep`` says (read-only arrays are never changed)."""
    if keep.all():
        return series
    longs = None if series.long_values is None else series.long_values[keep]
    return Series(tsuid=series.tsuid, tags=series.tags, ts_ms=series.ts_ms[keep],
                  values=series.values[keep], is_int=series.is_int[keep],
                  annotations=series.annotations, long_values=longs,
                  row_order=series.row_order, tag_uids=series.tag_uids)


def _merged(pieces: list[list[Series]]) -> list[Series]:
    """Each series' points from every piece (disjoint in time), in time order; series with
    neither points nor annotations left out."""
    by_key: dict[bytes, list[Series]] = {}
    for piece in pieces:
        for series in piece:
            if series.ts_ms.size or series.annotations:
                by_key.setdefault(series.row_order or series.tsuid.encode(), []).append(series)
    out = []
    for key in sorted(by_key):
        parts = by_key[key]
        if len(parts) == 1:
            out.append(parts[0])
            continue
        ts_ms = np.concatenate([s.ts_ms for s in parts])
        order = np.argsort(ts_ms, kind="stable")
        longs = None
        if any(s.long_values is not None for s in parts):
            longs = np.concatenate([_longs(s) for s in parts])[order]
        head = parts[0]
        out.append(Series(tsuid=head.tsuid, tags=head.tags, ts_ms=ts_ms[order],
                          values=np.concatenate([s.values for s in parts])[order],
                          is_int=np.concatenate([s.is_int for s in parts])[order],
                          annotations=[a for s in parts for a in s.annotations],
                          long_values=longs, row_order=head.row_order,
                          tag_uids=head.tag_uids))
    return out


def _longs(series: Series) -> np.ndarray:
    """Exact 64-bit values of the integer points (as the reader makes them)."""
    if series.long_values is not None:
        return series.long_values
    return np.where(series.is_int, series.values, 0.0).astype(np.int64)
