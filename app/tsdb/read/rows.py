"""The row source of one sub-query: storage scans (or exact keys) through the hour cache,
grouped per series, decoded in vectorised passes.

1. Resolve the metric and the filters' tag keys and literal values to UIDs (unknown names are
   OpenTSDB's 400s).
2. Scan each salt bucket over the hour rows of the scan range (``keys.scan_hours_s``), or,
   with explicitTags and only literal filters, fetch the exact row keys while that is cheaper.
3. Keep the rows whose tag UIDs pass the per-key constraints, in bulk on bytes; resolve the
   surviving tag UIDs to names and run the remaining (wildcard, regexp, ...) filters once per
   series, not per row.
4. Decode each series' rows into numpy arrays in a few passes (``decode``); rows the hour
   cache holds come decoded (``cached``), and closed rows read are kept (``keep``).

What combines this source with the others (closed ranges, fused decode, rollups, the split
helper's half) is ``app.tsdb.read.series`` and ``app.tsdb.reader``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from app.engine.model import Series
from app.errors import BadRequestError, NoSuchUniqueId
from app.query.ast import SubQuery
from app.query.filters import KeyConstraint, TagFilter, merge_filters, series_matches
from app.query.limits import NO_DEADLINE, Deadline, QueryLimits
from app.storage import codec
from app.storage.base import SCAN_STAMPS, Row, Table, able, narrowed, scan_ranges
from app.tsdb import TSDB
from app.tsdb.hour_cache import CachedRow, cache_for
from app.tsdb.read import cached
from app.tsdb.read.decode import (
    decode_row,
    decode_series,
    exact_longs,
    row_annotations,
    stored_bytes,
)
from app.tsdb.read.keep import Keeper
from app.tsdb.read.keys import (
    FEW_EXACT_KEYS,
    MAX_EXACT_KEYS,
    MAX_TIMESPAN_S,
    KeyRange,
    SeriesRows,
    UidConstraint,
    base_time_s,
    enforced_by_uids,
    exact_tag_sets,
    key_ranges,
    narrowing,
    passes,
    series_order,
)
from app.tsdb.read.value_uids import scan_regex
from app.tsdb.tsuid import parse_tsuid

log = logging.getLogger(__name__)

# Rows decoded per vectorised pass (about 1M points of 10-second data).
DECODE_CHUNK_ROWS = 3000
# Rows fetched between checks of the byte limit and the deadline.
CHECK_EVERY_ROWS = 256

StoredRow = Row | CachedRow
"""A row's cells as stored, or its decode kept by the hour cache."""

RowStream = tuple[Iterator[tuple[bytes, StoredRow]], Callable[[bytes], bool] | None,
                  Sequence[tuple[bytes, CachedRow]]]
"""Rows as storage streams them, the per-series name test to run on them (None: none),
and the rows found in the hour cache (in key order, ahead of the stream): see ``group``."""


@dataclass
class ReadStats:
    rows: int = 0
    points: int = 0
    series: int = 0
    bytes: int = 0
    hours_not_rolled: int = 0  # hours an explicit ROLLUP_NOFALLBACK read uncovered rollups of


