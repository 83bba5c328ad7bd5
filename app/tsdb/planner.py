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
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from app.engine.execute import scan_bounds_ms
from app.engine.model import Series
from app.query.ast import Downsample, SubQuery
from app.tsdb.rollup_config import RollupConfig, RollupInterval

if TYPE_CHECKING:
    from app.tsdb.reader import SeriesReader

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


def candidates(config: RollupConfig, spec: Downsample | None, usage: str) -> list[RollupInterval]:
    """Rollup intervals to try, coarsest first; empty when the raw path must answer."""
    if (spec is None or spec.run_all or spec.calendar or spec.interval_ms <= 0
            or usage == "ROLLUP_RAW" or spec.function.lower() not in EXACT):
        return []
    found = config.best_matches(spec.interval_ms)
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


def planned_read(reader: SeriesReader, sub: SubQuery, start_ms: int,
                 end_ms: int) -> list[Series] | None:
    """The sub-query's series from rollups (+ raw after the horizon), or None for raw only."""
    config = reader.tsdb.rollup_config
    if config is None:
        return None
    if sub.pre_aggregate or _filters_pre_aggregate(sub, reader.tsdb.config):
        return _pre_aggregated(reader, config, sub, start_ms, end_ms)
    usage = sub.rollup_usage or DEFAULT_USAGE
    spec = sub.downsample
    tried = candidates(config, spec, usage)
    if spec is None or not tried:
        return None
    scan_start_ms, scan_end_ms = scan_bounds_ms(start_ms, end_ms, spec)
    step_ms = spec.interval_ms
    first_ms = -(-scan_start_ms // step_ms) * step_ms
    horizon_ms = rollup_horizon_ms(reader.tsdb.config["tsd.rollups.compute.lag_s"])
    split_ms = min(scan_end_ms, horizon_ms) // step_ms * step_ms
    if split_ms <= first_ms:
        return None
    rolled = _read_rollups(reader, sub, tried, first_ms, split_ms, pre_aggregate=False)
    if not rolled and usage != "ROLLUP_NOFALLBACK":
        return None
    raw: list[Series] = []
    if split_ms < scan_end_ms:
        first_s = split_ms // 1000 - (split_ms // 1000) % HOUR_S
        last_s = (scan_end_ms - 1) // 1000
        raw = reader.read_rows(sub, first_s, last_s - last_s % HOUR_S)
    return merge_series(rolled, raw, split_ms)


def _read_rollups(reader: SeriesReader, sub: SubQuery, tried: list[RollupInterval],
                  first_ms: int, end_ms: int, *, pre_aggregate: bool) -> list[Series]:
    """Buckets in ``[first_ms, end_ms)`` from the first of ``tried`` that has any."""
    from app.tsdb.rollup_reader import RollupReader

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


def _pre_aggregated(reader: SeriesReader, config: RollupConfig, sub: SubQuery,
                    start_ms: int, end_ms: int) -> list[Series]:
    """A pre-aggregate query: the rollup interval's pre-aggregate table when the downsample
    has one, else the default interval's (raw layout). Written by clients only (``/api/rollup``
    with ``groupByAggregator``), so there is no horizon and no raw tail."""
    from app.tsdb.reader import scan_hours_s
    from app.tsdb.rollup_reader import PreAggregateReader

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
    series = pre.read_rows(sub, first_s, last_s)
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
