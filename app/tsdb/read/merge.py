"""The one merge by time: a sub-query's series from sources that each read a part of its time
range (the closed hours and the later rows, rollup buckets and raw rows, the spans a rollup
does not cover), joined per series (pure: no IO).

The split helper's half is the exception: its parts are downsampled buckets, joined by the
engine (``app.engine.staged.joined_parts``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.engine.flat import longs_of
from app.engine.model import Series
from app.engine.staged import StagedSeries


def merged(pieces: Sequence[Sequence[Series]]) -> list[Series]:
    """Each series' points from every piece, in time order; the series in row-key order.

    The pieces hold disjoint time ranges. A series found in one piece only is that piece's
    object (kept arrays stay shared, read-only); one found in several is a new series: the
    first one's names, every piece's notes."""
    by_key: dict[bytes, list[Series]] = {}
    for piece in pieces:
        for series in piece:
            by_key.setdefault(series.row_order or series.tsuid.encode(), []).append(series)
    return [_joined(by_key[key]) for key in sorted(by_key)]


def _joined(parts: list[Series]) -> Series:
    if len(parts) == 1:
        return parts[0]
    ts_ms = np.concatenate([s.ts_ms for s in parts])
    values = np.concatenate([s.values for s in parts])
    is_int = np.concatenate([s.is_int for s in parts])
    longs = None
    if any(s.long_values is not None for s in parts):
        longs = np.concatenate([longs_of(s) for s in parts])
    if ts_ms.size > 1 and (np.diff(ts_ms) < 0).any():  # pieces not in time order
        order = np.argsort(ts_ms, kind="stable")
        ts_ms, values, is_int = ts_ms[order], values[order], is_int[order]
        longs = None if longs is None else longs[order]
    head = parts[0]
    notes = [note for s in parts for note in s.annotations]
    staged = [s for s in parts if isinstance(s, StagedSeries)]
    if len(staged) == len(parts):  # buckets stay buckets (a count from rollups)
        return StagedSeries(tsuid=head.tsuid, tags=head.tags, ts_ms=ts_ms, values=values,
                            is_int=is_int, annotations=notes, row_order=head.row_order,
                            tag_uids=head.tag_uids, downsample=staged[0].downsample,
                            raw_points=sum(s.raw_points for s in staged))
    return Series(tsuid=head.tsuid, tags=head.tags, ts_ms=ts_ms, values=values, is_int=is_int,
                  annotations=notes, long_values=longs, row_order=head.row_order,
                  tag_uids=head.tag_uids)


def trimmed(series: Series, keep: np.ndarray) -> Series:
    """``series`` with only the points ``keep`` says, its notes all (a new series unless it
    keeps every point: read-only arrays are never changed)."""
    if keep.all():
        return series
    longs = None if series.long_values is None else series.long_values[keep]
    return Series(tsuid=series.tsuid, tags=series.tags, ts_ms=series.ts_ms[keep],
                  values=series.values[keep], is_int=series.is_int[keep],
                  annotations=series.annotations, long_values=longs,
                  row_order=series.row_order, tag_uids=series.tag_uids)
