"""Reading one rollup table for the planner: cells to one point per downsample bucket.

The scan, the tag filters and the grouping into series are the raw reader's; only the table,
the row span and the decoding differ. Each series' cells of the wanted aggregate (``sum`` and
``count`` for ``avg``) are combined per downsample bucket (epoch-aligned, as the engine's
downsampler buckets), so the engine sees exactly one point per bucket and its downsample of
that point is the exact answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from app.engine.model import Series
from app.query.ast import SubQuery
from app.storage import codec
from app.storage.base import Table
from app.storage.codec_rollup import decode_rollup_cell, rollup_base_time
from app.tsdb.reader import DATA_PREFIX, SeriesReader, _SeriesRows
from app.tsdb.rollup_config import RollupInterval


class RollupReader(SeriesReader):
    """A :class:`SeriesReader` over one rollup table, producing bucket-combined series."""

    def __init__(self, raw: SeriesReader, interval: RollupInterval,
                 exact: tuple[str, str], step_ms: int) -> None:
        super().__init__(raw.tsdb, raw.max_points)
        assert raw.tsdb.rollup_config is not None
        self.interval = interval
        self.row_span_s = interval.row_span_s
        self.aggregate, self.combine = exact
        ids = raw.tsdb.rollup_config.aggregation_ids
        self.value_id = ids.get(self.aggregate)
        self.count_id = ids.get("count") if self.combine == "avg" else None
        self.step_ms = step_ms
        self.first_ms = self.end_ms = 0

    def table(self) -> Table:
        return self.tsdb.table(self.interval.table)

    def read_between(self, sub: SubQuery, first_ms: int, end_ms: int) -> list[Series]:
        """Buckets in ``[first_ms, end_ms)`` (whole downsample buckets)."""
        if self.value_id is None or (self.combine == "avg" and self.count_id is None):
            return []
        self.first_ms, self.end_ms = first_ms, end_ms
        units, multiplier = self.interval.units, self.interval.unit_multiplier
        first_s = rollup_base_time(first_ms // 1000, units, multiplier)
        last_s = rollup_base_time((end_ms - 1) // 1000, units, multiplier)
        return self.read_rows(sub, first_s, last_s)

    def _decode_all(self, groups: Sequence[_SeriesRows]) -> list[codec.DecodedRow]:
        return [self._buckets(group) for group in groups]

    def _buckets(self, group: _SeriesRows) -> codec.DecodedRow:
        stamps, values, counts = self._cells(group.rows)
        ts = np.asarray(stamps, np.int64)
        keep = (ts >= self.first_ms) & (ts < self.end_ms)
        ts, vals = ts[keep], np.asarray(values, np.float64)[keep]
        order = np.argsort(ts, kind="stable")
        ts, vals = ts[order], vals[order]
        bucket = ts - ts % self.step_ms
        if bucket.size == 0:
            empty = np.zeros(0, np.int64)
            return codec.DecodedRow(empty, np.zeros(0), np.zeros(0, bool))
        first = np.concatenate(([0], np.flatnonzero(np.diff(bucket)) + 1))
        if self.combine == "min":
            out = np.minimum.reduceat(vals, first)
        elif self.combine == "max":
            out = np.maximum.reduceat(vals, first)
        else:
            out = np.add.reduceat(vals, first)
        if self.combine == "avg":
            count_ts = np.asarray([t for t, _ in counts], np.int64)
            count_v = np.asarray([v for _, v in counts], np.float64)
            in_range = (count_ts >= self.first_ms) & (count_ts < self.end_ms)
            count_bucket = count_ts[in_range] - count_ts[in_range] % self.step_ms
            totals = np.zeros(first.size)
            slot = np.searchsorted(bucket[first], count_bucket)
            found = (slot < first.size) & (bucket[first][np.minimum(slot, first.size - 1)]
                                           == count_bucket)
            np.add.at(totals, slot[found], count_v[in_range][found])
            with np.errstate(divide="ignore", invalid="ignore"):
                out = np.where(totals > 0, out / totals, np.nan)
            keep_avg = totals > 0
            return codec.DecodedRow(bucket[first][keep_avg], out[keep_avg],
                                    np.zeros(int(keep_avg.sum()), bool))
        return codec.DecodedRow(bucket[first], out, np.zeros(first.size, bool))

    def _cells(self, rows: Iterable[tuple[bytes, dict[bytes, bytes]]]
               ) -> tuple[list[int], list[float], list[tuple[int, float]]]:
        stamps: list[int] = []
        values: list[float] = []
        counts: list[tuple[int, float]] = []
        interval_s = self.interval.interval_s
        for key, cells in rows:
            base_s = self._base_time(key)
            for column, value in cells.items():
                if not column.startswith(DATA_PREFIX):
                    continue
                cell = decode_rollup_cell(column[2:], value, base_s, interval_s)
                if cell is None:
                    continue
                if cell.aggregator_id == self.value_id or cell.prefix == self.aggregate:
                    stamps.append(cell.ts_ms)
                    values.append(cell.value)
                elif self.count_id is not None and (cell.aggregator_id == self.count_id
                                                    or cell.prefix == "count"):
                    counts.append((cell.ts_ms, cell.value))
        return stamps, values, counts

    def _series(self, group: _SeriesRows, tags: dict[str, str],
                decoded: codec.DecodedRow) -> Series:
        tsuid = group.row_order[self.layout.salt_width:]
        return Series(tsuid=tsuid.hex().upper(), tags=tags, ts_ms=decoded.ts_ms,
                      values=decoded.values, is_int=decoded.is_int,
                      row_order=group.row_order, tag_uids=dict(zip(tags, group.tag_uids)))
