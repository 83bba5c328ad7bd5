"""The read path: from a sub-query to decoded series, as ``TsdbQuery`` and ``SaltScanner`` do.

1. Resolve the metric and the filters' tag keys and literal values to UIDs (unknown names are
   OpenTSDB's 400s).
2. Scan each salt bucket over the hour rows of the scan range (wider than the query range:
   ``scan_hours_s``), or, with explicitTags and only literal filters, fetch the exact row keys.
3. Keep the rows whose tag UIDs pass the per-key constraints, in bulk on bytes; resolve the
   surviving tag UIDs to names and run the remaining (wildcard, regexp, ...) filters once per
   series, not per row.
4. Decode each series' rows into numpy arrays in one pass; or, for a downsample no hour cache
   takes part in, decode and downsample the rows a chunk at a time as they come (``fused_read``).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, cast

import numpy as np

from app.engine.downsample import Window
from app.engine.execute import scan_bounds_ms
from app.engine.model import Int64Array, Series
from app.engine.staged import fusable
from app.errors import BadRequestError, NoSuchUniqueId
from app.query.ast import Downsample, SubQuery
from app.query.filters import KeyConstraint, TagFilter, build_filter, merge_filters, series_matches
from app.query.limits import NO_DEADLINE, Deadline, QueryLimits, filled_buckets
from app.storage import codec
from app.storage.base import (
    SCAN_MANY,
    SCAN_STAMPED,
    SCAN_STAMPS,
    SCAN_STAMPS_SIZED,
    Row,
    Table,
    able,
    prefix_stop,
    scan_ranges,
)
from app.storage.codec_cells import cell_kind, cell_points
from app.storage.codec_decode import decode_stored_rows
from app.tsdb import TSDB, closed_range, hour_cache
from app.tsdb.annotations import query_note
from app.tsdb.fused_read import read_fused
from app.tsdb.hour_cache import CachedRow, HourCache, Stamp, cache_for, keepable
from app.tsdb.planner import planned_read
from app.tsdb.split import read_split
from app.tsdb.tsuid import parse_tsuid

log = logging.getLogger(__name__)

# Integers at or beyond 2**53 lose digits as float64; their exact values are re-read.
EXACT_DOUBLE_LIMIT = 2.0**53

MAX_TIMESPAN_S = 3600
# Wider than any timestamp in ms (2**43 ms is the year 2248) and a whole number of seconds.
SERIES_SHIFT_S = 2**43 // 1000
# Rows decoded per vectorised pass (about 1M points of 10-second data).
DECODE_CHUNK_ROWS = 3000
# Past this many hour rows per salt, one wide scan beats two narrow range scans per hour.
MAX_NARROWED_HOURS = 24 * 8
# Row keys fetched by exact gets at most (tsuids, explicitTags with literals): past it, or
# when a range scan of the metric would read fewer rows, the rows are scanned instead.
MAX_EXACT_KEYS = 4096
# Up to this many exact keys are fetched without first counting what a scan would read.
FEW_EXACT_KEYS = 64
# Rows fetched between checks of the byte limit and the deadline.
CHECK_EVERY_ROWS = 256
DATA_PREFIX = b"t:"
STAMP_CHECK_EVERY_ROWS = 64 * CHECK_EVERY_ROWS


def scan_hours_s(start_ms: int, end_ms: int, spec: Downsample | None) -> tuple[int, int]:
    """First and last base time (inclusive) of the hour rows OpenTSDB scans for a query."""
    scan_start_ms, scan_end_ms = scan_bounds_ms(start_ms, end_ms, spec)
    last_s = (scan_end_ms - 1) // 1000
    return scan_start_ms // 1000, last_s - last_s % MAX_TIMESPAN_S


# Cold reads (at least this share of the scanned rows missing from the cache) stream the
# ranges' values; warmer ones fetch only the missing rows by key.
COLD_SHARE = 4
# A cold pass's arrays are kept as they are when at least 3/4 of their points are kept.
SHARED_BLOCK_SHARE = 4

StoredRow = Row | CachedRow
"""A row's cells as stored, or its decode kept by the hour cache."""

_RowStream = tuple[Iterator[tuple[bytes, StoredRow]], Callable[[bytes], bool] | None,
                   Sequence[tuple[bytes, CachedRow]]]
"""Rows as storage streams them, the per-series name test to run on them (None: none),
and the rows found in the hour cache (in key order, ahead of the stream): see ``_group``."""


@dataclass
class _SeriesRows:
    row_order: bytes
    tag_uids: tuple[tuple[bytes, bytes], ...]
    rows: list[tuple[bytes, StoredRow]] = field(default_factory=list)


@dataclass
class ReadStats:
    rows: int = 0
    points: int = 0
    series: int = 0
    bytes: int = 0
    hours_not_rolled: int = 0  # hours an explicit ROLLUP_NOFALLBACK read uncovered rollups of


