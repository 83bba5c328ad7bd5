"""The row source of one sub-query: storage scans (or exact keys) through the hour cache,
grouped per series, decoded in vectorised passes.

1. The rows in UIDs come from the plan (``plan``, ``select``): the metric, the filters' key
   constraints, the tsuids' series, and whether their exact keys are fetched.
2. Scan each salt bucket over the hour rows asked (``keys.key_ranges``), or fetch the exact
   row keys (tsuids, explicitTags with only literal filters) when the plan says so.
3. Keep the rows whose tag UIDs pass the per-key constraints, in bulk on bytes; resolve the
   surviving tag UIDs to names and run the remaining (wildcard, regexp, ...) filters once per
   series, not per row.
4. Decode each series' rows into numpy arrays in a few passes (``decode``); rows the hour
   cache holds come decoded (``cached``), and closed rows read are kept (``keep``).

What combines this source with the others (closed ranges, fused decode, rollups, the split
helper's half) is ``app.tsdb.read.series`` and ``app.tsdb.reader``; all of them read the one
plan the reader holds.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from app.engine.model import Series
from app.errors import NoSuchUniqueId
from app.query.filters import series_matches
from app.query.limits import NO_DEADLINE, Deadline, QueryLimits
from app.storage import codec
from app.storage.base import Row, Table, narrowed, scan_ranges
from app.tsdb import TSDB
from app.tsdb.hour_cache import CachedRow, StampedRow, cache_for
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
    MAX_TIMESPAN_S,
    KeyRange,
    SeriesRows,
    UidConstraint,
    base_time_s,
    key_ranges,
    passes,
    series_order,
)
from app.tsdb.read.plan import CachePolicy, ReadPlan

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
    """Reads the rows of one sub-query's plan from one table and decodes them per series."""

    # Seconds between two row base times (rollup tables may use longer rows).
    row_span_s = MAX_TIMESPAN_S

    def __init__(self, tsdb: TSDB, limits: QueryLimits | None = None,
                 deadline: Deadline = NO_DEADLINE, plan: ReadPlan | None = None) -> None:
        self.tsdb = tsdb
        self.layout = tsdb.layout
        self.limits = limits or QueryLimits()
        self.deadline = deadline
        self.stats = ReadStats()
        self.matched_rows: list[tuple[bytes, Row]] = []
        self.read_plan = plan  # what is being read: see ``plan``
        # Set when this read goes through the hour cache: what it keeps of the rows it reads.
        self.keeper: Keeper | None = None
        # (rows, stored bytes) of each series read, when recorded (closed_ranges fills one).
        self.kept_counts: list[tuple[int, int]] | None = None
        # Every row's stamp in the read's key ranges when read already (closed_ranges on
        # HBase, whose range stamp is every row's stamp): the hour cache takes them as they
        # are instead of scanning the stamps again.
        self.row_stamps: list[StampedRow] | None = None

    @property
    def plan(self) -> ReadPlan:
        """The plan this reader reads (made once per sub-query: ``app.tsdb.read.plan``)."""
        assert self.read_plan is not None, "a read starts with its plan"
        return self.read_plan

    def table(self) -> Table:
        return self.tsdb.data_table()

    def range_table(self) -> Table:
        """The table a range entry's stamp is read from (``closed_ranges``): narrowed on
        the storage servers by the regexp the entry's rows are read with
        (``plan.key_row_regex``, see :meth:`row_stream`), so the stamp is of those rows
        only, not of every series of the metric."""
        return narrowed(self.table(), self.plan.key_row_regex)

    def inner(self) -> RowReader:
        """A reader like this one (same class, table, limits, deadline) with stats of its
        own, reading row by row and recording each series' counts (``closed_ranges``)."""
        inner = copy.copy(self)
        inner.stats = ReadStats()
        inner.matched_rows = []
        inner.keeper = None
        inner.kept_counts = []
        inner.row_stamps = None
        inner.read_plan = dataclasses.replace(
            self.plan, cache=CachePolicy(rows=self.plan.cache.rows, ranges=False))
        return inner

    def read_stored(self, first_s: int, last_s: int) -> list[Series]:
        """The plan's series from its rows with base times in ``[first_s, last_s]``."""
        return self.decode(self.row_groups(first_s, last_s))

    def row_groups(self, first_s: int, last_s: int) -> Iterable[SeriesRows]:
        """The rows of each series the plan may match (the name filters not yet run)."""
        return self.group(*self.row_stream(first_s, last_s))

    def row_stream(self, first_s: int, last_s: int) -> RowStream:
        """The rows the plan may match as storage streams them (see :meth:`group`)."""
        selection = self.plan.selection
        if selection.tsuids:
            return self._tsuid_rows(first_s, last_s)
        constraints = selection.constraints
        if selection.by_key and selection.exact is not None:
            rows = self._exact_rows(selection.metric_uid, selection.exact, first_s, last_s)
            return (row for row in rows if passes(self.layout, row[0], constraints)), None, ()
        keep = self.constraint_test()
        named = None
        if selection.named:
            # A wildcard or regexp filter may drop a series: decide it once per series, from
            # the key, before any value is read or decoded.
            named = self._per_series(self._named)
        # HBase narrows the scan; not by value filters' values for a range entry's read
        # (the entry is shared by every value filter on the same keys: closed_ranges).
        regex = self.plan.row_regex if self.kept_counts is None else self.plan.key_row_regex
        hits, stored = self.scan_rows(selection.metric_uid, first_s, last_s,
                                      selection.narrow, keep, named, row_regex=regex)
        return stored, named, hits

    def constraint_test(self) -> Callable[[bytes], bool] | None:
        """The plan's UID constraints as a test of a row key, run once per series (None:
        none): the rows a scan keeps."""
        constraints = self.plan.selection.constraints
        if not constraints:
            return None
        return self._per_series(lambda key: passes(self.layout, key, constraints))

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

    def _named(self, key: bytes) -> bool:
        tags = self.names(self.layout.parse_row_key(key).tags)
        plan = self.plan
        return tags is not None and series_matches(tags, plan.filters, plan.sub.explicit_tags)

    def scan_rows(self, metric_uid: bytes, first_s: int, last_s: int,
                  narrow: UidConstraint | None, keep: Callable[[bytes], bool] | None = None,
                  named: Callable[[bytes], bool] | None = None, row_regex: str | None = None
                  ) -> tuple[list[tuple[bytes, CachedRow]], Iterator[tuple[bytes, StoredRow]]]:
        """The rows of the scan range that ``keep`` keeps: those the hour cache holds (when
        the plan uses it), and the others as storage streams them. ``row_regex``
        (``key_regex``) narrows the scans on the storage servers where the table can; ``keep``
        still decides."""
        ranges = self.key_ranges(metric_uid, first_s, last_s, narrow)
        table = narrowed(self.table(), row_regex)
        cache = cache_for(self.tsdb) if self.plan.cache.rows else None
        if cache is not None:
            self.keeper = Keeper(cache, table.name, self.layout, self.row_span_s)
            hits, stored = cached.rows(self.keeper, table, ranges, keep, named,
                                       lambda: self.deadline.check(self.plan.sub.index),
                                       self._count_dropped, self.row_stamps)
            return hits, stored
        # Salt buckets (and narrowed ranges) are independent: HBase scans them concurrently.
        rows = scan_ranges(table, ranges, columns=[b"t"])
        return [], (rows if keep is None else (row for row in rows if keep(row[0])))

    def _count_dropped(self, dropped: Sequence[tuple[bytes, int, int, int]]) -> None:
        """Rows of series a name filter dropped: counted (rows, stored bytes), not read."""
        self.stats.rows += len(dropped)
        self.stats.bytes += sum(row[3] for row in dropped)
        self.limits.check_read(self.plan.sub, self.stats.points, self.stats.bytes)

    def key_ranges(self, metric_uid: bytes, first_s: int, last_s: int,
                   narrow: UidConstraint | None) -> list[KeyRange]:
        """The key ranges of a metric's rows with base times in ``[first_s, last_s]``."""
        return key_ranges(self.layout, metric_uid, first_s, last_s, narrow, self.row_span_s)

    def _exact_rows(self, metric_uid: bytes, tag_sets: Sequence[Sequence[tuple[bytes, bytes]]],
                    first_s: int, last_s: int) -> Iterator[tuple[bytes, Row]]:
        """explicitTags with only literals: the row keys are known, so fetch, don't scan."""
        keys = [self.layout.row_key(metric_uid, base_s, list(tags))
                for tags in tag_sets for base_s in range(first_s, last_s + 1, self.row_span_s)]
        keys.sort()
        yield from self.table().rows(keys, columns=[b"t"])

    def _tsuid_rows(self, first_s: int, last_s: int) -> RowStream:
        """The rows of the series the plan's tsuids name: by exact keys when the plan says
        so, else a scan of their metric keeping those series' rows."""
        selection = self.plan.selection
        series = selection.tsuids
        if selection.by_key:
            keys = sorted(self.layout.row_key_from_tsuid(tsuid, base_s) for tsuid in series
                          for base_s in range(first_s, last_s + 1, self.row_span_s))
            return iter(self.table().rows(keys, columns=[b"t"])), None, ()
        width = self.layout.metric_width
        tags_start = self.layout.salt_width + width + 4
        wanted = {tsuid[width:] for tsuid in series}
        hits, stored = self.scan_rows(selection.metric_uid, first_s, last_s, None,
                                      lambda key: key[tags_start:] in wanted)
        return stored, None, hits

    def group(self, rows: Iterator[tuple[bytes, StoredRow]],
              named: Callable[[bytes], bool] | None = None,
              hits: Sequence[tuple[bytes, CachedRow]] = ()) -> Iterable[SeriesRows]:
        """The rows per series in row-key order: ``hits`` (from the hour cache, in key
        order), then ``rows`` as storage streams them, counted as they come (rows of series
        ``named`` drops are counted, not kept)."""
        by_series = self._group_hits(hits)
        stats, sub = self.stats, self.plan.sub
        stats.rows += len(hits)
        stats.bytes += sum(entry.stored_bytes for _, entry in hits)
        self.limits.check_read(sub, stats.points, stats.bytes)
        read = 0
        try:
            for key, cells in rows:
                read += 1
                stats.rows += cells.rows if isinstance(cells, CachedRow) else 1
                stats.bytes += (cells.stored_bytes if isinstance(cells, CachedRow)
                                else self.weight(key, cells))
                if stats.rows % CHECK_EVERY_ROWS == 0:
                    self.limits.check_read(sub, stats.points, stats.bytes)
                    self.deadline.check(sub.index)
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
        self.limits.check_read(sub, stats.points, stats.bytes)
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

    def decode(self, groups: Iterable[SeriesRows]) -> list[Series]:
        kept = self.matching(groups)
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

    def matching(self, groups: Iterable[SeriesRows]
                 ) -> list[tuple[SeriesRows, dict[str, str]]]:
        """The series whose tag names pass the plan's filters, with those names."""
        plan = self.plan
        filters, explicit_tags = plan.filters, plan.sub.explicit_tags
        kept = []
        for group in groups:
            tags = self.names(group.tag_uids)
            if tags is not None and series_matches(tags, filters, explicit_tags):
                kept.append((group, tags))
        self.limits.check_emitted(plan.sub, plan.buckets, len(kept))
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
        self.limits.check_read(self.plan.sub, self.stats.points, self.stats.bytes)
        self.deadline.check(self.plan.sub.index)
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

    def count_rows(self, stored_bytes: np.ndarray) -> None:
        """Count rows read in bulk (their stored bytes each) as a read row by row counts
        them: the byte limit and the deadline at every ``CHECK_EVERY_ROWS``-th row, so a
        read stops where the row by row one would."""
        stats, sub = self.stats, self.plan.sub
        first_rows, first_bytes = stats.rows, stats.bytes
        sums = np.cumsum(stored_bytes)
        checked = (first_rows // CHECK_EVERY_ROWS + 1) * CHECK_EVERY_ROWS
        for at in range(checked, first_rows + len(sums) + 1, CHECK_EVERY_ROWS):
            stats.rows, stats.bytes = at, first_bytes + int(sums[at - first_rows - 1])
            self.limits.check_read(sub, stats.points, stats.bytes)
            self.deadline.check(sub.index)
        if len(sums):
            stats.rows, stats.bytes = first_rows + len(sums), first_bytes + int(sums[-1])

    def prefetch_names(self, keys: Iterable[bytes]) -> None:
        """Read the tag names of these row keys' series in bulk (what :meth:`names` then
        finds in the UID caches)."""
        self.prefetch_tag_names(pair for key in keys
                                for pair in self.layout.parse_row_key(key).tags)

    def prefetch_tag_names(self, tag_uids: Iterable[tuple[bytes, bytes]]) -> None:
        """Read the names of these ``(tagk, tagv)`` UIDs in bulk (:meth:`names` then finds
        them in the UID caches)."""
        tags = list(tag_uids)
        self.tsdb.tagk.prefetch_names(k for k, _ in tags)
        self.tsdb.tagv.prefetch_names(v for _, v in tags)

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
