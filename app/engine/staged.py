"""Downsampling fused into the read: series that reach the engine already downsampled.

A downsample whose buckets never straddle an hour row (fixed, epoch-aligned intervals that
divide an hour: ``10s``, ``1m``, ``5m``, ``1h``...) reduces every hour row of a series on its
own. The reader then decodes a chunk of rows as storage streams them, downsamples it (fill
policy ``none``) and lets the raw points go, so a query's peak memory follows the chunk, not
the points it scans (issue 14). Each bucket is reduced from exactly the points, in the same
order, as the whole-series downsample would reduce it, so the answer is the same to the bit;
the fill policy and the rate run in the engine over the joined buckets, as ``downsample``
and ``_pipeline`` do (a rate needs the bucket before, which may lie in another chunk).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# ``_apply_fill`` and ``_fill_grid``: the two steps ``downsample`` ends with when a fill
# policy fills, the same code run once over the joined buckets instead of once per chunk.
from app.engine.downsample import FILL_POLICIES, Window, _apply_fill, _fill_grid, downsample
from app.engine.flat import FlatSeries, flatten
from app.engine.model import Int64Array, Series
from app.engine.rate import rate
from app.query.ast import Downsample, SubQuery

HOUR_MS = 3_600_000


@dataclass
class StagedSeries(Series):
    """A series whose points are the buckets of ``downsample`` (fill policy ``none``): each
    a double, stamped with its bucket's start. ``raw_points``: its raw points in the scan
    window (a series without any takes no part but its notes, as a raw one)."""

    downsample: Downsample | None = None
    raw_points: int = 0


def fusable(spec: Downsample | None) -> bool:
    """Whether every bucket of ``spec`` lies inside one hour row, so rows can be
    downsampled chunk by chunk in any grouping: a fixed interval dividing an hour (calendar
    buckets follow a zone, ``all`` spans the query)."""
    return (spec is not None and not spec.calendar and not spec.run_all
            and 0 < spec.interval_ms <= HOUR_MS and HOUR_MS % spec.interval_ms == 0)


def stage_chunk(spec: Downsample, window: Window, rows: FlatSeries
                ) -> tuple[FlatSeries, Int64Array]:
    """One chunk of hour rows, each a segment of ``rows`` (any number per series, a
    bucket never straddling two): each row's buckets (fill policy ``none``), and each row's
    raw points inside the scan window."""
    ts_ms = rows.ts_ms
    if ts_ms.size and (int(ts_ms.min()) < window.scan_start_ms
                       or int(ts_ms.max()) >= window.scan_end_ms):
        rows = rows.with_mask((ts_ms >= window.scan_start_ms) & (ts_ms < window.scan_end_ms))
    return downsample(rows, spec, window, "none"), rows.lengths


def finish_staged(sub: SubQuery, series: Sequence[StagedSeries], window: Window) -> FlatSeries:
    """The per-series stage of :mod:`app.engine.execute` for series downsampled by the read:
    their buckets joined (no copy when they lie in one buffer), filled, then the rate."""
    spec = sub.downsample
    assert spec is not None and all(s.downsample == spec for s in series)
    flat = flatten(series, window.scan_start_ms, window.scan_end_ms)
    policy = FILL_POLICIES[spec.fill]
    if policy.fills:
        flat = _apply_fill(flat, _fill_grid(spec, window), policy.value)
    if sub.rate:
        flat = rate(flat, sub.rate_options)
    return flat


def all_staged(series: Sequence[Series]) -> bool:
    """Whether the read downsampled these series (it does so for all of a sub-query's or none)."""
    return bool(series) and all(isinstance(s, StagedSeries) for s in series)
