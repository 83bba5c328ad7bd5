"""Reading one rollup table for the planner: cells to one point per downsample bucket.

The scan, the tag filters and the grouping into series are the raw reader's; only the table,
the row span and the decoding differ. Each series' cells of the wanted aggregate (``sum`` and
``count`` for ``avg``) are combined per downsample bucket (epoch-aligned, as the engine's
downsampler buckets), so the engine sees exactly one point per bucket and its downsample of
that point is the exact answer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.engine.model import Series
from app.query.ast import SubQuery
from app.storage import codec
from app.storage.base import Table
from app.storage.codec import FLAG_BITS, FLAGS_MASK
from app.storage.codec_rollup import AGGREGATOR_MASK, decode_rollup_cell, rollup_base_time
from app.tsdb.hour_cache import CachedRow
from app.tsdb.reader import SeriesReader, _SeriesRows
from app.tsdb.rollup_config import RollupInterval


class RollupReader(SeriesReader):
    """A :class:`SeriesReader` over one rollup table, producing bucket-combined series."""

    cacheable = False  # its rows are not raw data rows

    def __init__(self, raw: SeriesReader, interval: RollupInterval,
                 exact: tuple[str, str], step_ms: int, table_name: str | None = None) -> None:
        super().__init__(raw.tsdb, raw.limits, raw.deadline)
        self.table_name = table_name or interval.table
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
        return self.tsdb.table(self.table_name)

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
        """All groups' cells decoded in one vectorised pass, combined per bucket."""
        cells = _CellBatch()
        for owner, group in enumerate(groups):
            for key, row in group.rows:
                assert not isinstance(row, CachedRow)
                cells.add(owner, self._base_time(key), row)
        owners, ts_ms, values, is_count = self._wanted(cells)
        keep = (ts_ms >= self.first_ms) & (ts_ms < self.end_ms)
        owners, ts_ms, values, is_count = owners[keep], ts_ms[keep], values[keep], is_count[keep]
        bucket = ts_ms - ts_ms % self.step_ms
        order = np.lexsort((bucket, owners))
        owners, bucket, values, is_count = owners[order], bucket[order], values[order], \
            is_count[order]
        first = np.flatnonzero(np.concatenate(
            ([True], (np.diff(owners) != 0) | (np.diff(bucket) != 0)))) if owners.size else \
            np.zeros(0, np.int64)
        combined, present = self._combine(values, is_count, first)
        owner_of, stamp = owners[first][present], bucket[first][present]
        combined = combined[present]
        cuts = np.searchsorted(owner_of, np.arange(len(groups) + 1))
        return [codec.DecodedRow(stamp[a:b], combined[a:b], np.zeros(b - a, bool))
                for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist())]

    def _wanted(self, cells: _CellBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                   np.ndarray]:
        """``(owner, ts_ms, value, is_count)`` of the cells of the aggregates read."""
        ids, prefixes, owners, ts_s, values = cells.decode(self.interval.interval_s)
        wanted_value = ids == self.value_id
        wanted_count = ids == self.count_id if self.count_id is not None else \
            np.zeros(ids.size, bool)
        if prefixes:  # the old "sum:" layout, rare: per cell
            named = np.array([p == self.aggregate for p in prefixes], bool)
            counted = np.array([p == "count" and self.count_id is not None
                                for p in prefixes], bool)
            legacy = ids < 0
            wanted_value[legacy] = named
            wanted_count[legacy] = counted
        take = wanted_value | wanted_count
        return owners[take], ts_s[take] * 1000, values[take], wanted_count[take]

    def _combine(self, values: np.ndarray, is_count: np.ndarray,
                 first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per (series, bucket) run starting at ``first``: the combined value, and whether
        the bucket has one (an average needs its count)."""
        if first.size == 0:
            return np.zeros(0), np.zeros(0, bool)
        if self.combine == "avg":
            sums = np.add.reduceat(np.where(is_count, 0.0, values), first)
            counts = np.add.reduceat(np.where(is_count, values, 0.0), first)
            has_sum = np.logical_or.reduceat(~is_count, first)
            with np.errstate(divide="ignore", invalid="ignore"):
                return sums / counts, has_sum & (counts > 0)
        if self.combine == "min":
            return np.minimum.reduceat(values, first), np.ones(first.size, bool)
        if self.combine == "max":
            return np.maximum.reduceat(values, first), np.ones(first.size, bool)
        return np.add.reduceat(values, first), np.ones(first.size, bool)

    def _series(self, group: _SeriesRows, tags: dict[str, str],
                decoded: codec.DecodedRow) -> Series:
        tsuid = group.row_order[self.layout.salt_width:]
        return Series(tsuid=tsuid.hex().upper(), tags=tags, ts_ms=decoded.ts_ms,
                      values=decoded.values, is_int=decoded.is_int,
                      row_order=group.row_order, tag_uids=dict(zip(tags, group.tag_uids)))


class PreAggregateReader(SeriesReader):
    """The raw reader over a pre-aggregate table in raw-point layout (the default interval's)."""

    def __init__(self, raw: SeriesReader, table_name: str) -> None:
        super().__init__(raw.tsdb, raw.limits, raw.deadline)
        self.table_name = table_name

    def table(self) -> Table:
        return self.tsdb.table(self.table_name)


class _CellBatch:
    """The cells of many rollup rows, gathered for one vectorised decode."""

    def __init__(self) -> None:
        self.columns: list[bytes] = []
        self.values: list[bytes] = []
        self.owners: list[int] = []
        self.bases: list[int] = []

    def add(self, owner: int, base_s: int, row: dict[bytes, bytes]) -> None:
        self.columns += row.keys()
        self.values += row.values()
        self.owners += [owner] * len(row)
        self.bases += [base_s] * len(row)

    def decode(self, interval_s: int) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray,
                                               np.ndarray]:
        """``(aggregator ID or -1, prefixes of the -1 ones, owner, ts_s, value)`` per cell;
        cells that are neither layout are dropped."""
        count = len(self.columns)
        owners = np.asarray(self.owners, np.int64)
        bases = np.asarray(self.bases, np.int64)
        col_len = np.fromiter(map(len, self.columns), np.int64, count)
        val_len = np.fromiter(map(len, self.values), np.int64, count)
        col_buf = np.frombuffer(b"".join(self.columns), np.uint8)
        val_buf = np.frombuffer(b"".join(self.values), np.uint8)
        col_at = np.cumsum(col_len) - col_len
        val_at = np.cumsum(val_len) - val_len
        modern = (col_len == 5) & (val_len > 0)  # "t:" + id + 2 bytes
        ids = np.full(count, -2, np.int64)
        words = np.zeros(count, np.int64)
        at = col_at[modern]
        ids[modern] = col_buf[at + 2] & AGGREGATOR_MASK
        words[modern] = (col_buf[at + 3].astype(np.int64) << 8) | col_buf[at + 4]
        ts_s = bases + (words >> FLAG_BITS) * interval_s
        values = _values(val_buf, val_at, val_len, words & FLAGS_MASK, modern)
        prefixes: list[str] = []
        for i in np.flatnonzero(~modern & (col_len > 5)).tolist():
            cell = decode_rollup_cell(self.columns[i][2:], self.values[i],
                                      int(bases[i]), interval_s)
            if cell is not None and cell.prefix is not None:
                ids[i], ts_s[i], values[i] = -1, cell.ts_ms // 1000, cell.value
                prefixes.append(cell.prefix)
        keep = ids >= -1
        return ids[keep], prefixes, owners[keep], ts_s[keep], values[keep]


def _values(buf: np.ndarray, at: np.ndarray, size: np.ndarray, flags: np.ndarray,
            mask: np.ndarray) -> np.ndarray:
    """Values as raw points store them: the last ``(flags & 7) + 1`` bytes, big-endian,
    a float when ``flags & 8``; NaN where the cell is malformed."""
    out = np.full(at.size, np.nan)
    width = (flags & 0x7) + 1
    for is_float, length, dtype in ((False, 1, "i1"), (False, 2, ">i2"), (False, 4, ">i4"),
                                    (False, 8, ">i8"), (True, 4, ">f4"), (True, 8, ">f8")):
        pick = mask & (width == length) & (((flags & 0x8) != 0) == is_float)
        pick &= size >= length
        if not pick.any():
            continue
        start = at[pick] + size[pick] - length
        raw = buf[start[:, None] + np.arange(length)]
        out[pick] = np.ascontiguousarray(raw).view(dtype).ravel().astype(np.float64)
    return out
