"""Warm reads of closed hours without a step per row: one stamp for a whole key range.

A query's closed hours (every hour of the scan that ended, plus the settle time) are one set of
key ranges per sub-query shape: the salt buckets' ranges, or a literal filter's narrowed ranges
per hour. On the embedded store one aggregate statement returns the ``(cells, newest write
time)`` of every cell in them (``SqliteTable.range_stamp``); when it equals the stamp kept with
the range's assembled series, those series are the answer, handed to the engine as they were
kept (read-only arrays), and only the tag filters run again, once per series. Otherwise the
closed hours are read as before (row stamps, the per-row cache, storage), and what that read
assembled is kept under the stamp read *before* it, when the range is settled and nothing in it
needs its cells again (notes, integers beyond 2**53) or was left out (a series a name filter
dropped, which is then never fetched). Why a write, delete or compaction anywhere in the range
changes its stamp: docs/cache.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from app.engine.model import Series
from app.query.filters import series_matches
from app.recent import Recent
from app.storage.base import RANGE_STAMP, SCAN_STAMPS, SCAN_STAMPS_SIZED, able
from app.tsdb import hour_cache
from app.tsdb.hour_cache import ENTRY_OVERHEAD_BYTES, Block, HourCache, RangeEntry, StampedRow
from app.tsdb.read import hour_columns, hour_reads
from app.tsdb.read.cached import first_row, reads_whole

if TYPE_CHECKING:
    from app.tsdb.read.rows import RowReader

# A range's newest cell must be this old before its assembly is kept: a margin for the clock,
# wider than a row's SETTLED_MS because a write to any row of the range (not only one row)
# stamped behind the range's newest cell would hide (docs/cache.md). The embedded store stamps
# a batch when it commits, under the write lock, so a lock wait does not count against it.
RANGE_SETTLED_MS = 30_000
# Keys _DROPPING and _ASKED hold (the oldest forgotten).
MAX_REMEMBERED = 1024

# Reads (key space, ranges, filters) whose name filters left series out: they go row by row
# without a range stamp (a few recent ones; forgetting one costs one stamp).
_DROPPING: Recent[tuple[str, bytes, str], bool] = Recent(MAX_REMEMBERED)
# Ranges read before on HBase, where a range stamp costs a scan (see read_closed).
_ASKED: Recent[tuple[str, bytes], bool] = Recent(MAX_REMEMBERED)
# Ranges on HBase whose last stamp showed cells too new for any entry (range or row) to be
# kept, until they settle (by the time in ms): the stamp would only be followed by a scan of
# the rows; until then their reads go row by row (one pass) instead. (Rows not compacted,
# dearer to stamp than to read, go unstamped while their reads find them so: reads_whole.)
_NO_STAMP = hour_cache.HeldBack()


@dataclass(frozen=True, slots=True)
class KeptSeries:
    """One series of a kept range: what the reader made of its closed rows."""

    row_order: bytes
    tag_uids: tuple[tuple[bytes, bytes], ...]
    tsuid: str
    rows: int  # rows and stored bytes, counted as a cold read counts them
    stored_bytes: int
    ts_ms: np.ndarray
    values: np.ndarray
    is_int: np.ndarray


def closed_last_s(first_s: int, last_s: int, span_s: int, now_ms: int) -> int | None:
    """The base time of the last closed, settled row in ``[first_s, last_s]`` (None: none)."""
    newest_closed = (now_ms - hour_cache.SETTLED_MS) // 1000 - span_s
    last = min(last_s, newest_closed - (newest_closed - first_s) % span_s)
    return last if last >= first_s else None


def read_closed(reader: RowReader, cache: HourCache, first_s: int, last_s: int,
                asked: bool | None = None) -> list[Series] | None:
    """The series of the reader's plan from the closed rows ``[first_s, last_s]``, through a
    range entry; None when this read cannot go that way (rows fetched by key, a range to the
    end of the key space). ``asked``: what :func:`read_before` said of these rows, when the
    caller asked it (None: asked here)."""
    sub = reader.plan.sub
    found = _ranges(reader, first_s, last_s)
    if found is None:
        return None
    ranges, shape = found
    table: Any = reader.range_table()
    if able(table, SCAN_STAMPS) is None:
        return None  # a store that cannot stamp rows without their values
    space = table.name + "\x00ranges"
    dropping = (space, shape, repr((sub.filters, sub.explicit_tags)))
    if dropping in _DROPPING:
        return None  # its name filters leave series out: never kept, row by row at once
    if asked is None:  # remembered on every store (see read_before)
        asked = asked_before(space, shape)
    if able(table, RANGE_STAMP) is None and not _stamp_worth_a_scan(
            cache, table, ranges, (space, shape), asked):
        return None
    stamp, rows = range_stamp(table, ranges)
    _remember_no_stamp(space, shape, stamp)
    entry = cache.get_range(space, shape, stamp)
    if entry is not None:
        kept: Kept = entry.payload  # type: ignore[assignment]
        if kept.rows == rows:
            return _from_kept(reader, kept.series)
    inner = reader.inner()  # reads the closed rows the per-row way, counting each series
    inner.row_stamps = rows  # HBase: the stamps just scanned, not scanned again
    try:
        # A cold read: the hour columns when the hours have them (or can); else (or when the
        # cache holds rows of the range, say all but one changed row) row by row.
        series = None
        if hour_columns.source(inner) is not None and _cold(cache, table, ranges):
            series = hour_reads.read_series(inner, first_s, last_s)
        if series is None:
            series = inner.read_stored(first_s, last_s)
    finally:  # a read stopped by a limit or the deadline reports what it read
        _add_stats(reader, inner)
    if _dropped(inner, series):
        _DROPPING.put(dropping, True)
        return series
    kept_series = _keepable(inner, series, stamp)
    if kept_series is not None:
        own_bytes, blocks = _held(kept_series, cache.blocks_by_root())
        cache.put_range(space, shape, RangeEntry(stamp, Kept(kept_series, rows), own_bytes,
                                                 sum(s.rows for s in kept_series), blocks))
    return series


def _cold(cache: HourCache, table: Any, ranges: Sequence[tuple[bytes, bytes]]) -> bool:
    """Whether the cache holds no entry, current or not, of the ranges' first row."""
    first = first_row(table, ranges)
    return first is None or not cache.has_row(table.name, first[0])


