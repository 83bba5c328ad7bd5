"""Which rollup table answers a sub-query, decided once for its plan (``plan``); reading it is
``app.tsdb.read.rollup_read``'s.

2.4's ``TsdbQuery#transformDownSamplerToRollupQuery``: with rollups enabled, a downsample
whose interval is a multiple of a rollup interval reads the coarsest such rollup table
instead of raw rows (``RollupConfig#getRollupInterval``); ``rollupUsage`` says what happens
when that table has nothing (``ROLLUP_NOFALLBACK``, the default: nothing;
``ROLLUP_FALLBACK``: the next finer rollup, then raw; ``ROLLUP_FALLBACK_RAW``: raw) and
``ROLLUP_RAW`` skips rollups.

pytsd departs from 2.4 to stay exact: rollups answer only downsamples they answer exactly
(``avg`` = sum of sums / sum of counts, ``sum``, ``min``, ``max`` and their ``zim``/``mim``
twins, ``count`` = sum of counts, epoch-aligned, not calendar, not ``all``), and the buckets
after the *rollup horizon* (the open hour, plus ``tsd.rollups.compute.lag_s``) are read from
raw rows. With the background pass on (``covered``), only hours the coverage record says are
rolled and unchanged since come from the rollup table (docs/rollups.md, "Coverage"), and a
``count`` reads the raw rows (they hold every point the rollups were made of).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.engine.execute import scan_bounds_ms
from app.query.ast import Downsample, SubQuery
from app.tsdb import TSDB
from app.tsdb.rollup_config import RollupConfig, RollupInterval
from app.tsdb.rollup_coverage import coverage_mode, hour_local

DEFAULT_USAGE = "ROLLUP_NOFALLBACK"
# Downsample function -> (rollup aggregate read, how buckets combine).
EXACT: dict[str, tuple[str, str]] = {
    "avg": ("sum", "avg"), "sum": ("sum", "sum"), "zimsum": ("sum", "sum"),
    "min": ("min", "min"), "mimmin": ("min", "min"), "max": ("max", "max"),
    "mimmax": ("max", "max"), "count": ("count", "sum"),
}
# Downsamples whose rollup buckets are the answer itself, not points to reduce again: a count
# of points is the sum of the count cells, which counting the buckets would not give
# (``rollup_read`` hands them to the engine downsampled).
COUNTED = frozenset({"count"})
HOUR_S = 3600


@dataclass(frozen=True, slots=True)
class RollupChoice:
    """The rollup intervals a read tries (coarsest first) and where their buckets end."""

    tried: tuple[RollupInterval, ...]
    usage: str  # the sub-query's rollupUsage, or the default
    first_ms: int  # the first whole downsample bucket of the scan
    split_ms: int  # buckets before it from rollups (the horizon), after it raw
    scan_end_ms: int
    # The background pass computes the rollups: only covered hours come from them.
    covered: bool = False
    # A pre-aggregate query (``/api/rollup`` with ``groupByAggregator`` wrote it): its table,
    # with no horizon and no raw tail; ``tried`` may be empty (the raw-layout table).
    pre_aggregate: bool = False


def rollup_horizon_ms(lag_s: int, now_s: float | None = None) -> int:
    """Before this instant every hour is closed and rolled up: the current hour's start,
    less the configured lag rounded up to whole hours."""
    now = int(time.time() if now_s is None else now_s)
    return (now - lag_s - (now - lag_s) % HOUR_S) * 1000


def choose(tsdb: TSDB, sub: SubQuery, start_ms: int, end_ms: int) -> RollupChoice | None:
    """The rollup choice of ``sub`` over ``[start_ms, end_ms]``; None: raw rows only."""
    config = tsdb.rollup_config
    if config is None:
        return None
    usage = sub.rollup_usage or DEFAULT_USAGE
    spec = sub.downsample
    if sub.pre_aggregate or _filters_pre_aggregate(sub, tsdb.config):
        return _pre_aggregate_choice(config, sub, usage, start_ms, end_ms)
    covered = coverage_mode(tsdb)
    tried = candidates(config, spec, usage, tracked_only=covered)
    if spec is None or not tried:
        return None
    scan_start_ms, scan_end_ms = scan_bounds_ms(start_ms, end_ms, spec)
    step_ms = spec.interval_ms
    first_ms = -(-scan_start_ms // step_ms) * step_ms
    horizon_ms = rollup_horizon_ms(tsdb.config["tsd.rollups.compute.lag_s"])
    split_ms = min(scan_end_ms, horizon_ms) // step_ms * step_ms
    if split_ms <= first_ms:
        return None
    return RollupChoice(tuple(tried), usage, first_ms, split_ms, scan_end_ms, covered)


def _pre_aggregate_choice(config: RollupConfig, sub: SubQuery, usage: str, start_ms: int,
                          end_ms: int) -> RollupChoice:
    spec = sub.downsample
    tried = candidates(config, spec, usage)
    if spec is None or not tried:
        return RollupChoice((), usage, start_ms, end_ms, end_ms, pre_aggregate=True)
    scan_start_ms, scan_end_ms = scan_bounds_ms(start_ms, end_ms, spec)
    step_ms = spec.interval_ms
    first_ms = -(-scan_start_ms // step_ms) * step_ms
    return RollupChoice(tuple(tried), usage, first_ms, scan_end_ms // step_ms * step_ms,
                        scan_end_ms, pre_aggregate=True)


def candidates(config: RollupConfig, spec: Downsample | None, usage: str,
               tracked_only: bool = False) -> list[RollupInterval]:
    """Rollup intervals to try, coarsest first; empty when the raw path must answer.
    ``tracked_only``: only intervals the coverage record tracks (pytsd computes them)."""
    if (spec is None or spec.run_all or spec.calendar or spec.interval_ms <= 0
            or usage == "ROLLUP_RAW" or spec.function.lower() not in EXACT):
        return []
    if tracked_only and spec.function.lower() in COUNTED:
        return []  # the background pass rolls what the raw rows hold: they count exactly
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


def _filters_pre_aggregate(sub: SubQuery, settings: Mapping[str, Any]) -> bool:
    """2.4 reads pre-aggregates when a literal filter on ``tsd.rollups.agg_tag_key`` asks
    for another value than ``tsd.rollups.raw_agg_tag_value``."""
    key, raw = settings["tsd.rollups.agg_tag_key"], settings["tsd.rollups.raw_agg_tag_value"]
    return any(f.type == "literal_or" and f.tagk == key and f.filter != raw
               for f in sub.filters)
