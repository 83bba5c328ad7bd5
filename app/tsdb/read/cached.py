"""The hour-cache row source: a scan's rows whose stamp matches a kept decode come from the
cache, the others from storage, with the stamp they had (see ``app.tsdb.hour_cache``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from app.storage.base import (
    ROW_REGEX,
    SCAN_MANY,
    SCAN_STAMPED,
    SCAN_STAMPS_SIZED,
    STAMP_COST,
    Row,
    able,
    scan_ranges,
)
from app.tsdb import hour_cache
from app.tsdb.hour_cache import CachedRow, HourCache, Stamp, StampedRow
from app.tsdb.read.keep import Keeper
from app.tsdb.read.keys import KeyRange, series_order

# Cold reads (at least this share of the scanned rows missing from the cache) stream the
# ranges' values; warmer ones fetch only the missing rows by key.
COLD_SHARE = 4
# Rows are read whole rather than stamped when at least this share of them are dearer to
# stamp than to read (StampCost).
DEARER_SHARE = 0.75
# How long rows found dearer to stamp than to read go on being read whole, each such read
# renewing it; a read that finds them otherwise (compacted since) ends it at once.
READ_WHOLE_MS = 60_000
# Stamps read between checks of the deadline (stamps are cheap: checked less often).
STAMP_CHECK_EVERY_ROWS = 64 * 256

KeyTest = Callable[[bytes], bool]


def rows(keeper: Keeper, table: Any, ranges: Sequence[KeyRange], keep: KeyTest | None,
         named: KeyTest | None, check_deadline: Callable[[], None],
         count_dropped: Callable[[Sequence[Any]], None],
         stamped_before: Sequence[StampedRow] | None = None
         ) -> tuple[list[tuple[bytes, CachedRow]], Iterator[tuple[bytes, Row]]]:
    """Rows whose stamp (read first, without values) matches a kept decode come from the
    cache; the others from storage, remembering the stamp they had (``keeper.stamps``).
    Rows of series ``named`` drops are counted (``count_dropped``) but not read further.
    ``stamped_before``: every row's stamp in ``ranges`` (and stored bytes, where the store
    sizes stamps), read already by the caller."""
    cache = keeper.cache
    sized = named is not None and able(table, SCAN_STAMPS_SIZED) is not None
    if stamped_before is not None and (not sized or _with_sizes(stamped_before)):
        stamped = list(stamped_before)
    else:
        # Series a name filter drops are read in the one pass too: where the store narrows
        # the scan on its servers (HBase's row-key regexp), few; elsewhere stamps come first,
        # with each row's size, so that the dropped rows are counted unread.
        can = able(table, SCAN_STAMPED) is not None and (
            named is None or able(table, ROW_REGEX) is not None)
        whole = can and reads_whole(cache, table, ranges)
        # A backend that fetches several ranges concurrently (HBase) reads them stamps first,
        # unless their rows are read whole (the stamps would cost more than the values).
        one_pass = can and (whole or len(ranges) == 1 or able(table, SCAN_MANY) is None)
        warm = (not whole and _warm(cache, table, ranges)) if one_pass else True
        if warm is None:  # no row at all: as if the scan had come a moment earlier
            keeper.stamps = {}
            return [], iter(())
        if not warm:
            keeper.stamps = {}
            return [], _one_pass(keeper, table, ranges, keep, named, count_dropped)
        stamped = _stamps(table, ranges, sized, check_deadline)
    _read_whole_next(cache, table, ranges, (row[1] for row in stamped))
    if keep is not None or sized:
        stamped, dropped = _sort_stamped(keeper, stamped, keep, named if sized else None)
        scanned = stamped + dropped
        count_dropped(dropped)
    else:
        scanned = stamped
    hits: list[tuple[bytes, CachedRow]] = []
    stamps: dict[bytes, Stamp] = {}
    for row, entry in zip(stamped, cache.lookup(table.name, stamped)):
        if entry is None:
            stamps[row[0]] = (row[1], row[2])
        else:
            hits.append((row[0], entry))
    keeper.stamps = stamps
    return hits, _missed_rows(table, ranges, stamps, scanned, keep)


def _with_sizes(stamped: Sequence[StampedRow]) -> bool:
    return not stamped or len(stamped[0]) > 3


def _stamps(table: Any, ranges: Sequence[KeyRange], sized: bool,
            check_deadline: Callable[[], None]) -> list[Any]:
    """Every row's stamp in ``ranges`` (and its stored bytes when ``sized``)."""
    scan = table.scan_stamps_sized if sized else table.scan_stamps
    stamped = []
    for start, stop in ranges:
        for row in scan(start, stop, "t"):
            stamped.append(row)
            if len(stamped) % STAMP_CHECK_EVERY_ROWS == 0:
                check_deadline()
    return stamped


def first_row(table: Any, ranges: Sequence[KeyRange]) -> tuple[bytes, Stamp] | None:
    """The first stored row of the ranges and its stamp (None: the ranges hold no row): what
    a read asks the cache about to tell a warm read from a cold one."""
    for start, stop in ranges:
        stamps = table.scan_stamps(start, stop, "t", limit=1)  # one row asked of HBase
        try:
            for key, cells, newest in stamps:
                return key, (cells, newest)
        finally:
            stamps.close()
    return None