def read_before(reader: RowReader, first_s: int, last_s: int) -> bool:
    """Whether this process read the plan's closed rows ``[first_s, last_s]`` through
    :func:`read_closed` before (recently), so that a range entry may hold them; remembers
    them. True when they cannot be read that way."""
    found = _ranges(reader, first_s, last_s)
    return found is None or asked_before(reader.table().name + "\x00ranges", found[1])


def _stamp_worth_a_scan(cache: HourCache, table: Any, ranges: Sequence[tuple[bytes, bytes]],
                        key: tuple[str, bytes], asked: bool) -> bool:
    """HBase, whose range stamp is a scan of every row's stamp, which a cold read in one
    pass does without: paid from the second read of the same ranges (a dashboard), unless
    their last stamp showed it not worth it for now (``_NO_STAMP``), nor by the first read
    after (which keeps the rows settled since: the stamp would find none kept), nor while
    their rows are read whole (not compacted: each stamp costs more than its row)."""
    return (asked and not _NO_STAMP.held(key, hour_cache.clock_ms())
            and not reads_whole(cache, table, ranges))


def _remember_no_stamp(space: str, shape: bytes, stamp: hour_cache.Stamp) -> None:
    """A range stamp scanned: until when another is not worth its scan (``_NO_STAMP``)."""
    until_ms = stamp[1] + hour_cache.SETTLED_MS
    if until_ms > hour_cache.clock_ms():
        _NO_STAMP.hold((space, shape), until_ms)


def asked_before(space: str, shape: bytes) -> bool:
    """Whether these ranges were read before (recently) by this process; remembers them."""
    return _ASKED.add((space, shape), True)


def range_stamp(table: Any, ranges: Sequence[tuple[bytes, bytes]]
                ) -> tuple[hour_cache.Stamp, list[StampedRow] | None]:
    """The ranges' stamp: on the embedded store one aggregate statement; on HBase (no
    aggregates on the region servers) every row's stamp, which the entry keeps and compares
    whole (the stamp then is the rows' number and newest write time, a quick first test)."""
    by_range = able(table, RANGE_STAMP)
    if by_range is not None:
        return by_range.range_stamp(ranges, "t"), None
    stamps = able(table, SCAN_STAMPS)
    assert stamps is not None  # read_closed asked first
    # With each row's stored bytes where the store can (a read that then drops series by
    # name counts their bytes from them: cached.rows).
    sized = able(table, SCAN_STAMPS_SIZED)
    scan = stamps.scan_stamps if sized is None else sized.scan_stamps_sized
    rows = [row for start, stop in ranges for row in scan(start, stop, "t")]
    return (len(rows), max((row[2] for row in rows), default=0)), rows


@dataclass(frozen=True, slots=True)
class Kept:
    """A range entry's payload: its series, and the row stamps it was read with (HBase)."""

    series: list[KeptSeries]
    rows: list[StampedRow] | None