class SeriesReader:
    """Reads the series of one sub-query."""

    def __init__(self, tsdb: TSDB, limits: QueryLimits | None = None,
                 deadline: Deadline = NO_DEADLINE) -> None:
        self.tsdb = tsdb
        self.layout = tsdb.layout
        self.limits = limits or QueryLimits()
        self.deadline = deadline
        self.stats = ReadStats()
        self.matched_rows: list[tuple[bytes, Row]] = []
        # Off for a query that deletes what it matched (it needs every row's cells).
        self.use_cache = True
        self._sub = SubQuery("none")
        self._buckets = 0
        self._cache: HourCache | None = None  # when this read goes through the hour cache
        self._cache_table = ""
        self._stamps: dict[bytes, Stamp] = {}  # of the rows read from storage, to keep them
        self._weights: dict[bytes, int] = {}  # their stored bytes
        # Closed rows through range entries (off for the inner read that fills one).
        self.range_reads = True
        # (rows, stored bytes) of each series read, when recorded (closed_range fills one).
        self.kept_counts: list[tuple[int, int]] | None = None

    # Whether this reader's rows are raw data rows the hour cache may keep.
    cacheable = True

    # Seconds between two row base times (rollup tables may use longer rows).
    row_span_s = MAX_TIMESPAN_S

    def read(self, sub: SubQuery, start_ms: int, end_ms: int) -> list[Series]:
        """Every series of ``sub`` with data in the scan range, in row-key order.

        The limits apply as the work goes: filled buckets before any read, bytes and the
        deadline every ``CHECK_EVERY_ROWS`` rows, buckets x series before decoding, points
        after each decoded chunk.
        """
        self._sub = sub
        self.limits.check_buckets(sub, start_ms, end_ms)
        self._buckets = filled_buckets(sub, start_ms, end_ms)
        planned = planned_read(self, sub, start_ms, end_ms)  # from rollups, when they answer
        if planned is not None:
            return planned
        first_s, last_s = scan_hours_s(start_ms, end_ms, sub.downsample)
        if not (self.use_cache and fusable(sub.downsample)):  # (a delete needs every cell)
            return self.read_rows(sub, first_s, last_s)
        scan_start_ms, scan_end_ms = scan_bounds_ms(start_ms, end_ms, sub.downsample)
        fuse = Window(scan_start_ms, scan_end_ms, start_ms, end_ms)
        return read_split(self, sub, first_s, last_s, fuse)

    def read_hours(self, sub: SubQuery, window: Window, first_s: int, last_s: int
                   ) -> list[Series]:
        """Part of a split read (``app.tsdb.split``): the series of ``sub`` from the rows
        with base times in ``[first_s, last_s]``, downsampled as they are read when no hour
        cache takes part (see :meth:`read_rows`)."""
        self._sub = sub
        self._buckets = filled_buckets(sub, window.query_start_ms, window.query_end_ms)
        return self.read_rows(sub, first_s, last_s, window)

    def table(self) -> Table:
        return self.tsdb.data_table()

    def read_rows(self, sub: SubQuery, first_s: int, last_s: int,
                  fuse: Window | None = None) -> list[Series]:
        """The series of ``sub`` from the rows with base times in ``[first_s, last_s]``: the
        closed rows through a range entry of the hour cache when the store can stamp a whole
        range (``closed_range``), the others (and all of them otherwise) row by row.

        ``fuse``: the downsampling window when the read may downsample as it decodes
        (``app.engine.staged``), which it does when no hour cache takes part in the read
        (the cache keeps raw points): then the series come as ``StagedSeries``."""
        filters = [build_filter(f) for f in sub.filters]
        cache = self._range_cache()
        closed_s = None if cache is None else closed_range.closed_last_s(
            first_s, last_s, self.row_span_s, hour_cache.clock_ms())
        if cache is not None and closed_s is not None:
            series_before = self.stats.series
            closed = closed_range.read_closed(self, cache, sub, filters, first_s, closed_s)
            if closed is not None:
                if closed_s == last_s:
                    return closed
                rest = self._decode(self._row_groups(sub, filters, closed_s + self.row_span_s,
                                                     last_s), filters, sub.explicit_tags)
                joined = closed_range.joined(closed, rest)
                self.stats.series = series_before + len(joined)  # each series once
                self.limits.check_emitted(sub, self._buckets, len(joined))  # all of them
                return joined
        rows, named, hits = self._row_stream(sub, filters, first_s, last_s)
        if fuse is not None and self._cache is None and not hits and self.kept_counts is None:
            return read_fused(self, rows, filters, fuse)
        return self._decode(self._group(rows, named, hits), filters, sub.explicit_tags)

    def _range_cache(self) -> HourCache | None:
        """The hour cache when this read may validate closed rows a range at a time."""
        if not (self.range_reads and self.use_cache and self.cacheable):
            return None
        return cache_for(self.tsdb)

    def _row_groups(self, sub: SubQuery, filters: Sequence[TagFilter], first_s: int,
                    last_s: int) -> Iterable[_SeriesRows]:
        """The rows of each series ``sub`` may match (the name filters not yet run)."""
        return self._group(*self._row_stream(sub, filters, first_s, last_s))

    def _row_stream(self, sub: SubQuery, filters: Sequence[TagFilter], first_s: int,
                    last_s: int) -> _RowStream:
        """The rows ``sub`` may match as storage streams them (see :meth:`_group`)."""
        if sub.tsuids:
            self._check_tsuids(sub.tsuids)
            return self._tsuid_rows(sub.tsuids, first_s, last_s)
        assert sub.metric is not None
        metric_uid = self.tsdb.metrics.get_id(sub.metric)
        constraints = self._resolve(merge_filters(filters))
        return self._metric_rows(metric_uid, constraints, sub.explicit_tags, filters,
                                 first_s, last_s)

    def _check_tsuids(self, tsuids: Sequence[str]) -> None:
        """Whole UIDs, one metric (``TsdbQuery#setTimeSeries``; OpenTSDB answers 500)."""
        metric_hex = 2 * self.layout.metric_width
        for tsuid in tsuids:
            if len(parse_tsuid(self.layout, tsuid)) == self.layout.metric_width:
                # OpenTSDB parses the missing tag pairs as an empty UID (a 400)
                raise BadRequestError("UID was empty", "A TSUID needs at least one tag pair")
            if tsuid[:metric_hex].upper() != tsuids[0][:metric_hex].upper():
                raise BadRequestError("One or more TSUIDs did not share the same metric "
                                      f"[{tsuids[0][:metric_hex]}] [{tsuid[:metric_hex]}]")

    def _resolve(self, constraints: list[KeyConstraint]) -> list[_UidConstraint]:
        resolved = []
        for constraint in constraints:
            tagk_uid = self.tsdb.tagk.get_id(constraint.tagk)
            literal_uids = None
            if constraint.literals is not None:
                literal_uids = self._literal_uids(constraint.literals)
            resolved.append(_UidConstraint(tagk_uid, constraint.excluded, literal_uids))
        return resolved

    def _literal_uids(self, literals: frozenset[str]) -> frozenset[bytes]:
        """UIDs of literal tag values; an unknown one is a 400 unless
        ``tsd.query.skip_unresolved_tagvs`` says to drop it (then nothing may match)."""
        if not self.tsdb.config["tsd.query.skip_unresolved_tagvs"]:
            return frozenset(self.tsdb.tagv.get_id(v) for v in sorted(literals))
        found = (self.tsdb.tagv.find_id(v) for v in sorted(literals))
        return frozenset(uid for uid in found if uid is not None)

    def _metric_rows(self, metric_uid: bytes, constraints: list[_UidConstraint],
                     explicit_tags: bool, filters: Sequence[TagFilter], first_s: int,
                     last_s: int) -> _RowStream:
        exact = _exact_tag_sets(constraints) if explicit_tags and filters else None
        if exact is not None and self._gets_cheaper(metric_uid, len(exact), first_s, last_s):
            rows = self._exact_rows(metric_uid, exact, first_s, last_s)
            return (row for row in rows if _passes(self.layout, row[0], constraints)), None, ()
        keep = None
        if constraints:
            keep = self._per_series(lambda key: _passes(self.layout, key, constraints))
        named = None
        if any(not _enforced_by_uids(f) for f in filters):
            # A wildcard or regexp filter may drop a series: decide it once per series, from
            # the key, before any value is read or decoded.
            named = self._per_series(lambda key: self._named(key, filters, explicit_tags))
        hits, stored = self._scan_rows(metric_uid, first_s, last_s, _narrowing(constraints),
                                       keep, named)
        return stored, named, hits

    def _per_series(self, test: Callable[[bytes], bool]) -> Callable[[bytes], bool]:
        """``test`` of a row key, run once per series (the key without its base time)."""
        time_start = self.layout.salt_width + self.layout.metric_width
        verdicts: dict[bytes, bool] = {}

        def once(key: bytes) -> bool:
            order = key[:time_start] + key[time_start + 4:]
            verdict = verdicts.get(order)
            if verdict is None:
                verdict = verdicts[order] = test(key)
            return verdict
        return once

    def _named(self, key: bytes, filters: Sequence[TagFilter], explicit_tags: bool) -> bool:
        tags = self._names(self.layout.parse_row_key(key).tags)
        return tags is not None and series_matches(tags, filters, explicit_tags)

    def _scan_rows(self, metric_uid: bytes, first_s: int, last_s: int,
                   narrow: _UidConstraint | None, keep: Callable[[bytes], bool] | None = None,
                   named: Callable[[bytes], bool] | None = None
                   ) -> tuple[list[tuple[bytes, CachedRow]], Iterator[tuple[bytes, StoredRow]]]:
        """The rows of the scan range that ``keep`` keeps: those the hour cache holds (when
        on), and the others as storage streams them."""
        ranges = self.key_ranges(metric_uid, first_s, last_s, narrow)
        table = self.table()
        cache = cache_for(self.tsdb) if self.use_cache and self.cacheable else None
        if cache is not None and able(table, SCAN_STAMPS) is not None:
            self._cache, self._cache_table = cache, table.name
            return self._cached_rows(cache, table, ranges, keep, named)
        # Salt buckets (and narrowed ranges) are independent: HBase scans them concurrently.
        rows = scan_ranges(table, ranges, columns=[b"t"])
        return [], (rows if keep is None else (row for row in rows if keep(row[0])))

    def _cached_rows(self, cache: HourCache, table: Any,
                     ranges: Sequence[tuple[bytes, bytes | None]],
                     keep: Callable[[bytes], bool] | None,
                     named: Callable[[bytes], bool] | None
                     ) -> tuple[list[tuple[bytes, CachedRow]], Iterator[tuple[bytes, Row]]]:
        """Rows whose stamp (read first, without values) matches a kept decode come from the
        cache; the others from storage, remembering the stamp they had (see hour_cache).
        Rows of series ``named`` drops are counted (rows, bytes) but not read further."""
        # A backend that fetches several ranges concurrently (HBase) reads them stamps first.
        one_pass = able(table, SCAN_STAMPED) is not None and (
            len(ranges) == 1 or able(table, SCAN_MANY) is None)
        if named is None and one_pass and not self._warm(cache, table, ranges):
            self._stamps = {}
            return [], self._one_pass(table, ranges, keep)
        sized = named is not None and able(table, SCAN_STAMPS_SIZED) is not None
        scan = table.scan_stamps_sized if sized else table.scan_stamps
        stamped = []
        for start, stop in ranges:
            for row in scan(start, stop, "t"):
                stamped.append(row)
                if len(stamped) % STAMP_CHECK_EVERY_ROWS == 0:  # stamps are cheap: check less
                    self.deadline.check(self._sub.index)
        if keep is not None or sized:
            stamped, dropped = self._sort_stamped(stamped, keep, named if sized else None)
            scanned = stamped + dropped
            self.stats.rows += len(dropped)
            self.stats.bytes += sum(row[3] for row in dropped)
            self.limits.check_read(self._sub, self.stats.points, self.stats.bytes)
        else:
            scanned = stamped
        hits: list[tuple[bytes, CachedRow]] = []
        stamps: dict[bytes, Stamp] = {}
        for row, entry in zip(stamped, cache.lookup(table.name, stamped)):
            if entry is None:
                stamps[row[0]] = (row[1], row[2])
            else:
                hits.append((row[0], entry))
        self._stamps = stamps
        return hits, self._missed_rows(table, ranges, stamps, scanned, keep)

    def _warm(self, cache: HourCache, table: Any,
              ranges: Sequence[tuple[bytes, bytes | None]]) -> bool:
        """Whether the cache holds the first row of the ranges as it is stored: then the
        others are likely kept too (a dashboard asking again), else the read is cold."""
        for start, stop in ranges:
            stamps = table.scan_stamps(start, stop, "t")
            try:
                for key, cells, newest in stamps:
                    return cache.holds(table.name, key, (cells, newest))
            finally:
                stamps.close()
        return False

    def _one_pass(self, table: Any, ranges: Sequence[tuple[bytes, bytes | None]],
                  keep: Callable[[bytes], bool] | None) -> Iterator[tuple[bytes, Row]]:
        """A cold read: every row's values and write times in one scan, each row's stamp
        derived from the very cells read (so a kept entry is exactly what was read)."""
        stamps, weights = self._stamps, self._weights
        for start, stop in ranges:
            for key, row, cells, newest, weight in table.scan_stamped(start, stop, "t"):
                if keep is None or keep(key):
                    stamps[key] = (cells, newest)
                    weights[key] = weight
                    yield key, row

    def _sort_stamped(self, stamped: list[Any], keep: Callable[[bytes], bool] | None,
                      named: Callable[[bytes], bool] | None) -> tuple[list[Any], list[Any]]:
        """The stamped rows ``keep`` keeps, split into those of series ``named`` keeps and
        those it drops; each series decided once."""
        time_start = self.layout.salt_width + self.layout.metric_width
        verdicts: dict[bytes, int] = {}
        wanted, dropped = [], []
        for row in stamped:
            key = row[0]
            order = key[:time_start] + key[time_start + 4:]
            verdict = verdicts.get(order)
            if verdict is None:
                verdict = verdicts[order] = (0 if keep is not None and not keep(key) else
                                             1 if named is not None and not named(key) else 2)
            if verdict == 2:
                wanted.append(row)
            elif verdict == 1:
                dropped.append(row)
        return wanted, dropped

    def _missed_rows(self, table: Any, ranges: Sequence[tuple[bytes, bytes | None]],
                     stamps: dict[bytes, Stamp], stamped: Sequence[tuple[bytes, ...]],
                     keep: Callable[[bytes], bool] | None) -> Iterator[tuple[bytes, Row]]:
        """The rows read from storage: ``stamps``' rows, and in a streaming scan the rows
        written since the stamps were read."""
        if not stamps:
            return
        if len(stamps) * COLD_SHARE >= len(stamped):
            # Mostly cold: one streaming scan. Rows written since the stamps come along too
            # (the grouping runs their series' name filters).
            known = {row[0] for row in stamped}
            for key, row in scan_ranges(table, ranges, columns=[b"t"]):
                if key in stamps or (key not in known and (keep is None or keep(key))):
                    yield key, row
            return
        yield from table.rows(list(stamps), columns=[b"t"])

    def key_ranges(self, metric_uid: bytes, first_s: int, last_s: int,
                   narrow: _UidConstraint | None) -> list[tuple[bytes, bytes | None]]:
        """The key ranges of a metric's rows with base times in ``[first_s, last_s]``, in
        every salt bucket (see :meth:`_salt_ranges`)."""
        return [key_range for salt in self.layout.salt_prefixes()
                for key_range in self._salt_ranges(salt, metric_uid, first_s, last_s, narrow)]

    def _salt_ranges(self, salt: bytes, metric_uid: bytes, first_s: int, last_s: int,
                     narrow: _UidConstraint | None) -> list[tuple[bytes, bytes | None]]:
        """Key ranges to scan in one salt bucket: one, or per hour narrowed by a literal filter.

        Tags in a key are sorted by tagk UID, so a row holding ``tagk=v`` either starts its
        tags with that pair or with a tagk of a lower UID: each hour needs only
        ``[hour, hour+tagk)`` and ``[hour+tagk+v, next(hour+tagk+v))`` for every literal v.
        """
        start, stop = self.layout.metric_scan_range(salt, metric_uid, first_s, last_s)
        hours = (last_s - first_s) // self.row_span_s + 1
        if narrow is None or narrow.literal_uids is None or hours > MAX_NARROWED_HOURS \
                or hours * (len(narrow.literal_uids) + 1) > MAX_EXACT_KEYS:
            return [(start, stop)]  # one wide scan beats that many narrow ones
        ranges: list[tuple[bytes, bytes | None]] = []
        for base_s in range(first_s, last_s + 1, self.row_span_s):
            hour = salt + metric_uid + base_s.to_bytes(4, "big")
            ranges.append((hour, hour + narrow.tagk_uid))
            for tagv_uid in sorted(narrow.literal_uids):
                prefix = hour + narrow.tagk_uid + tagv_uid
                ranges.append((prefix, prefix_stop(prefix)))
        return ranges

    def _exact_rows(self, metric_uid: bytes, tag_sets: list[list[tuple[bytes, bytes]]],
                    first_s: int, last_s: int) -> Iterator[tuple[bytes, Row]]:
        """explicitTags with only literals: the row keys are known, so fetch, don't scan."""
        keys = [self.layout.row_key(metric_uid, base_s, tags)
                for tags in tag_sets for base_s in range(first_s, last_s + 1, self.row_span_s)]
        keys.sort()
        yield from self.table().rows(keys, columns=[b"t"])

    def _tsuid_rows(self, tsuids: Sequence[str], first_s: int, last_s: int) -> _RowStream:
        """The rows of the series ``tsuids`` name: by exact keys while that is cheaper,
        else a scan of their metric keeping those series' rows."""
        width = self.layout.metric_width
        series = {bytes.fromhex(tsuid) for tsuid in tsuids}
        metric_uid = next(iter(series))[:width]
        if self._gets_cheaper(metric_uid, len(series), first_s, last_s):
            keys = sorted(self.layout.row_key_from_tsuid(tsuid, base_s) for tsuid in series
                          for base_s in range(first_s, last_s + 1, self.row_span_s))
            return iter(self.table().rows(keys, columns=[b"t"])), None, ()
        tags_start = self.layout.salt_width + width + 4
        wanted = {tsuid[width:] for tsuid in series}
        hits, stored = self._scan_rows(metric_uid, first_s, last_s, None,
                                       lambda key: key[tags_start:] in wanted)
        return stored, None, hits

    def _gets_cheaper(self, metric_uid: bytes, series: int, first_s: int, last_s: int
                      ) -> bool:
        """Whether fetching ``series`` x hours exact row keys reads less than a range scan
        of the metric over the hours: never past ``MAX_EXACT_KEYS`` keys; always up to
        ``FEW_EXACT_KEYS``; between, when the range holds more rows than there are keys
        (counted keys only, stopping at one more)."""
        keys = series * ((last_s - first_s) // self.row_span_s + 1)
        if keys > MAX_EXACT_KEYS:
            return False
        if keys <= FEW_EXACT_KEYS:
            return True
        table, seen = self.table(), 0
        for start, stop in self.key_ranges(metric_uid, first_s, last_s, None):
            wanted = keys - seen + 1
            rows = table.scan(row_start=start, row_stop=stop, columns=[b"t"], limit=wanted,
                              batch_size=wanted, keys_only=True)
            seen += sum(1 for _ in rows)  # the limit ends (and closes) the scan
            if seen > keys:
                return True
        return False

    def _group(self, rows: Iterator[tuple[bytes, StoredRow]],
               named: Callable[[bytes], bool] | None = None,
               hits: Sequence[tuple[bytes, CachedRow]] = ()) -> Iterable[_SeriesRows]:
        """The rows per series in row-key order: ``hits`` (from the hour cache, in key
        order), then ``rows`` as storage streams them, counted as they come (rows of series
        ``named`` drops are counted, not kept)."""
        by_series = self._group_hits(hits)
        time_start = self.layout.salt_width + self.layout.metric_width
        stats = self.stats
        stats.rows += len(hits)
        stats.bytes += sum(entry.stored_bytes for _, entry in hits)
        self.limits.check_read(self._sub, stats.points, stats.bytes)
        read = 0
        try:
            for key, cells in rows:
                read += 1
                stats.rows += cells.rows if isinstance(cells, CachedRow) else 1
                stats.bytes += (cells.stored_bytes if isinstance(cells, CachedRow)
                                else self._weight(key, cells))
                if stats.rows % CHECK_EVERY_ROWS == 0:
                    self.limits.check_read(self._sub, stats.points, stats.bytes)
                    self.deadline.check(self._sub.index)
                order = key[:time_start] + key[time_start + 4:]
                group = by_series.get(order)
                if group is None:
                    if order in by_series or (named is not None and not named(key)):
                        by_series[order] = None
                        continue
                    tags = self.layout.parse_row_key(key).tags
                    group = by_series[order] = _SeriesRows(order, tags)
                group.rows.append((key, cells))
        finally:
            # A scan stopped by a limit or the deadline is closed here and now. Left to the
            # garbage collector, its HBase scanner would be closed at a random moment, maybe
            # in the middle of another Thrift call on this thread's pooled connection.
            close = getattr(rows, "close", None)
            if close is not None:
                close()
        self.limits.check_read(self._sub, stats.points, stats.bytes)
        groups = [group for _, group in sorted(by_series.items()) if group is not None]
        if hits and read:  # hits came first: back to time order
            for group in groups:
                group.rows.sort(key=itemgetter(0))
        return groups

    def _group_hits(self, hits: Sequence[tuple[bytes, CachedRow]]
                    ) -> dict[bytes, _SeriesRows | None]:
        by_series: dict[bytes, _SeriesRows | None] = {}
        time_start = self.layout.salt_width + self.layout.metric_width
        for key, entry in hits:
            order = key[:time_start] + key[time_start + 4:]
            group = by_series.get(order)
            if group is None:
                group = by_series[order] = _SeriesRows(order, self.layout.parse_row_key(key).tags)
            group.rows.append((key, entry))
        return by_series

    def _weight(self, key: bytes, cells: Row) -> int:
        """A stored row's weight for the byte limit (known already when read in one pass)."""
        weight = self._weights.get(key)
        if weight is None:
            weight = _stored_bytes(key, cells)
            if self._cache is not None:
                self._weights[key] = weight
        return weight

    def _decode(self, groups: Iterable[_SeriesRows], filters: Sequence[TagFilter],
                explicit_tags: bool) -> list[Series]:
        kept = self._matching(groups, filters, explicit_tags)
        # The rows of the series the query matched (what ``"delete": true`` deletes; such a
        # query does not use the cache, so these are stored rows). A cached read does not
        # hold them: its kept rows' cells are let go pass by pass (``_decode_via_cache``).
        self.matched_rows = [] if self._cache is not None else [
            (key, cells) for group, _ in kept for key, cells in group.rows
            if not isinstance(cells, CachedRow)]
        decoded = self._decode_all([group for group, _ in kept])
        self.stats.series += len(kept)
        if self.kept_counts is not None:
            self.kept_counts += [self._counts(group) for group, _ in kept]
        return [self._series(group, tags, rows) for (group, tags), rows in zip(kept, decoded)]

    def _counts(self, group: _SeriesRows) -> tuple[int, int]:
        """A series' rows and their stored bytes, as ``_group`` counted them."""
        return len(group.rows), sum(
            cells.stored_bytes if isinstance(cells, CachedRow) else self._weight(key, cells)
            for key, cells in group.rows)

    def _matching(self, groups: Iterable[_SeriesRows], filters: Sequence[TagFilter],
                  explicit_tags: bool) -> list[tuple[_SeriesRows, dict[str, str]]]:
        """The series whose tag names pass the filters, with those names."""
        kept = []
        for group in groups:
            tags = self._names(group.tag_uids)
            if tags is not None and series_matches(tags, filters, explicit_tags):
                kept.append((group, tags))
        self.limits.check_emitted(self._sub, self._buckets, len(kept))
        return kept

    def _decode_all(self, groups: Sequence[_SeriesRows]) -> list[codec.DecodedRow]:
        """Decode every series' rows in a few vectorised passes, each over many series.

        Series j of a pass has its timestamps shifted by ``j * SERIES_SHIFT_S`` seconds, so
        after the decoder's ascending sort the series lie one after the other; cutting at the
        shift boundaries and subtracting the shift gives each series its own arrays. Passes
        are kept to about ``DECODE_CHUNK_ROWS`` rows: their temporaries then stay small enough
        for the allocator to recycle, which on this class of machine costs far less than fresh
        pages (and bounds peak memory).
        """
        decoded: list[codec.DecodedRow] = []
        chunk: list[_SeriesRows] = []
        rows = 0
        for group in groups:
            chunk.append(group)
            rows += len(group.rows)
            if rows >= DECODE_CHUNK_ROWS:
                decoded += self._decode_counted(chunk)
                chunk, rows = [], 0
        return decoded + self._decode_counted(chunk)

    def _decode_counted(self, groups: Sequence[_SeriesRows]) -> list[codec.DecodedRow]:
        """One decode pass, then the point limit and the deadline."""
        decoded = self._decode_chunk(groups)
        self.stats.points += sum(int(d.ts_ms.size) for d in decoded)
        self.limits.check_read(self._sub, self.stats.points, self.stats.bytes)
        self.deadline.check(self._sub.index)
        return decoded

    def _decode_chunk(self, groups: Sequence[_SeriesRows]) -> list[codec.DecodedRow]:
        if not groups:
            return []
        if self._cache is not None:
            return self._decode_via_cache(groups)
        # Without the cache every row is a stored one.
        batch = [(self._base_time(key) + j * SERIES_SHIFT_S, _data_cells(cast(Row, cells)))
                 for j, group in enumerate(groups) for key, cells in group.rows]
        merged = codec.decode_rows(batch)
        if merged.has_duplicates:
            return [self._decode_one(group) for group in groups]
        shift_ms = SERIES_SHIFT_S * 1000
        cuts = np.searchsorted(merged.ts_ms, np.arange(1, len(groups)) * shift_ms).tolist()
        out = []
        for j, (start, end) in enumerate(zip([0, *cuts], [*cuts, merged.ts_ms.size])):
            ts_ms = merged.ts_ms[start:end]
            ts_ms -= j * shift_ms  # in place: the merged array is ours alone
            out.append(codec.DecodedRow(ts_ms, merged.values[start:end],
                                        merged.is_int[start:end]))
        return out

    def _decode_via_cache(self, groups: Sequence[_SeriesRows]) -> list[codec.DecodedRow]:
        """Each row's points from the cache or one vectorised pass over the others, joined
        per series; the closed rows read from storage are then kept."""
        rows = [row for group in groups for row in group.rows]
        stored = [(key, cells) for key, cells in rows if not isinstance(cells, CachedRow)]
        parts, starts, merged, refused = self._decode_fresh(stored)
        sizes = [len(group.rows) for group in groups]
        if merged is not None and len(stored) == len(rows):
            # A cold pass: the series lie in order in the pass's arrays, which the cache
            # may keep as they are (no copy).
            out = _sliced(merged, parts, sizes)
            _release(groups, self._keep_pass(stored, parts, starts, merged, refused))
            return out
        fresh = iter(parts)
        decoded = [(cells.decoded, cells) if isinstance(cells, CachedRow) else (next(fresh), None)
                   for _, cells in rows]
        out = _joined(decoded, sizes)
        if refused != set(range(len(stored))):
            self._keep_rows(groups, rows, [d for d, _ in decoded], out, refused)
        return out

    def _decode_fresh(self, rows: Sequence[tuple[bytes, Row]]
                      ) -> tuple[list[codec.DecodedRow], list[int], codec.DecodedRow | None,
                                 set[int]]:
        """Rows read from storage decoded in one pass: each row's points (read-only views of
        the pass's arrays, returned too, with where each row starts in them, unless
        duplicates made rows decode one by one), and the rows not to keep (integers beyond
        2**53 need their cells again)."""
        done = _decode_pass(rows, self.layout.salt_width + self.layout.metric_width)
        if done is None:
            return [], [], None, set()
        merged, cuts, big = done
        if merged.has_duplicates:  # rare: decode row by row, keep none
            return ([self._decode_row(key, cells) for key, cells in rows], [], None,
                    set(range(len(rows))))
        starts = [0, *cuts.tolist()]
        parts = [codec.DecodedRow(merged.ts_ms[a:b], merged.values[a:b], merged.is_int[a:b])
                 for a, b in zip(starts, [*starts[1:], merged.ts_ms.size])]
        return parts, starts, merged, set(np.searchsorted(cuts, big, side="right").tolist())

    def _keep_pass(self, stored: Sequence[tuple[bytes, Row]], parts: Sequence[codec.DecodedRow],
                   starts: Sequence[int], merged: codec.DecodedRow, refused: set[int]
                   ) -> dict[bytes, CachedRow]:
        """Keep the closed, settled rows of a cold pass as views of the pass's arrays, one
        block for all, when they are nearly all of it (else each series' rows are copied);
        the entries kept, by row key."""
        cache = self._cache
        assert cache is not None
        wanted = self._keepable_rows(stored, refused)
        sizes = np.diff(np.array([*starts, len(merged)], dtype=np.int64))
        kept_points = int(sizes[wanted].sum())
        if kept_points * SHARED_BLOCK_SHARE < len(merged) * (SHARED_BLOCK_SHARE - 1):
            return self._keep_copies(stored, parts, wanted)
        block = hour_cache.Block(merged)
        entries = [(stored[j][0], CachedRow(self._stamps[stored[j][0]], parts[j],
                                            self._weights[stored[j][0]], block, starts[j]))
                   for j in wanted]
        cache.put_many(self._cache_table, entries)
        return dict(entries)

    def _keep_copies(self, stored: Sequence[tuple[bytes, Row]],
                     parts: Sequence[codec.DecodedRow], wanted: Sequence[int]
                     ) -> dict[bytes, CachedRow]:
        """Keep ``wanted`` rows as views of one copy of their points (a view of the pass's
        arrays would keep the whole pass alive)."""
        cache = self._cache
        assert cache is not None
        if not wanted:
            return {}
        block = _concatenated([parts[j] for j in wanted])
        for array in (block.ts_ms, block.values, block.is_int):
            array.flags.writeable = False
        owner = hour_cache.Block(block)
        entries, at = [], 0
        for j in wanted:
            end = at + len(parts[j])
            key = stored[j][0]
            view = codec.DecodedRow(block.ts_ms[at:end], block.values[at:end],
                                    block.is_int[at:end])
            entries.append((key, CachedRow(self._stamps[key], view, self._weights[key], owner,
                                           at)))
            at = end
        cache.put_many(self._cache_table, entries)
        return dict(entries)

    def _keep_rows(self, groups: Sequence[_SeriesRows], rows: Sequence[tuple[bytes, StoredRow]],
                   decoded: Sequence[codec.DecodedRow], out: Sequence[codec.DecodedRow],
                   refused: set[int]) -> None:
        """Keep the decodes of the closed, settled rows read from storage in a warm pass
        (not those with notes: their cells are needed), each series' kept rows in one copy."""
        stored: list[tuple[bytes, Row]] = []
        parts: list[codec.DecodedRow] = []
        for (key, cells), part in zip(rows, decoded, strict=True):
            if not isinstance(cells, CachedRow):
                stored.append((key, cells))
                parts.append(part)
        self._keep_copies(stored, parts, self._keepable_rows(stored, refused))

    def _keepable_rows(self, stored: Sequence[tuple[bytes, Row]], refused: set[int]) -> list[int]:
        """Which rows read from storage may be kept (not ``refused``): those whose stamp was
        read, closed and settled, without notes (their cells are needed). No call per row: a
        cold read asks for ~24,000 rows at once."""
        now_ms = hour_cache.clock_ms()
        stamps, span_s = self._stamps, self.row_span_s
        at = self.layout.salt_width + self.layout.metric_width
        wanted = []
        for j, (key, cells) in enumerate(stored):
            stamp = stamps.get(key)
            if (stamp is None or j in refused
                    or not keepable(int.from_bytes(key[at:at + 4], "big"), span_s, stamp,
                                    now_ms)):
                continue
            for column in cells:  # a note's qualifier is 3 or 5 bytes: only odd ones
                if len(column) & 1 and codec.is_annotation_qualifier(column[2:]):
                    break
            else:
                wanted.append(j)
        return wanted

    def _decode_one(self, group: _SeriesRows) -> codec.DecodedRow:
        """One series, re-reading write times for rows with duplicate timestamps."""
        rows = [self._decode_row(key, cells) for key, cells in group.rows
                if not isinstance(cells, CachedRow)]
        return codec.DecodedRow(np.concatenate([r.ts_ms for r in rows]),
                                np.concatenate([r.values for r in rows]),
                                np.concatenate([r.is_int for r in rows]))

    def _base_time(self, key: bytes) -> int:
        start = self.layout.salt_width + self.layout.metric_width
        return int.from_bytes(key[start:start + 4], "big")

    def _names(self, tag_uids: Iterable[tuple[bytes, bytes]]) -> dict[str, str] | None:
        try:
            return {self.tsdb.tagk.get_name(k): self.tsdb.tagv.get_name(v) for k, v in tag_uids}
        except NoSuchUniqueId as exc:
            log.warning("skipping a series with an unresolvable UID: %s", exc.message)
            return None

    def _series(self, group: _SeriesRows, tags: dict[str, str],
                decoded: codec.DecodedRow) -> Series:
        notes = [note for key, cells in group.rows if not isinstance(cells, CachedRow)
                 for note in _annotations(self.layout, key, cells)]
        tsuid = group.row_order[self.layout.salt_width:]
        # ``tags`` was built from ``group.tag_uids`` in the same order (see _names).
        tag_uids = dict(zip(tags, group.tag_uids))
        return Series(tsuid=tsuid.hex().upper(), tags=tags, ts_ms=decoded.ts_ms,
                      values=decoded.values, is_int=decoded.is_int, annotations=notes,
                      long_values=self._exact_longs(group, decoded),
                      row_order=group.row_order, tag_uids=tag_uids)

    def _exact_longs(self, group: _SeriesRows, decoded: codec.DecodedRow) -> Int64Array | None:
        """Exact 64-bit values when an integer is beyond a double's 2**53 (rare: counters
        near Long.MAX_VALUE), which the float64 decoder rounds; None otherwise."""
        big = decoded.is_int & (np.abs(decoded.values) >= EXACT_DOUBLE_LIMIT)
        if not big.any():
            return None
        exact: dict[int, int] = {}
        for key, cells in group.rows:
            if isinstance(cells, CachedRow):  # kept only without such integers
                continue
            base_ms = self._base_time(key) * 1000
            for qualifier, value in _data_cells(cells):
                kind = cell_kind(qualifier)
                for offset_ms, point_q, point_v in cell_points(kind, qualifier, value) \
                        if kind is not None else ():
                    if not point_q[-1] & codec.FLAG_FLOAT:
                        exact[base_ms + offset_ms] = int.from_bytes(point_v, "big", signed=True)
        longs = np.where(decoded.is_int & ~big, decoded.values, 0.0).astype(np.int64)
        for i in np.flatnonzero(big).tolist():
            longs[i] = exact[int(decoded.ts_ms[i])]
        return longs

    def _decode_row(self, key: bytes, cells: Row) -> codec.DecodedRow:
        base_time_s = self._base_time(key)
        data = _data_cells(cells)
        decoded = codec.decode_row(base_time_s, data)
        if decoded.has_duplicates:
            # Rare: the same timestamp in two cells. Re-read with write times, newest wins.
            times = self.table().row_write_times(key)
            write_ts = {column[2:]: ts for column, ts in times.items()}
            decoded = codec.decode_row(base_time_s, data, write_ts)
        return decoded


def _release(groups: Sequence[_SeriesRows], kept: dict[bytes, CachedRow]) -> None:
    """Each kept row's cells replaced by its kept entry, so the cells (~8 bytes per point)
    are freed now, not when the whole read is done; a kept row has no note and no integer
    beyond 2**53, so nothing after the decode needs its cells."""
    if kept:
        for group in groups:
            group.rows = [(key, kept.get(key, cells)) for key, cells in group.rows]


_Pass = tuple[codec.DecodedRow, np.ndarray, np.ndarray]
"""A pass's decode: its points (rows one after the other, each in time order), where rows
2.. start, and the points that are integers beyond 2**53."""


def _decode_pass(rows: Sequence[tuple[bytes, Row]], time_at: int) -> _Pass | None:
    """Rows read from storage decoded in one vectorised pass; ``time_at``: where a row key's
    base time starts.

    Row j's timestamps are shifted by ``j * SERIES_SHIFT_S`` seconds, so the decoder's sort
    leaves the rows one after the other; the shift is then taken back.
    """
    if not rows:
        return None
    merged = decode_stored_rows(
        ((int.from_bytes(key[time_at:time_at + 4], "big") + j * SERIES_SHIFT_S, cells)
         for j, (key, cells) in enumerate(rows)), DATA_PREFIX)
    shift_ms = SERIES_SHIFT_S * 1000
    cuts = np.searchsorted(merged.ts_ms, np.arange(1, len(rows)) * shift_ms)
    if merged.has_duplicates:  # the reader decodes such a pass row by row
        return merged, cuts, np.empty(0, np.int64)
    counts = np.diff(cuts, prepend=0, append=merged.ts_ms.size)
    merged.ts_ms -= np.repeat(np.arange(len(rows), dtype=np.int64) * shift_ms, counts)
    for array in (merged.ts_ms, merged.values, merged.is_int):
        # The cache may keep these arrays and hand them to later queries as they are.
        array.flags.writeable = False
    big = np.flatnonzero(merged.is_int & (np.abs(merged.values) >= EXACT_DOUBLE_LIMIT))
    return merged, cuts, big


@dataclass(frozen=True)
class _UidConstraint:
    tagk_uid: bytes
    excluded: bool
    literal_uids: frozenset[bytes] | None


def _passes(layout: codec.RowKeyLayout, key: bytes,
            constraints: Sequence[_UidConstraint]) -> bool:
    """The byte-level pre-filter: keys present (or absent for not_key), literal tagv UIDs."""
    if not constraints:
        return True
    tags = dict(layout.parse_row_key(key).tags)
    for constraint in constraints:
        tagv_uid = tags.get(constraint.tagk_uid)
        if constraint.excluded:
            if tagv_uid is not None:
                return False
            continue
        if tagv_uid is None:
            return False
        if constraint.literal_uids is not None and tagv_uid not in constraint.literal_uids:
            return False
    return True


def _enforced_by_uids(tag_filter: TagFilter) -> bool:
    """A filter the row keys' UIDs already decide (a case-sensitive literal_or)."""
    return tag_filter.type == "literal_or" and not getattr(tag_filter, "negated", True)


def _narrowing(constraints: Sequence[_UidConstraint]) -> _UidConstraint | None:
    """The literal constraint whose tagk sorts first: the best one to narrow scans with."""
    literal = [c for c in constraints if c.literal_uids and not c.excluded]
    return min(literal, key=lambda c: c.tagk_uid) if literal else None


def _exact_tag_sets(constraints: Sequence[_UidConstraint]
                    ) -> list[list[tuple[bytes, bytes]]] | None:
    """Every exact tag set the constraints allow, or None when some key is not literal."""
    if any(c.literal_uids is None or c.excluded for c in constraints):
        return None
    if math.prod(len(c.literal_uids or ()) for c in constraints) > MAX_EXACT_KEYS:
        return None  # too many to fetch by key, whatever the range: scan
    choices = [[(c.tagk_uid, v) for v in sorted(c.literal_uids or ())] for c in constraints]
    return [list(combo) for combo in itertools.product(*choices)]


def _stored_bytes(key: bytes, cells: Row) -> int:
    """Per cell its row key, column name and value, as OpenTSDB weighs its KeyValues: many
    small cells cost more than one compacted column."""
    return len(key) * len(cells) + sum(map(len, cells)) + sum(map(len, cells.values()))


def _sliced(merged: codec.DecodedRow, parts: Sequence[codec.DecodedRow],
            rows_per_series: Sequence[int]) -> list[codec.DecodedRow]:
    """Series out of one decode pass whose rows lie series after series, in time order."""
    row_end = np.cumsum([p.ts_ms.size for p in parts], dtype=np.int64)
    series_end = row_end[np.cumsum(rows_per_series) - 1].tolist()
    return [codec.DecodedRow(merged.ts_ms[a:b], merged.values[a:b], merged.is_int[a:b])
            for a, b in zip([0, *series_end], series_end)]


def _joined(rows: Sequence[tuple[codec.DecodedRow, CachedRow | None]],
            rows_per_series: Sequence[int]) -> list[codec.DecodedRow]:
    """Consecutive rows (each ascending) joined per series: a slice of a kept block when the
    series' rows lie one after the other in it (no copy), else one copy of that series."""
    out = []
    at = 0
    for size in rows_per_series:
        series = rows[at:at + size]
        at += size
        out.append(_block_slice(series) or _concatenated([d for d, _ in series], ordered=True))
    return out


def _block_slice(rows: Sequence[tuple[codec.DecodedRow, CachedRow | None]]
                 ) -> codec.DecodedRow | None:
    """The rows as one slice of the block they were kept in, when they lie in order in it."""
    first = rows[0][1] if rows else None
    if first is None or first.block is None or first.offset < 0:
        return None
    block, start = first.block, first.offset
    end = start
    for decoded, entry in rows:
        if entry is None or entry.block is not block or entry.offset != end:
            return None
        end += len(decoded)
    arrays = block.arrays
    return codec.DecodedRow(arrays.ts_ms[start:end], arrays.values[start:end],
                            arrays.is_int[start:end])


def _concatenated(parts: Sequence[codec.DecodedRow], ordered: bool = False) -> codec.DecodedRow:
    """Rows in one copy; for one series' rows (``ordered``), rows that overlap in time (not
    expected) are sorted."""
    ts_ms = np.concatenate([p.ts_ms for p in parts])
    values = np.concatenate([p.values for p in parts])
    is_int = np.concatenate([p.is_int for p in parts])
    if ordered and ts_ms.size > 1 and not bool((ts_ms[1:] > ts_ms[:-1]).all()):
        order = np.argsort(ts_ms, kind="stable")
        return codec.DecodedRow(ts_ms[order], values[order], is_int[order])
    return codec.DecodedRow(ts_ms, values, is_int)


def _data_cells(cells: Row) -> list[tuple[bytes, bytes]]:
    """``(qualifier, value)`` of the ``t`` family (the decoder skips non-data qualifiers)."""
    return [(column[2:], value) for column, value in cells.items()
            if column.startswith(DATA_PREFIX)]


def _annotations(layout: codec.RowKeyLayout, key: bytes, cells: Row) -> list[dict[str, Any]]:
    """The row's notes, ready for the response: every field Grafana reads, times in seconds
    (the serializer keeps those starting in the query range)."""
    notes = []
    for column, value in cells.items():
        if column.startswith(DATA_PREFIX) and codec.is_annotation_qualifier(column[2:]):
            note = query_note(layout, key, column[2:], value)
            if note is not None:
                notes.append(note)
    return notes