def _warm(cache: HourCache, table: Any, ranges: Sequence[KeyRange]) -> bool | None:
    """Whether the cache holds the first row of the ranges as it is stored: then the
    others are likely kept too (a dashboard asking again), else the read is cold (and when
    the row is dearer to stamp than to read). None when the ranges hold no row (an hour not
    begun: nothing to read at all)."""
    first = first_row(table, ranges)
    if first is None:
        return None
    if stamps_dearer(table, [first[1][0]]):
        return False  # rows not compacted (HBase): read whole, as cheap as their stamps
    return (cache.holds(table.name, *first)
            and not cache.settling(table.name, first[0], hour_cache.clock_ms()))


def stamps_dearer(table: Any, cells: Sequence[int]) -> bool:
    """Whether most rows of these cell counts (``DEARER_SHARE``) cost the store more to
    stamp than to read whole (``StampCost``): then a warm read would cost more than a cold
    one. Not when only some are (a day's hours compacted but the last): reading the others
    whole would fetch and decode all their values."""
    cost = able(table, STAMP_COST)
    if cost is None or not cells:
        return False
    dearer = sum(map(cost.stamp_dearer_than_values, cells))
    return dearer >= DEARER_SHARE * len(cells)


def _read_whole_next(cache: HourCache, table: Any, ranges: Sequence[KeyRange],
                     cells: Iterable[int]) -> bool:
    """Whether the rows of ``ranges`` just read, of these cell counts, are dearer to stamp
    than to read (:func:`stamps_dearer`); remembered for their next reads, which then go
    whole without a look at the first row, and without a range stamp (``reads_whole``).
    ``cells`` is consumed only on a store that declares ``StampCost``."""
    if able(table, STAMP_COST) is None:
        return False  # the embedded store: no list of every row's cells on each warm read
    dearer = stamps_dearer(table, list(cells))
    until_ms = hour_cache.clock_ms() + READ_WHOLE_MS if dearer else None
    cache.read_whole(table.name, tuple(ranges), until_ms)
    return dearer


def reads_whole(cache: HourCache, table: Any, ranges: Sequence[KeyRange]) -> bool:
    """Whether the last read of ``ranges`` found their rows dearer to stamp than to read
    (then a range stamp is not worth its scan either)."""
    return cache.reads_whole(table.name, tuple(ranges), hour_cache.clock_ms())


def _one_pass(keeper: Keeper, table: Any, ranges: Sequence[KeyRange], keep: KeyTest | None,
              named: KeyTest | None, count_dropped: Callable[[Sequence[Any]], None]
              ) -> Iterator[tuple[bytes, Row]]:
    """A cold read: every row's values and write times in one scan, each row's stamp
    derived from the very cells read (so a kept entry is exactly what was read). Rows of
    series ``named`` drops are read too (cheaper than a scan of every stamp first, the
    same a read of the rows' values would have to make), counted as dropped, not kept."""
    stamps, weights = keeper.stamps, keeper.weights
    first: bytes | None = None
    for start, stop in ranges:
        dropped: list[tuple[bytes, int, int, int]] = []
        for key, row, cells, newest, weight in table.scan_stamped(start, stop, "t"):
            first = key if first is None else first
            if keep is not None and not keep(key):
                continue
            if named is not None and not named(key):
                dropped.append((key, cells, newest, weight))
                continue
            stamps[key] = (cells, newest)
            weights[key] = weight
            yield key, row
        count_dropped(dropped)
    if _read_whole_next(keeper.cache, table, ranges, (cells for cells, _ in stamps.values())):
        stamps.clear()  # kept, they would serve no stamp: these rows are read whole
        return
    # Most rows too new to keep, but not for long (just compacted, say): reads stay cold
    # until they settle (_warm), else the next would scan the stamps, then the rows again.
    settling, until_ms = keeper.settling_soon(hour_cache.clock_ms())
    if first is not None and settling and settling * COLD_SHARE >= len(stamps):
        keeper.cache.settle_later(table.name, first, until_ms)


def _sort_stamped(keeper: Keeper, stamped: list[Any], keep: KeyTest | None,
                  named: KeyTest | None) -> tuple[list[Any], list[Any]]:
    """The stamped rows ``keep`` keeps, split into those of series ``named`` keeps and
    those it drops; each series decided once."""
    verdicts: dict[bytes, int] = {}
    wanted, dropped = [], []
    for row in stamped:
        key = row[0]
        order = series_order(keeper.layout, key)
        verdict = verdicts.get(order)
        if verdict is None:
            verdict = verdicts[order] = (0 if keep is not None and not keep(key) else
                                         1 if named is not None and not named(key) else 2)
        if verdict == 2:
            wanted.append(row)
        elif verdict == 1:
            dropped.append(row)
    return wanted, dropped


def _missed_rows(table: Any, ranges: Sequence[KeyRange], stamps: dict[bytes, Stamp],
                 stamped: Sequence[tuple[bytes, ...]], keep: KeyTest | None
                 ) -> Iterator[tuple[bytes, Row]]:
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