def _ranges(reader: RowReader, first_s: int, last_s: int
            ) -> tuple[list[tuple[bytes, bytes]], bytes] | None:
    """The key ranges of the rows, and the entry's key: the ranges and the UID constraints
    that chose them (what a cold read of them would keep)."""
    selection = reader.plan.selection
    if selection.tsuids or selection.exact is not None:
        return None  # series by tsuid, literal explicitTags (maybe fetched by key): row by row
    constraints = selection.constraints
    ranges = reader.key_ranges(selection.metric_uid, first_s, last_s, selection.narrow)
    bounded = [(start, stop) for start, stop in ranges if stop is not None]
    if len(bounded) < len(ranges):
        return None
    shape = repr((sorted(constraints, key=repr), bounded)).encode()
    return bounded, shape


def _add_stats(reader: RowReader, inner: RowReader) -> None:
    stats, read = reader.stats, inner.stats
    stats.points += read.points
    stats.series += read.series
    plan = reader.plan
    if plan.row_regex != plan.key_row_regex and inner.kept_counts is not None:
        # This read scanned without the value filters' values (the entry is shared by every
        # value filter on these keys); a read narrowed by them on the storage servers never
        # sees the rows of the series they leave out: they are not counted here either.
        stats.rows += sum(rows for rows, _ in inner.kept_counts)
        stats.bytes += sum(stored for _, stored in inner.kept_counts)
        return
    stats.rows += read.rows
    stats.bytes += read.bytes


def _keepable(inner: RowReader, series: Sequence[Series],
              stamp: hour_cache.Stamp) -> list[KeptSeries] | None:
    """What to keep of a read of the closed rows (that left no series out), or None when it
    must not be kept: the range not settled, a note or an integer beyond 2**53 (their cells
    are needed each time)."""
    if stamp[1] + RANGE_SETTLED_MS > hour_cache.clock_ms():
        return None
    counts = inner.kept_counts
    if counts is None or len(counts) != len(series):
        return None
    if any(s.annotations or s.long_values is not None for s in series):
        return None
    kept = []
    for s, (rows, stored_bytes) in zip(series, counts, strict=True):
        for array in (s.ts_ms, s.values, s.is_int):
            array.flags.writeable = False  # kept: shared by later queries
        kept.append(KeptSeries(s.row_order, tuple(s.tag_uids.values()), s.tsuid, rows,
                               stored_bytes, s.ts_ms, s.values, s.is_int))
    return kept


def _dropped(inner: RowReader, series: Sequence[Series]) -> bool:
    """Whether the read left series out by their tag names (their rows were counted, not
    fetched): what it assembled is not the whole range."""
    counts = inner.kept_counts or []
    return len(counts) != len(series) or sum(rows for rows, _ in counts) != inner.stats.rows


def _held(kept: Sequence[KeptSeries], blocks: dict[int, Block]
          ) -> tuple[int, tuple[Block, ...]]:
    """What the entry holds on to: the bytes of arrays of its own (whole: a view keeps its
    base alive), and the kept blocks its other arrays are views of (counted once)."""
    own: dict[int, int] = {}
    shared: dict[int, Block] = {}
    for s in kept:
        for array in (s.ts_ms, s.values, s.is_int):
            root = hour_cache.root_array(array)
            block = blocks.get(id(root))
            if block is not None:
                shared[id(block)] = block
            else:
                own[id(root)] = root.nbytes
    return (sum(own.values()) + ENTRY_OVERHEAD_BYTES * (len(kept) + 1),
            tuple(shared.values()))


def _from_kept(reader: RowReader, kept: Sequence[KeptSeries]) -> list[Series]:
    """The kept series the filters' tag names still pass, counted as a cold read counts."""
    plan = reader.plan
    sub, filters = plan.sub, plan.filters
    stats = reader.stats
    out = []
    for s in kept:
        stats.rows += s.rows
        stats.bytes += s.stored_bytes
        tags = reader.names(s.tag_uids)
        if tags is None or not series_matches(tags, filters, sub.explicit_tags):
            continue
        stats.points += int(s.ts_ms.size)
        out.append(Series(tsuid=s.tsuid, tags=tags, ts_ms=s.ts_ms, values=s.values,
                          is_int=s.is_int, row_order=s.row_order,
                          tag_uids=dict(zip(tags, s.tag_uids))))
    stats.series += len(out)
    reader.limits.check_read(sub, stats.points, stats.bytes)
    reader.limits.check_emitted(sub, plan.buckets, len(out))
    reader.deadline.check(sub.index)
    return out
