"""The read path of one sub-query, as ``TsdbQuery`` runs it: plan, then sources, then merge.

``SeriesReader.read`` makes the sub-query's plan once (``app.tsdb.read.plan``: hours, buckets,
fused or not), then asks the sources that answer it: rollup tables where they answer exactly
(``app.tsdb.planner``), else the raw rows, split by hours with the helper process when that
pays (``app.tsdb.split``), from the closed ranges, the hour cache and storage
(``app.tsdb.read.series``). ARCHITECTURE.md draws the whole path.
"""

from __future__ import annotations

from app.engine.model import Series
from app.query.ast import SubQuery
from app.tsdb.planner import planned_read
from app.tsdb.read import series as raw_series
from app.tsdb.read.plan import plan_read
from app.tsdb.read.rows import CHECK_EVERY_ROWS, ReadStats, RowReader, StoredRow
from app.tsdb.split import read_split

__all__ = ["CHECK_EVERY_ROWS", "ReadStats", "SeriesReader", "StoredRow"]


class SeriesReader(RowReader):
    """Reads the series of one sub-query (raw data rows; rollups through the planner)."""

    splittable = True

    def read(self, sub: SubQuery, start_ms: int, end_ms: int) -> list[Series]:
        """Every series of ``sub`` with data in the scan range, in row-key order.

        The limits apply as the work goes: filled buckets before any read, bytes and the
        deadline every ``CHECK_EVERY_ROWS`` rows, buckets x series before decoding, points
        after each decoded chunk.
        """
        self.sub = sub
        self.limits.check_buckets(sub, start_ms, end_ms)
        plan = plan_read(sub, start_ms, end_ms, keeps_cells=not self.use_cache)
        self.buckets = plan.buckets
        planned = planned_read(self, sub, start_ms, end_ms)  # from rollups, when they answer
        if planned is not None:
            return planned
        if plan.fuse is None:
            return raw_series.read_rows(self, sub, plan.first_s, plan.last_s)
        return read_split(self, sub, plan.first_s, plan.last_s, plan.fuse)
