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
from typing import Any

import numpy as np

from app.engine.downsample import FILL_POLICIES, Window, apply_fill, downsample, fill_grid
from app.engine.flat import FlatSeries, concat, concatenated, flatten, ranges_to_index
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
    flat = flatten(series, window.scan_start_ms, window.scan_end_ms, doubles=True)
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


SeriesName = tuple[str, dict[str, str], list[dict[str, Any]], bytes, dict[str, tuple[bytes, bytes]]]
"""What a part keeps of a series besides its buckets: tsuid, tags, annotations, row order,
tag UIDs (plain values: a part may cross from a helper process)."""


@dataclass
class StagedPart:
    """Part of a query's hours read and downsampled (fill policy ``none``, no rate): its
    series' names, their buckets (one segment each, in the same order) and raw point counts."""

    names: list[SeriesName]
    buckets: FlatSeries
    raw_points: Int64Array


def series_name(s: Series) -> SeriesName:
    return s.tsuid, s.tags, s.annotations, s.row_order, s.tag_uids


def joined_parts(head: StagedPart, later: StagedPart, spec: Downsample) -> list[StagedSeries]:
    """Each series' buckets of the earlier hours followed by those of the later ones (no
    bucket straddles an hour, so none is in both parts), in row-key order, series after series
    in one new buffer: the engine joins them without a copy, and nothing of either part is
    held on to (a part may lie in memory shared with a helper)."""
    keys = [name[3] for name in head.names]
    if keys == [name[3] for name in later.names] and keys == sorted(keys):
        ts_ms, values, offsets = _side_by_side(head.buckets, later.buckets)
        names = [(a[0], a[1], a[2] + b[2], a[3], a[4])
                 for a, b in zip(head.names, later.names, strict=True)]
        raw_points = (head.raw_points + later.raw_points).tolist()
    else:
        ts_ms, values, offsets, names, raw_points = _merged(head, later)
    return in_one_buffer(names, ts_ms, values, offsets, raw_points, spec)


def in_one_buffer(names: Sequence[SeriesName], ts_ms: np.ndarray, values: np.ndarray,
                  offsets: np.ndarray, raw_points: Sequence[int], spec: Downsample
                  ) -> list[StagedSeries]:
    """The series ``names`` whose buckets lie one after the other in ``ts_ms`` and
    ``values`` (series i at ``offsets[i]:offsets[i + 1]``), as views the engine joins without
    a copy; the arrays made read-only."""
    is_int = np.zeros(ts_ms.size, dtype=bool)  # buckets are doubles (Downsampler#isInteger)
    for array in (ts_ms, values, is_int):
        array.flags.writeable = False
    bounds = offsets.tolist()
    return [StagedSeries(tsuid=tsuid, tags=tags, ts_ms=ts_ms[a:b], values=values[a:b],
                         is_int=is_int[a:b], annotations=notes, row_order=row_order,
                         tag_uids=tag_uids, downsample=spec, raw_points=int(raw))
            for (tsuid, tags, notes, row_order, tag_uids), a, b, raw
            in zip(names, bounds[:-1], bounds[1:], raw_points, strict=True)]


def _side_by_side(head: FlatSeries, later: FlatSeries
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two parts of the same series, in the same order, joined (timestamps, values,
    offsets); as two 2-D blocks side by side when every series has as many buckets in a
    part (a regular grid: the usual case)."""
    n, a, b = head.n_series, head.lengths, later.lengths
    offsets = np.concatenate(([0], np.cumsum(a + b))).astype(np.int64)
    if n and bool((a == a[0]).all()) and bool((b == b[0]).all()):
        def beside(x: np.ndarray, y: np.ndarray) -> np.ndarray:
            return np.hstack((x.reshape(n, int(a[0])), y.reshape(n, int(b[0])))).ravel()
        return beside(head.ts_ms, later.ts_ms), beside(head.values, later.values), offsets
    ts_ms = np.empty(int(offsets[-1]), dtype=np.int64)
    values = np.empty(int(offsets[-1]), dtype=np.float64)
    for part, starts in ((head, offsets[:-1]), (later, offsets[:-1] + a)):
        at = ranges_to_index(starts, part.lengths)
        ts_ms[at] = part.ts_ms
        values[at] = part.values
    return ts_ms, values, offsets


def _merged(head: StagedPart, later: StagedPart) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, list[SeriesName], list[int]]:
    """Two parts whose series differ (some in one part only), joined by row order."""
    found: dict[bytes, list[tuple[StagedPart, int]]] = {}
    for part in (head, later):
        for j, name in enumerate(part.names):
            found.setdefault(name[3], []).append((part, j))
    ts_ms, values, lengths, names, raw_points = [], [], [], [], []
    for key in sorted(found):
        length = 0
        for part, j in found[key]:
            cut = slice(int(part.buckets.offsets[j]), int(part.buckets.offsets[j + 1]))
            ts_ms.append(part.buckets.ts_ms[cut])
            values.append(part.buckets.values[cut])
            length += cut.stop - cut.start
        lengths.append(length)
        tsuid, tags, _, row_order, tag_uids = found[key][0][0].names[found[key][0][1]]
        names.append((tsuid, tags, [note for part, j in found[key] for note in part.names[j][2]],
                      row_order, tag_uids))
        raw_points.append(sum(int(part.raw_points[j]) for part, j in found[key]))
    offsets = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64))).astype(np.int64)
    # np.concatenate copies even one array: nothing of a part is kept
    return (np.concatenate([np.zeros(0, np.int64), *ts_ms]),
            np.concatenate([np.zeros(0), *values]), offsets, names, raw_points)
