"""Rollup buckets of a grid of rows in whole-matrix steps: the cache-off read's common case.

When every series read has a row of every row span, all full alike (``rollup_columns.Grid``:
a day of 1-hour cells per row, the same offsets in every row), every series' cells lie on one
time axis. The cells inside the read and their downsample buckets are then found once, on that
axis, and every series' buckets are combined at once from a (series x cells) matrix: no time
stamp per cell, no key per cell, no sort. The answer is what ``RollupReader`` makes of the same
rows one by one: the same cells combined in the same order by the same ufuncs (``reduceat``
over each series' cells, series after series), the same division for an average.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.tsdb.read.rollup_columns import Grid, Part, alike, series_major


@dataclass(frozen=True, slots=True)
class GridBuckets:
    """Where the cells of a grid's rows go: the axis' cells ``[lo, hi)`` are inside the
    read, ``firsts`` (among them) start each bucket (None: one cell each), ``stamps`` are
    the buckets' starts."""

    grid: Grid
    parts: tuple[Part, ...]  # the value part, then an average's count part
    combine: str  # "avg", "sum", "min" or "max"
    lo: int
    hi: int
    firsts: np.ndarray | None
    stamps: np.ndarray

    @classmethod
    def of(cls, parts: list[Part | None], grid: Grid, interval_s: int, first_ms: int,
           end_ms: int, step_ms: int, combine: str) -> GridBuckets | None:
        """None unless every part wanted is there with one cell pattern in every row (then
        the rows path answers)."""
        wanted = parts[:2] if combine == "avg" else parts[:1]
        if any(p is None for p in wanted):
            return None
        present = [p for p in wanted if p is not None]
        offsets = present[0].offsets[0].astype(np.int64)
        if not all(_every_row(p.offsets, offsets) for p in present):
            return None
        # Each cell's time as the rows path stamps it: offsets in intervals, then the base.
        axis = (offsets * (interval_s * 1000))[None, :] + grid.base_s[:, None] * 1000
        axis = axis.ravel()
        if axis.size > 1 and not (axis[1:] > axis[:-1]).all():
            return None  # cells out of time order: the rows path sorts them
        lo, hi = (int(i) for i in np.searchsorted(axis, [first_ms, end_ms]))
        if lo == hi:
            return None
        bucket = (axis[lo:hi] - first_ms) // step_ms
        heads = np.flatnonzero(np.concatenate(([True], bucket[1:] != bucket[:-1])))
        firsts = None if heads.size == bucket.size else heads
        return cls(grid, tuple(present), combine, lo, hi, firsts,
                   first_ms + bucket[heads] * step_ms)

    def series(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The buckets of the grid's series ``rows`` (indices, ascending), series after
        series: ``(ts_ms, values, offsets)``, series i at ``offsets[i]:offsets[i + 1]``."""
        combined = self._combined(self.parts[0], rows, self.combine)
        if self.combine == "avg":
            counts = self._combined(self.parts[1], rows, "sum")
            positive = counts > 0
            if not positive.all():  # buckets without a positive count are left out
                lengths = positive.sum(axis=1)
                stamps = np.broadcast_to(self.stamps, positive.shape)[positive]
                values = combined[positive] / counts[positive]
                return stamps, values, np.concatenate(([0], np.cumsum(lengths)))
            combined = combined / counts
        width = self.stamps.size
        offsets = np.arange(rows.size + 1, dtype=np.int64) * width
        return np.tile(self.stamps, rows.size), combined.reshape(-1), offsets

    def _combined(self, part: Part, rows: np.ndarray, how: str) -> np.ndarray:
        """``(series, buckets)``: the cells of each bucket combined, in time order."""
        matrix = series_major(part.values, self.grid)
        if rows.size != matrix.shape[0]:
            matrix = matrix[rows]
        cells = matrix[:, self.lo:self.hi]
        if self.firsts is None:
            return cells
        # Series after series on one line, as the rows path reduces them.
        count = cells.shape[1]
        starts = (np.arange(rows.size, dtype=np.int64)[:, None] * count
                  + self.firsts[None, :]).ravel()
        ufunc = {"min": np.minimum, "max": np.maximum}.get(how, np.add)
        return ufunc.reduceat(np.ascontiguousarray(cells).reshape(-1), starts).reshape(
            rows.size, self.firsts.size)


def _every_row(matrix: np.ndarray, row: np.ndarray) -> bool:
    """Whether every row of ``matrix`` is ``row``."""
    if alike(matrix):
        return bool(np.array_equal(matrix[0], row))
    return matrix.shape[1] == row.size and bool((matrix == row).all())