class RowReader:
    """Reads the rows of one sub-query from one table and decodes them per series."""

    # Whether this reader's rows are raw data rows the hour cache may keep.
    cacheable = True
    # Whether its reads may be split with the helper process (raw hour rows only).
    splittable = False
    # Seconds between two row base times (rollup tables may use longer rows).
    row_span_s = MAX_TIMESPAN_S

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
        self.sub = SubQuery("none")  # the sub-query being read
        self.buckets = 0  # its filled buckets (for the buckets x series limit)
        # Set when this read goes through the hour cache: what it keeps of the rows it reads.
        self.keeper: Keeper | None = None
        # Closed rows through range entries (off for the inner read that fills one).
        self.range_reads = True
        # (rows, stored bytes) of each series read, when recorded (closed_range fills one).
        self.kept_counts: list[tuple[int, int]] | None = None

    def table(self) -> Table:
        return self.tsdb.data_table()

    def inner(self) -> RowReader:
        """A reader like this one (same class, table, limits, deadline) with stats of its
        own, reading row by row and recording each series' counts (``closed_range``)."""
        inner = copy.copy(self)
        inner.stats = ReadStats()
        inner.matched_rows = []
        inner.range_reads = False
        inner.keeper = None
        inner.kept_counts = []
        return inner

    def range_cache_on(self) -> bool:
        """Whether this read may validate closed rows a range at a time."""
        return self.range_reads and self.use_cache and self.cacheable

    def read_stored(self, sub: SubQuery, filters: Sequence[TagFilter], first_s: int,
                    last_s: int) -> list[Series]:
        """The series of ``sub`` from its rows with base times in ``[first_s, last_s]``."""
        return self.decode(self.row_groups(sub, filters, first_s, last_s), filters,
                           sub.explicit_tags)

    def row_groups(self, sub: SubQuery, filters: Sequence[TagFilter], first_s: int,
                   last_s: int) -> Iterable[SeriesRows]:
        """The rows of each series ``sub`` may match (the name filters not yet run)."""
        return self.group(*self.row_stream(sub, filters, first_s, last_s))

    def row_stream(self, sub: SubQuery, filters: Sequence[TagFilter], first_s: int,
                   last_s: int) -> RowStream:
        """The rows ``sub`` may match as storage streams them (see :meth:`group`)."""
        if sub.tsuids:
            self._check_tsuids(sub.tsuids)
            return self._tsuid_rows(sub.tsuids, first_s, last_s)
        assert sub.metric is not None
        metric_uid = self.tsdb.metrics.get_id(sub.metric)
        constraints = self.resolve(merge_filters(filters))
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

    def resolve(self, constraints: list[KeyConstraint]) -> list[UidConstraint]:
        """The filters' key constraints with UIDs for names (unknown names: 400s)."""
        resolved = []
        for constraint in constraints:
            tagk_uid = self.tsdb.tagk.get_id(constraint.tagk)
            literal_uids = None
            if constraint.literals is not None:
                literal_uids = self._literal_uids(constraint.literals)
            resolved.append(UidConstraint(tagk_uid, constraint.excluded, literal_uids))
        return resolved

    def _literal_uids(self, literals: frozenset[str]) -> frozenset[bytes]:
        """UIDs of literal tag values; an unknown one is a 400 unless
        ``tsd.query.skip_unresolved_tagvs`` says to drop it (then nothing may match)."""
        if not self.tsdb.config["tsd.query.skip_unresolved_tagvs"]:
            return frozenset(self.tsdb.tagv.get_id(v) for v in sorted(literals))
        found = (self.tsdb.tagv.find_id(v) for v in sorted(literals))
        return frozenset(uid for uid in found if uid is not None)

    def _metric_rows(self, metric_uid: bytes, constraints: list[UidConstraint],
                     explicit_tags: bool, filters: Sequence[TagFilter], first_s: int,
                     last_s: int) -> RowStream:
        exact = exact_tag_sets(constraints) if explicit_tags and filters else None
        if exact is not None and self._gets_cheaper(metric_uid, len(exact), first_s, last_s):
            rows = self._exact_rows(metric_uid, exact, first_s, last_s)
            return (row for row in rows if passes(self.layout, row[0], constraints)), None, ()
        keep = None
        if constraints:
            keep = self._per_series(lambda key: passes(self.layout, key, constraints))
        named = None
        if any(not enforced_by_uids(f) for f in filters):
            # A wildcard or regexp filter may drop a series: decide it once per series, from
            # the key, before any value is read or decoded.
            named = self._per_series(lambda key: self._named(key, filters, explicit_tags))
        # HBase narrows the scan; not by value filters' values for a range entry's read
        # (the entry is shared by every value filter on the same keys: closed_range).
        regex = scan_regex(self.tsdb, self.table(), filters, constraints,
                           values=self.kept_counts is None)
        hits, stored = self.scan_rows(metric_uid, first_s, last_s, narrowing(constraints),
                                      keep, named, row_regex=regex)
        return stored, named, hits

    def _per_series(self, test: Callable[[bytes], bool]) -> Callable[[bytes], bool]:
        """``test`` of a row key, run once per series (the key without its base time)."""
        verdicts: dict[bytes, bool] = {}
        layout = self.layout

        def once(key: bytes) -> bool:
            order = series_order(layout, key)
            verdict = verdicts.get(order)
            if verdict is None:
                verdict = verdicts[order] = test(key)
            return verdict
        return once

    def _named(self, key: bytes, filters: Sequence[TagFilter], explicit_tags: bool) -> bool:
        tags = self.names(self.layout.parse_row_key(key).tags)
        return tags is not None and series_matches(tags, filters, explicit_tags)

    def scan_rows(self, metric_uid: bytes, first_s: int, last_s: int,
                  narrow: UidConstraint | None, keep: Callable[[bytes], bool] | None = None,
                  named: Callable[[bytes], bool] | None = None, row_regex: str | None = None
                  ) -> tuple[list[tuple[bytes, CachedRow]], Iterator[tuple[bytes, StoredRow]]]:
        """The rows of the scan range that ``keep`` keeps: those the hour cache holds (when
        on), and the others as storage streams them. ``row_regex`` (``key_regex``) narrows
        the scans on the storage servers where the table can; ``keep`` still decides."""
        ranges = self.key_ranges(metric_uid, first_s, last_s, narrow)
        table = narrowed(self.table(), row_regex)
        cache = cache_for(self.tsdb) if self.use_cache and self.cacheable else None
        if cache is not None and able(table, SCAN_STAMPS) is not None:
            self.keeper = Keeper(cache, table.name, self.layout, self.row_span_s)
            hits, stored = cached.rows(self.keeper, table, ranges, keep, named,
                                       lambda: self.deadline.check(self.sub.index),
                                       self._count_dropped)
            return hits, stored
        # Salt buckets (and narrowed ranges) are independent: HBase scans them concurrently.
        rows = scan_ranges(table, ranges, columns=[b"t"])
        return [], (rows if keep is None else (row for row in rows if keep(row[0])))

    def _count_dropped(self, dropped: Sequence[tuple[bytes, int, int, int]]) -> None:
        """Rows of series a name filter dropped: counted (rows, stored bytes), not read."""
        self.stats.rows += len(dropped)
        self.stats.bytes += sum(row[3] for row in dropped)
        self.limits.check_read(self.sub, self.stats.points, self.stats.bytes)

    def key_ranges(self, metric_uid: bytes, first_s: int, last_s: int,
                   narrow: UidConstraint | None) -> list[KeyRange]:
        """The key ranges of a metric's rows with base times in ``[first_s, last_s]``."""
        return key_ranges(self.layout, metric_uid, first_s, last_s, narrow, self.row_span_s)

    def _exact_rows(self, metric_uid: bytes, tag_sets: list[list[tuple[bytes, bytes]]],
                    first_s: int, last_s: int) -> Iterator[tuple[bytes, Row]]:
        """explicitTags with only literals: the row keys are known, so fetch, don't scan."""
        keys = [self.layout.row_key(metric_uid, base_s, tags)
                for tags in tag_sets for base_s in range(first_s, last_s + 1, self.row_span_s)]
        keys.sort()
        yield from self.table().rows(keys, columns=[b"t"])

    def _tsuid_rows(self, tsuids: Sequence[str], first_s: int, last_s: int) -> RowStream:
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
        hits, stored = self.scan_rows(metric_uid, first_s, last_s, None,
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

    def group(self, rows: Iterator[tuple[bytes, StoredRow]],
              named: Callable[[bytes], bool] | None = None,
              hits: Sequence[tuple[bytes, CachedRow]] = ()) -> Iterable[SeriesRows]:
        """The rows per series in row-key order: ``hits`` (from the hour cache, in key
        order), then ``rows`` as storage streams them, counted as they come (rows of series
        ``named`` drops are counted, not kept)."""
        by_series = self._group_hits(hits)
        stats = self.stats
        stats.rows += len(hits)
        stats.bytes += sum(entry.stored_bytes for _, entry in hits)
        self.limits.check_read(self.sub, stats.points, stats.bytes)
        read = 0
        try:
            for key, cells in rows:
                read += 1
                stats.rows += cells.rows if isinstance(cells, CachedRow) else 1
                stats.bytes += (cells.stored_bytes if isinstance(cells, CachedRow)
                                else self.weight(key, cells))
                if stats.rows % CHECK_EVERY_ROWS == 0:
                    self.limits.check_read(self.sub, stats.points, stats.bytes)
                    self.deadline.check(self.sub.index)
                order = series_order(self.layout, key)
                group = by_series.get(order)
                if group is None:
                    if order in by_series or (named is not None and not named(key)):
                        by_series[order] = None
                        continue
                    tags = self.layout.parse_row_key(key).tags
                    group = by_series[order] = SeriesRows(order, tags)
                group.rows.append((key, cells))
        finally:
            close_scan(rows)
        self.limits.check_read(self.sub, stats.points, stats.bytes)
        groups = [group for _, group in sorted(by_series.items()) if group is not None]
        if hits and read:  # hits came first: back to time order
            for group in groups:
                group.rows.sort(key=itemgetter(0))
        return groups

    def _group_hits(self, hits: Sequence[tuple[bytes, CachedRow]]
                    ) -> dict[bytes, SeriesRows | None]:
        by_series: dict[bytes, SeriesRows | None] = {}
        for key, entry in hits:
            order = series_order(self.layout, key)
            group = by_series.get(order)
            if group is None:
                group = by_series[order] = SeriesRows(order, self.layout.parse_row_key(key).tags)
            group.rows.append((key, entry))
        return by_series

    def weight(self, key: bytes, cells: Row) -> int:
        """A stored row's weight for the byte limit (known already when read in one pass)."""
        if self.keeper is None:
            return stored_bytes(key, cells)
        return self.keeper.weight(key, cells)

    def decode(self, groups: Iterable[SeriesRows], filters: Sequence[TagFilter],
               explicit_tags: bool) -> list[Series]:
        kept = self.matching(groups, filters, explicit_tags)
        # The rows of the series the query matched (what ``"delete": true`` deletes; such a
        # query does not use the cache, so these are stored rows). A cached read does not
        # hold them: its kept rows' cells are let go pass by pass (``keep``).
        self.matched_rows = [] if self.keeper is not None else [
            (key, cells) for group, _ in kept for key, cells in group.rows
            if not isinstance(cells, CachedRow)]
        decoded = self._decode_all([group for group, _ in kept])
        self.stats.series += len(kept)
        if self.kept_counts is not None:
            self.kept_counts += [self._counts(group) for group, _ in kept]
        return [self._series(group, tags, rows) for (group, tags), rows in zip(kept, decoded)]

    def _counts(self, group: SeriesRows) -> tuple[int, int]:
        """A series' rows and their stored bytes, as ``group`` counted them."""
        return len(group.rows), sum(
            cells.stored_bytes if isinstance(cells, CachedRow) else self.weight(key, cells)
            for key, cells in group.rows)

    def matching(self, groups: Iterable[SeriesRows], filters: Sequence[TagFilter],
                 explicit_tags: bool) -> list[tuple[SeriesRows, dict[str, str]]]:
        """The series whose tag names pass the filters, with those names."""
        kept = []
        for group in groups:
            tags = self.names(group.tag_uids)
            if tags is not None and series_matches(tags, filters, explicit_tags):
                kept.append((group, tags))
        self.limits.check_emitted(self.sub, self.buckets, len(kept))
        return kept

    def _decode_all(self, groups: Sequence[SeriesRows]) -> list[codec.DecodedRow]:
        """Decode every series' rows in a few vectorised passes, each over many series.
        Passes are kept to about ``DECODE_CHUNK_ROWS`` rows: their temporaries then stay
        small enough for the allocator to recycle, which on this class of machine costs far
        less than fresh pages (and bounds peak memory)."""
        decoded: list[codec.DecodedRow] = []
        chunk: list[SeriesRows] = []
        rows = 0
        for group in groups:
            chunk.append(group)
            rows += len(group.rows)
            if rows >= DECODE_CHUNK_ROWS:
                decoded += self._decode_counted(chunk)
                chunk, rows = [], 0
        return decoded + self._decode_counted(chunk)

    def _decode_counted(self, groups: Sequence[SeriesRows]) -> list[codec.DecodedRow]:
        """One decode pass, then the point limit and the deadline."""
        decoded = self._decode_chunk(groups)
        self.stats.points += sum(int(d.ts_ms.size) for d in decoded)
        self.limits.check_read(self.sub, self.stats.points, self.stats.bytes)
        self.deadline.check(self.sub.index)
        return decoded

    def _decode_chunk(self, groups: Sequence[SeriesRows]) -> list[codec.DecodedRow]:
        if not groups:
            return []
        if self.keeper is not None:
            return self.keeper.decode(groups, self.decode_row)
        # Without the cache every row is a stored one.
        out = decode_series(self.layout, groups)
        if out is None:  # rare: the same timestamp in two cells
            return [self._decode_one(group) for group in groups]
        return out

    def _decode_one(self, group: SeriesRows) -> codec.DecodedRow:
        """One series, re-reading write times for rows with duplicate timestamps."""
        rows = [self.decode_row(key, cells) for key, cells in group.rows]
        return codec.DecodedRow(np.concatenate([r.ts_ms for r in rows]),
                                np.concatenate([r.values for r in rows]),
                                np.concatenate([r.is_int for r in rows]))

    def base_time(self, key: bytes) -> int:
        return base_time_s(self.layout, key)

    def names(self, tag_uids: Iterable[tuple[bytes, bytes]]) -> dict[str, str] | None:
        """Tag names of a series' tag UIDs; None (logged) when one does not resolve."""
        try:
            return {self.tsdb.tagk.get_name(k): self.tsdb.tagv.get_name(v) for k, v in tag_uids}
        except NoSuchUniqueId as exc:
            log.warning("skipping a series with an unresolvable UID: %s", exc.message)
            return None

    def _series(self, group: SeriesRows, tags: dict[str, str],
                decoded: codec.DecodedRow) -> Series:
        notes = [note for key, cells in group.rows if not isinstance(cells, CachedRow)
                 for note in row_annotations(self.layout, key, cells)]
        tsuid = group.row_order[self.layout.salt_width:]
        # ``tags`` was built from ``group.tag_uids`` in the same order (see names).
        tag_uids = dict(zip(tags, group.tag_uids))
        return Series(tsuid=tsuid.hex().upper(), tags=tags, ts_ms=decoded.ts_ms,
                      values=decoded.values, is_int=decoded.is_int, annotations=notes,
                      long_values=exact_longs(self.layout, group, decoded),
                      row_order=group.row_order, tag_uids=tag_uids)

    def decode_row(self, key: bytes, cells: Row) -> codec.DecodedRow:
        return decode_row(self.table(), self.layout, key, cells)


def close_scan(rows: object) -> None:
    """Close a scan stopped by a limit or the deadline now. Left to the garbage collector,
    its HBase scanner would be closed at a random moment, maybe in the middle of another
    Thrift call on this thread's pooled connection."""
    close = getattr(rows, "close", None)
    if close is not None:
        close()
