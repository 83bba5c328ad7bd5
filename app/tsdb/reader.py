"""The read path of one sub-query, as ``TsdbQuery`` runs it: plan, then sources, then merge.

``SeriesReader.read`` makes the sub-query's plan once (``app.tsdb.read.plan``: hours, buckets,
UIDs and keys, fused or not, cache policy, rollup, split), then reads what the plan chose:
rollup tables where they answer exactly (``app.tsdb.read.rollup_read``), else the raw rows, split by
hours with the helper process when the plan says so (``app.tsdb.read.split``), from the closed
ranges, the hour cache and storage (``app.tsdb.read.series``). ARCHITECTURE.md draws the path.
"""

from __future__ import annotations

from app.engine.model import Series
from app.query.ast import SubQuery
from app.tsdb.read.plan import plan_read
from app.tsdb.read.rollup_read import read_planned
from app.tsdb.read.rows import CHECK_EVERY_ROWS, ReadStats, RowReader, StoredRow
from app.tsdb.read.series import read_rows
from app.tsdb.read.split import read_split

__all__ = ["CHECK_EVERY_ROWS", "ReadStats", "SeriesReader", "StoredRow"]


class SeriesReader(RowReader):
    """Reads the series of one sub-query (raw data rows; rollups through the planner)."""

    def read(self, sub: SubQuery, start_ms: int, end_ms: int, *,
             keeps_cells: bool = False) -> list[Series]:
        """Every series of ``sub`` with data in the scan range, in row-key order.

        ``keeps_cells``: the caller needs every row's stored cells (a delete: see
        ``matched_rows``) or reads each hour once (a backfill): no cache, nothing fused.
        The limits apply as the work goes: filled buckets before any read, bytes and the
        deadline every ``CHECK_EVERY_ROWS`` rows, buckets x series before decoding, points
        after each decoded chunk.
        """
        self.limits.check_buckets(sub, start_ms, end_ms)
        plan = self.read_plan = plan_read(self.tsdb, sub, start_ms, end_ms,
                                          keeps_cells=keeps_cells)
        if plan.rollup is not None:
            planned = read_planned(self, plan.rollup)  # None: the raw rows answer
            if planned is not None:
                return planned
        if plan.fuse is None:
            return read_rows(self, plan.first_s, plan.last_s)
        return read_split(self)
