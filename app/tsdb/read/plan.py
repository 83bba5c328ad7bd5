"""A sub-query's read, decided once before any row is read: the hours to scan, the filled
buckets the limits count, and whether the read may downsample as it decodes (``fuse``)."""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.downsample import Window
from app.engine.execute import scan_bounds_ms
from app.engine.staged import fusable
from app.query.ast import SubQuery
from app.query.limits import filled_buckets
from app.tsdb.read.keys import scan_hours_s


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """What one sub-query reads over ``[start_ms, end_ms]``."""

    sub: SubQuery
    start_ms: int
    end_ms: int
    buckets: int  # filled buckets (the buckets x series limit)
    first_s: int  # base times of the first and last hour rows scanned
    last_s: int
    # The downsampling window when the read may downsample as it decodes (its buckets never
    # straddle an hour row, and every cell need not be kept: not a delete); else None.
    fuse: Window | None


def plan_read(sub: SubQuery, start_ms: int, end_ms: int, keeps_cells: bool) -> ReadPlan:
    """The plan of ``sub`` over ``[start_ms, end_ms]``; ``keeps_cells``: the caller needs
    every row's cells (a delete), so nothing is fused."""
    first_s, last_s = scan_hours_s(start_ms, end_ms, sub.downsample)
    fuse = None
    if not keeps_cells and fusable(sub.downsample):
        scan_start_ms, scan_end_ms = scan_bounds_ms(start_ms, end_ms, sub.downsample)
        fuse = Window(scan_start_ms, scan_end_ms, start_ms, end_ms)
    return ReadPlan(sub, start_ms, end_ms, filled_buckets(sub, start_ms, end_ms), first_s,
                    last_s, fuse)
