"""Reading one rollup table for the planner: cells to one point per downsample bucket.

The scan, the tag filters and the grouping into series are the raw reader's; only the table,
the row span and the decoding differ. Each series' cells of the wanted aggregate (``sum`` and
``count`` for ``avg``) are combined per downsample bucket (epoch-aligned, as the engine's
downsampler buckets), so the engine sees exactly one point per bucket and its downsample of
that point is the exact answer.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import numpy as np

from app.engine.model import Series
from app.query.ast import SubQuery
from app.storage import codec
from app.storage.base import Table
from app.storage.codec_rollup import rollup_base_time
from app.tsdb import closed_range, hour_cache, rollup_ranges
from app.tsdb.hour_cache import CachedRow, cache_for
from app.tsdb.reader import SeriesReader, StoredRow, _SeriesRows, _UidConstraint
from app.tsdb.rollup_config import RollupInterval
from app.tsdb.rollup_rows import RollupRow, RowSource, Wanted, packed_from_cells

# A (series, bucket) key: the series' index above these bits, the bucket's below.
BUCKET_BITS = 32
BUCKET_MASK = (1 << BUCKET_BITS) - 1


class RollupReader(SeriesReader):
    """A :class:`SeriesReader` over one rollup table, producing bucket-combined series."""

    cacheable = False  # not the raw hour rows: its own key space in the cache (rollup_rows)

    def __init__(self, raw: SeriesReader, interval: RollupInterval,
                 exact: tuple[str, str], step_ms: int, table_name: str | None = None) -> None:
        super().__init__(raw.tsdb, raw.limits, raw.deadline)
        self.use_cache = raw.use_cache
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

    def _scan_rows(self, metric_uid: bytes, first_s: int, last_s: int,
                   narrow: _UidConstraint | None, keep: Callable[[bytes], bool] | None = None,
                   named: Callable[[bytes], bool] | None = None
                   ) -> tuple[list[tuple[bytes, CachedRow]], Iterator[tuple[bytes, StoredRow]]]:
        """The rows of the scan range, only the wanted aggregates' cells, through the hour
        cache (``rollup_rows``): every row comes in the stream (cached ones as
        :class:`RollupRow`), none as a separate hit; ``named`` is applied by ``_group``."""
        source = self._source()
        closed_s = None
        if source.cache is not None and (hasattr(source.table, "range_newest")
                                         or hasattr(source.table, "scan_stamps_packed")):
            closed_s = closed_range.closed_last_s(first_s, last_s, self.row_span_s,
                                                  hour_cache.clock_ms())
        closed = ([] if closed_s is None
                  else self.key_ranges(metric_uid, first_s, closed_s, narrow))
        rows: Iterator[tuple[bytes, RollupRow]]
        if closed_s is None or any(stop is None for _, stop in closed):
            rows = source.rows(self.key_ranges(metric_uid, first_s, last_s, narrow))
        else:
            # The closed rows one joined row per series, the open ones row by row.
            later = [] if closed_s == last_s else self.key_ranges(
                metric_uid, closed_s + self.row_span_s, last_s, narrow)
            rows = itertools.chain(rollup_ranges.closed_rows(source, cast(Any, closed)),
                                   source.rows(later))
        return [], (rows if keep is None else (row for row in rows if keep(row[0])))

    def _source(self) -> RowSource:
        assert self.value_id is not None
        wanted = Wanted(self.value_id, self.aggregate, self.count_id)
        cache = cache_for(self.tsdb) if self.use_cache else None
        return RowSource(self.table(), wanted, self.interval.interval_s, self.row_span_s,
                         self._base_time, self._series_key, cache)

    def _series_key(self, key: bytes) -> bytes:
        time_at = self.layout.salt_width + self.layout.metric_width
        return key[:time_at] + key[time_at + 4:]

    def _decode_all(self, groups: Sequence[_SeriesRows]) -> list[codec.DecodedRow]:
        """All groups' cells combined per (series, bucket), each aggregate in one pass."""
        rows = [self._rollup_row(key, row) for group in groups for key, row in group.rows]
        owner_of = np.repeat(np.arange(len(groups), dtype=np.int64),
                             [len(group.rows) for group in groups])
        spans = np.array([row.spans for row in rows], np.int64).reshape(-1, 4)
        keys, combined = self._reduce(owner_of, rows, spans[:, 0], spans[:, 1], self.combine)
        if self.combine == "avg":
            count_keys, counts = self._reduce(owner_of, rows, spans[:, 2], spans[:, 3], "sum")
            # A bucket needs its sum and a positive count.
            count_keys, counts = np.append(count_keys, -1), np.append(counts, 0.0)
            at = np.minimum(np.searchsorted(count_keys[:-1], keys), count_keys.size - 1)
            found = (count_keys[at] == keys) & (counts[at] > 0)
            keys, combined = keys[found], combined[found] / counts[at][found]
        series_of = keys >> BUCKET_BITS
        stamp = self.first_ms + (keys & BUCKET_MASK) * self.step_ms
        cuts = np.searchsorted(series_of, np.arange(len(groups) + 1)).tolist()
        return [codec.DecodedRow(stamp[a:b], combined[a:b], np.zeros(b - a, bool))
                for a, b in zip(cuts[:-1], cuts[1:])]

    def _reduce(self, owner_of: np.ndarray, rows: Sequence[RollupRow], starts: np.ndarray,
                ends: np.ndarray, combine: str) -> tuple[np.ndarray, np.ndarray]:
        """``(key, value)`` per (series, bucket) over the rows' cells ``[starts, ends)``:
        ``key`` the series index above ``BUCKET_BITS`` and the bucket's index from
        ``first_ms`` below; ``value`` the bucket's cells combined (an average's sums are
        summed)."""
        owners = np.repeat(owner_of, ends - starts)
        ts_ms, values = _runs(rows, starts, ends)
        inside = (ts_ms >= self.first_ms) & (ts_ms < self.end_ms)
        key = (owners[inside] << BUCKET_BITS) | ((ts_ms[inside] - self.first_ms) // self.step_ms)
        values = values[inside]
        if key.size > 1 and not np.all(np.diff(key) >= 0):  # rows come in time order
            order = np.argsort(key, kind="stable")
            key, values = key[order], values[order]
        if key.size == 0:
            return key, values
        first = np.flatnonzero(np.concatenate(([True], np.diff(key) != 0)))
        ufunc = {"min": np.minimum, "max": np.maximum}.get(combine, np.add)
        return key[first], ufunc.reduceat(values, first)

    def _rollup_row(self, key: bytes, row: StoredRow) -> RollupRow:
        """A row from the scan, or one fetched by key (explicit tags, TSUIDs) decoded."""
        if isinstance(row, RollupRow):
            return row
        assert not isinstance(row, CachedRow)
        return self._source().decode([packed_from_cells(key, row)], keep=False)[0][1]

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


def _runs(rows: Sequence[RollupRow], starts: np.ndarray,
          ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows' cells ``[start, end)`` joined, ``(ts_ms, values)``: rows that lie side by
    side in one read's arrays (the rows of a read, cached or not, come in that order) are
    taken as one slice."""
    if not rows:
        return np.zeros(0, np.int64), np.zeros(0)
    owner = np.array([id(row.decoded) for row in rows], np.int64)
    breaks = np.flatnonzero((owner[1:] != owner[:-1]) | (starts[1:] != ends[:-1])) + 1
    firsts = [0, *breaks.tolist()]
    lasts = [*(breaks - 1).tolist(), len(rows) - 1]
    slices = [(rows[f].decoded, int(starts[f]), int(ends[e])) for f, e in zip(firsts, lasts)]
    if len(slices) == 1:
        d, a, b = slices[0]
        return d.ts_ms[a:b], d.values[a:b]
    return (np.concatenate([d.ts_ms[a:b] for d, a, b in slices]),
            np.concatenate([d.values[a:b] for d, a, b in slices]))
