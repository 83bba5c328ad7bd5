"""Downsampling fused into the read: series that reach the engine already downsampled.

A downsample whose buckets never straddle an hour row (fixed, epoch-aligned intervals that
divide an hour: ``10s``, ``1m``, ``5m``, ``1h``...) reduces every hour row of a series on its
own. The reader then decodes a chunk of rows as storage streams them, downsamples it (fill
policy ``none``) and lets the raw points go, so a query's peak memory follows the chunk, not
the points it scans (issue 14). Each bucket is reduced from exactly the points, in the same
order, as the whole-series downsample would reduce it, so the answer is the same to the bit;
the fill policy and the rate run in the engine over the joined buckets, as ``downsample``
and ``_pipeline`` do (a rate needs the bucket before, which may lie in another chunk).

Series read raw (from the hour cache) are downsampled by the engine a chunk at a time; their
chunks' buckets are joined by :class:`Pieces` into buffers sized up front, so the buckets are
never held twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.engine.downsample import FILL_POLICIES, Window, apply_fill, downsample, fill_grid
from app.engine.flat import FlatSeries, concat, concatenated, flatten
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
        flat = apply_fill(flat, fill_grid(spec, window), policy.value)
    if sub.rate:
        flat = rate(flat, sub.rate_options)
    return flat


def all_staged(series: Sequence[Series]) -> bool:
    """Whether the read downsampled these series (it does so for all of a sub-query's or none)."""
    return bool(series) and all(isinstance(s, StagedSeries) for s in series)


def stage_bound(spec: Downsample, window: Window, series: Sequence[Series]) -> int | None:
    """The most points the per-series stage can emit for ``series`` (None: not known ahead,
    calendar and ``all`` buckets): per series every bucket of the scan window with a fill
    policy, else at most one a raw point; a rate emits no more than it is given."""
    if spec.calendar or spec.run_all or spec.interval_ms <= 0:
        return None
    width = spec.interval_ms
    buckets = (window.scan_end_ms - 1) // width - window.scan_start_ms // width + 1
    if FILL_POLICIES[spec.fill].fills:
        return len(series) * buckets
    return sum(min(len(s.ts_ms), buckets) for s in series)


class Pieces:
    """The per-series stage's chunks joined as they come: their timestamps and values
    written one after the other into buffers of the most the stage can emit (``bound``), so
    joining them never holds the buckets twice; without a bound, a concatenation at the end."""

    def __init__(self, bound: int | None) -> None:
        self.bound = bound
        self.count = 0
        self._pieces: list[FlatSeries] = []  # each, until a second one comes (then written)
        self._ts_ms: np.ndarray | None = None
        self._values: np.ndarray | None = None
        self._at = 0
        self._rest: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # lengths, longs,
        # flags of the pieces written

    def add(self, piece: FlatSeries) -> None:
        self.count += 1
        if self.bound is None or self.count == 1:
            self._pieces.append(piece)
            return
        if self._ts_ms is None:
            self._ts_ms = np.empty(self.bound, dtype=np.int64)
            self._values = np.empty(self.bound, dtype=np.float64)
            first = self._pieces.pop()
            self._write(first)
        self._write(piece)

    def _write(self, piece: FlatSeries) -> None:
        assert self._ts_ms is not None and self._values is not None
        end = self._at + piece.ts_ms.size
        self._ts_ms[self._at:end] = piece.ts_ms
        self._values[self._at:end] = piece.values
        self._at = end
        # Only what the joined collection still needs of the piece (often views of one
        # value); a view of its timestamps or values would keep them whole.
        self._rest.append((piece.lengths, piece.longs, piece.is_float))

    def joined(self) -> FlatSeries:
        """One collection holding every piece's series in order."""
        if self._ts_ms is None or self._values is None:
            return concat(self._pieces)
        rest, self._rest = self._rest, []
        lengths = np.concatenate([p[0] for p in rest])
        return FlatSeries(self._ts_ms[:self._at], self._values[:self._at],
                          concatenated([p[1] for p in rest]),
                          concatenated([p[2] for p in rest]),
                          np.concatenate(([0], np.cumsum(lengths))).astype(np.int64))
