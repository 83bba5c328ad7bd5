"""Reading one rollup table for the planner: cells to one point per downsample bucket.

The scan, the tag filters and the grouping into series are the raw reader's; only the table,
the row span and the decoding differ. Each series' cells of the wanted aggregate (``sum`` and
``count`` for ``avg``) are combined per downsample bucket (epoch-aligned, as the engine's
downsampler buckets), so the engine sees exactly one point per bucket and its downsample of
that point is the exact answer.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from app.engine.aggregators import AGGREGATORS
from app.engine.model import Series
from app.engine.staged import SeriesName, in_one_buffer
from app.storage import codec
from app.storage.base import SCAN_STAMPS_PACKED, Table, able
from app.storage.codec_rollup import rollup_base_time
from app.tsdb import hour_cache
from app.tsdb.hour_cache import CachedRow, cache_for
from app.tsdb.read import closed_ranges, rollup_columns, rollup_ranges
from app.tsdb.read.keys import SeriesRows, UidConstraint
from app.tsdb.read.rollup_choice import COUNTED
from app.tsdb.read.rollup_columns import Part
from app.tsdb.read.rollup_grid import GridBuckets
from app.tsdb.read.rollup_rows import RollupRow, RowSource, Wanted, packed_from_cells
from app.tsdb.read.rows import CHECK_EVERY_ROWS, RowReader, StoredRow
from app.tsdb.rollup_config import RollupInterval

# A (series, bucket) key: the series' index above these bits, the bucket's below.
BUCKET_BITS = 32
BUCKET_MASK = (1 << BUCKET_BITS) - 1


class RollupReader(RowReader):
    """A :class:`RowReader` over one rollup table, producing bucket-combined series; the
    raw reader's plan (UIDs, filters, cache policy) applies, its rows go through the hour
    cache's own key space for rollup rows (``rollup_rows``)."""

    def __init__(self, raw: RowReader, interval: RollupInterval,
                 exact: tuple[str, str], step_ms: int, table_name: str | None = None) -> None:
        super().__init__(raw.tsdb, raw.limits, raw.deadline, raw.plan)
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

    def range_table(self) -> Table:
        """Rollup rows are read without the row-key regexp (:meth:`scan_rows`): so is the
        stamp."""
        return self.table()

    def read_between(self, first_ms: int, end_ms: int) -> list[Series]:
        """Buckets in ``[first_ms, end_ms)`` (whole downsample buckets)."""
        if self.value_id is None or (self.combine == "avg" and self.count_id is None):
            return []
        self.first_ms, self.end_ms = first_ms, end_ms
        units, multiplier = self.interval.units, self.interval.unit_multiplier
        first_s = rollup_base_time(first_ms // 1000, units, multiplier)
        last_s = rollup_base_time((end_ms - 1) // 1000, units, multiplier)
        return self.read_stored(first_s, last_s)

    def read_stored(self, first_s: int, last_s: int) -> list[Series]:
        """The plan's series from the rollup rows with base times in ``[first_s, last_s]``:
        with the hour cache off and the rows forming a grid, in whole-matrix steps
        (``rollup_grid``); else row by row (:meth:`scan_rows`)."""
        selection = self.plan.selection
        source = self._source()
        read = None
        if not selection.tsuids and not (selection.by_key and selection.exact is not None):
            read = source.columns_read(self.key_ranges(selection.metric_uid, first_s, last_s,
                                                       selection.narrow))
        if read is None:
            return super().read_stored(first_s, last_s)
        parts, loose = read
        keep = self.constraint_test()
        named = self._per_series(self._named) if selection.named else None
        if not loose and self.kept_counts is None:
            series = self._grid_series(parts, keep, named)
            if series is not None:
                return series
        rows = source.rows_of(parts, loose)
        stream = iter(rows if keep is None else [row for row in rows if keep(row[0])])
        return self.decode(self.group(stream, named))

    def _grid_series(self, parts: list[Part | None], keep: Callable[[bytes], bool] | None,
                     named: Callable[[bytes], bool] | None) -> list[Series] | None:
        """The series of a columns read whose rows form a grid (None: they do not), counted,
        filtered and named as :meth:`group` and :meth:`decode` do the same rows."""
        present = [part for part in parts if part is not None]
        time_at = self.layout.salt_width + self.layout.metric_width
        grid = rollup_columns.grid_of(present, time_at)
        if grid is None:
            return None
        buckets = GridBuckets.of(parts, grid, self.interval.interval_s, self.first_ms,
                                 self.end_ms, self.step_ms, self.combine)
        if buckets is None:
            return None
        groups, index = self._grid_groups(grid, present, keep, named)
        kept = self.matching(groups)
        self.matched_rows = []
        self.stats.series += len(kept)
        rows = np.array([index[id(group)] for group, _ in kept], np.int64)
        ts_ms, values, offsets = buckets.series(rows)
        # One bucket's value is the downsample of its one point (a count's sum of counts is
        # the answer itself): the series come downsampled (``app.engine.staged``), the engine
        # only fills, rates and merges them.
        spec = self.plan.sub.downsample
        assert spec is not None
        of_one = (_itself if spec.function.lower() in COUNTED
                  else AGGREGATORS[spec.function].of_one)
        assert of_one is not None  # every downsample a rollup answers has one
        salt = self.layout.salt_width
        names: list[SeriesName] = [
            (group.row_order[salt:].hex().upper(), tags, [], group.row_order,
             dict(zip(tags, group.tag_uids))) for group, tags in kept]
        return list(in_one_buffer(names, ts_ms, of_one(values), offsets,
                                  np.diff(offsets).tolist(), spec))

    def _grid_groups(self, grid: rollup_columns.Grid, parts: list[Part],
                     keep: Callable[[bytes], bool] | None,
                     named: Callable[[bytes], bool] | None
                     ) -> tuple[list[SeriesRows], dict[int, int]]:
        """The grid's series ``keep`` and ``named`` pass, each counted (its rows and stored
        bytes) as :meth:`group` counts a joined row, with the series' index by group id."""
        runs = int(grid.base_s.size)
        stored = sum(part.weight.reshape(runs, grid.series).sum(axis=0)
                     for part in parts).tolist()
        stats, sub, limits = self.stats, self.plan.sub, self.limits
        limits.check_read(sub, stats.points, stats.bytes)
        keys = grid.first_keys()
        layout = self.layout
        time_at = layout.salt_width + layout.metric_width
        orders = [key[:time_at] + key[time_at + 4:] for key in keys]
        tagk, pair = layout.tagk_width, layout.tagk_width + layout.tagv_width
        if (grid.length - layout.tags_start) % pair == 0:  # tag UIDs sliced a column at a time
            columns = [list(zip([key[at:at + tagk] for key in keys],
                                [key[at + tagk:at + pair] for key in keys]))
                       for at in range(layout.tags_start, grid.length, pair)]
            tags = list(zip(*columns)) if columns else [()] * len(keys)
        else:
            tags = [layout.parse_row_key(key).tags for key in keys]
        groups: list[SeriesRows] = []
        index: dict[int, int] = {}
        rows, read_bytes = stats.rows, stats.bytes
        for i, key in enumerate(keys):
            if keep is not None and not keep(key):
                continue
            rows += runs
            read_bytes += stored[i]
            if rows % CHECK_EVERY_ROWS == 0:
                stats.rows, stats.bytes = rows, read_bytes
                limits.check_read(sub, stats.points, read_bytes)
                self.deadline.check(sub.index)
            if named is not None and not named(key):
                continue
            group = SeriesRows(orders[i], tags[i])
            index[id(group)] = i
            groups.append(group)
        stats.rows, stats.bytes = rows, read_bytes
        limits.check_read(sub, stats.points, stats.bytes)
        return groups, index

    def scan_rows(self, metric_uid: bytes, first_s: int, last_s: int,
                  narrow: UidConstraint | None, keep: Callable[[bytes], bool] | None = None,
                  named: Callable[[bytes], bool] | None = None, row_regex: str | None = None
                  ) -> tuple[list[tuple[bytes, CachedRow]], Iterator[tuple[bytes, StoredRow]]]:
        """The rows of the scan range, only the wanted aggregates' cells, through the hour
        cache (``rollup_rows``): every row comes in the stream (cached ones as
        :class:`RollupRow`), none as a separate hit; ``named`` is applied by ``_group``.
        ``row_regex`` is not pushed down here (rollup rows are few; ``keep`` decides)."""
        source = self._source()
        closed_s = None
        if source.cache is not None and able(source.table, SCAN_STAMPS_PACKED) is not None:
            closed_s = closed_ranges.closed_last_s(first_s, last_s, self.row_span_s,
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
        cache = cache_for(self.tsdb) if self.plan.cache.rows else None
        return RowSource(self.table(), wanted, self.interval.interval_s, self.row_span_s,
                         self.base_time, self._series_key, cache,
                         time_at=self.layout.salt_width + self.layout.metric_width)

    def _series_key(self, key: bytes) -> bytes:
        time_at = self.layout.salt_width + self.layout.metric_width
        return key[:time_at] + key[time_at + 4:]

    def matching(self, groups: Iterable[SeriesRows]
                 ) -> list[tuple[SeriesRows, dict[str, str]]]:
        """The raw reader's, with the series' tag names read in bulk first: a rollup read
        takes thousands of series in a few statements, and a fresh process would otherwise
        look each name up by itself (a statement per name: 1,000 for 1,000 hosts)."""
        groups = list(groups)
        self.prefetch_tag_names(pair for group in groups for pair in group.tag_uids)
        return super().matching(groups)

    def _decode_all(self, groups: Sequence[SeriesRows]) -> list[codec.DecodedRow]:
        """All groups' cells combined per (series, bucket), each aggregate in one pass."""
        rows = [self._rollup_row(key, row) for group in groups for key, row in group.rows]
        owner_of = np.repeat(np.arange(len(groups), dtype=np.int64),
                             [len(group.rows) for group in groups])
        spans = np.array([row.spans for row in rows], np.int64).reshape(-1, 4)
        ts_ms, values = _runs(rows, spans[:, 0], spans[:, 1])
        buckets = self._cells_to_buckets(owner_of, spans[:, 1] - spans[:, 0], ts_ms)
        keys, combined = buckets.combine(values, self.combine)
        if self.combine == "avg":
            count_ts, counts = _runs(rows, spans[:, 2], spans[:, 3])
            if not (np.array_equal(spans[:, 3] - spans[:, 2], spans[:, 1] - spans[:, 0])
                    and np.array_equal(count_ts, ts_ms)):  # else: the sums' very buckets
                buckets = self._cells_to_buckets(owner_of, spans[:, 3] - spans[:, 2], count_ts)
            count_keys, counts = buckets.combine(counts, "sum")
            keys, combined = _averaged(keys, combined, count_keys, counts)
        cuts = np.searchsorted(keys, np.arange(len(groups) + 1) << BUCKET_BITS).tolist()
        stamp = keys & BUCKET_MASK
        stamp *= self.step_ms
        stamp += self.first_ms
        is_int = np.zeros(keys.size, bool)  # one buffer: the engine joins its slices unmoved
        return [codec.DecodedRow(stamp[a:b], combined[a:b], is_int[a:b])
                for a, b in zip(cuts[:-1], cuts[1:])]

    def _cells_to_buckets(self, owner_of: np.ndarray, cells: np.ndarray,
                          ts_ms: np.ndarray) -> _Buckets:
        """Where each of the rows' cells (``cells`` per row, at ``ts_ms``) goes: its key, the
        series index above ``BUCKET_BITS`` and the bucket's index from ``first_ms`` below."""
        owners = np.repeat(owner_of, cells)
        mask = (ts_ms >= self.first_ms) & (ts_ms < self.end_ms)
        inside = None if mask.all() else mask
        if inside is not None:
            owners, ts_ms = owners[inside], ts_ms[inside]
        key = ts_ms - self.first_ms  # in place from here: no temporary per operation
        key //= self.step_ms
        owners <<= BUCKET_BITS
        key |= owners
        steps = np.diff(key)
        order = None
        if (steps < 0).any():  # rows come in time order, so seldom
            order = np.argsort(key, kind="stable")
            key = key[order]
            steps = np.diff(key)
        if key.size == 0 or steps.all():  # one cell per bucket: nothing to combine
            return _Buckets(key, inside, order, None)
        return _Buckets(key, inside, order, np.flatnonzero(np.concatenate(([True], steps))))

    def _rollup_row(self, key: bytes, row: StoredRow) -> RollupRow:
        """A row from the scan, or one fetched by key (explicit tags, TSUIDs) decoded."""
        if isinstance(row, RollupRow):
            return row
        assert not isinstance(row, CachedRow)
        return self._source().decode([packed_from_cells(key, row)], keep=False)[0][1]

    def _series(self, group: SeriesRows, tags: dict[str, str],
                decoded: codec.DecodedRow) -> Series:
        tsuid = group.row_order[self.layout.salt_width:]
        return Series(tsuid=tsuid.hex().upper(), tags=tags, ts_ms=decoded.ts_ms,
                      values=decoded.values, is_int=decoded.is_int,
                      row_order=group.row_order, tag_uids=dict(zip(tags, group.tag_uids)))


class PreAggregateReader(RowReader):
    """The raw reader over a pre-aggregate table in raw-point layout (the default interval's)."""

    def __init__(self, raw: RowReader, table_name: str) -> None:
        super().__init__(raw.tsdb, raw.limits, raw.deadline, raw.plan)
        self.table_name = table_name

    def table(self) -> Table:
        return self.tsdb.table(self.table_name)


@dataclass(frozen=True, slots=True)
class _Buckets:
    """Cells to (series, bucket) keys: the cells ``inside`` the read (None: all), their
    ``order`` by key (None: already), and where each key's run starts (None: one cell each)."""

    key: np.ndarray
    inside: np.ndarray | None
    order: np.ndarray | None
    first: np.ndarray | None

    def combine(self, values: np.ndarray, how: str) -> tuple[np.ndarray, np.ndarray]:
        """``(key, value)`` per bucket: ``values`` (one per cell) combined (an average's
        sums are summed)."""
        if self.inside is not None:
            values = values[self.inside]
        if self.order is not None:
            values = values[self.order]
        if self.first is None:
            return self.key, values
        ufunc = {"min": np.minimum, "max": np.maximum}.get(how, np.add)
        return self.key[self.first], ufunc.reduceat(values, self.first)


def _averaged(keys: np.ndarray, sums: np.ndarray, count_keys: np.ndarray,
              counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The buckets with a sum and a positive count, and their averages (both key arrays
    sorted; most often the same buckets, matched without a search)."""
    if keys is not count_keys and not np.array_equal(keys, count_keys):
        count_keys, counts = np.append(count_keys, -1), np.append(counts, 0.0)
        at = np.minimum(np.searchsorted(count_keys[:-1], keys), count_keys.size - 1)
        found = count_keys[at] == keys
        keys, sums, counts = keys[found], sums[found], counts[at][found]
    positive = counts > 0
    if positive.all():
        return keys, sums / counts
    return keys[positive], sums[positive] / counts[positive]


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


def _itself(values: np.ndarray) -> np.ndarray:
    return values
