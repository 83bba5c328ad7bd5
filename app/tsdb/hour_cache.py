"""Closed hours decoded once: decoded columns of hour rows, validated by the row's cell stamp.

A data row's *stamp* is ``(cells, newest write time in ms)`` of its ``t`` family: SQLite keeps
each cell's write time (``ts``), HBase its cell timestamp, and both backends return the stamp
without the values (``scan_stamps``: an SQL ``GROUP BY``, a ``KeyOnlyFilter`` scan). Any change
to a row changes its stamp: a put (late point, compaction's compacted cell, a rewrite by a query
delete) writes a cell newer than every cell there, and a delete removes cells. The stamp lives
in storage, so every pytsd process — and a Java TSD writing beside them on HBase — invalidates
every other process's entries with no message between them and no marker table.

Two rules keep "newer" true: an entry is kept only for a row whose hour is closed and whose
newest cell is at least ``SETTLED_MS`` old when its stamp is read, so a later write (from any
process on the same clock, or HBase's region server, which stamps cells itself) has a strictly
later write time; and the stamp is read *before* the values, so a write racing the read can
only make the next stamp differ (a miss), never hide a change. See docs/cache.md.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from app.recent import Recent
from app.storage.codec_decode import DecodedRow

if TYPE_CHECKING:
    from app.tsdb import TSDB

Stamp = tuple[int, int]
"""``(cells in the row's t family, newest cell write time in ms)``."""
StampedRow = tuple[bytes, int, int] | tuple[bytes, int, int, int]
"""A row as a stamp scan returns it: key, cells, newest write time in ms (and, from a sized
scan, its stored bytes)."""

# A row's newest cell must be this old before its decode is kept (clock skew between the
# processes writing one store, and a write landing in the millisecond of the stamp read).
SETTLED_MS = 5_000
# Per-entry bookkeeping beyond the arrays' data, for the byte budget: the key, the stamp, the
# dict slot, the ``CachedRow``, its ``DecodedRow`` and the three arrays' headers (views of a
# block or arrays of their own). Traced at 700-740 bytes per entry (tests/unit/tsdb/
# test_hour_cache.py measures it); 200 was counted before, a quarter of what was held.
ENTRY_OVERHEAD_BYTES = 720
# Keys a ``HeldBack`` remembers (the oldest forgotten).
MAX_HELD_BACK = 1024


class HeldBack:
    """Keys held back until a time (ms), and for the first ask after it: reads of some rows
    that must not go the warm way until those rows settle, and once more after, the read
    that keeps them. Bounded (the oldest forgotten), thread-safe."""

    def __init__(self) -> None:
        self._until_ms: Recent[object, int] = Recent(MAX_HELD_BACK)

    def hold(self, key: object, until_ms: int) -> None:
        self._until_ms.put(key, until_ms)

    def held(self, key: object, now_ms: int) -> bool:
        """Whether ``key`` is held back now: until its time, and the first ask after it."""
        return self._until_ms.get_and_drop_if(key, lambda until_ms: now_ms >= until_ms) \
            is not None

    def release(self, key: object) -> None:
        self._until_ms.pop(key)

    def clear(self) -> None:
        self._until_ms.clear()


class Block:
    """Arrays several entries are views of (the rows of one decode pass, or of one series):
    their bytes are counted while any of those entries is kept, and freed with the last one.
    Entries that lie one after the other in a block (a series' hours, in time order) are read
    back as one slice of it, without a copy (``CachedRow.offset``)."""

    __slots__ = ("arrays", "nbytes", "rows")

    def __init__(self, decoded: DecodedRow) -> None:
        self.arrays = decoded
        self.nbytes = decoded.ts_ms.nbytes + decoded.values.nbytes + decoded.is_int.nbytes
        self.rows = 0


@dataclass(eq=False, slots=True)
class CachedRow:
    """The decoded data points of one hour row, and what the row weighed in storage. Never
    changed once made (not ``frozen``: a frozen dataclass is built 3-4 times slower, and a
    cold read makes one per row)."""

    stamp: Stamp
    decoded: DecodedRow  # views of ``block``'s arrays when there is one
    stored_bytes: int
    block: Block | None = None
    offset: int = -1  # where ``decoded`` starts in ``block``'s arrays (-1: unknown)
    rows: int = 1  # stored rows it stands for (a range entry's series: all its rows)

    @property
    def nbytes(self) -> int:
        """Bytes of the entry itself (a block is counted once, beside its entries)."""
        if self.block is not None:
            return ENTRY_OVERHEAD_BYTES
        d = self.decoded
        return d.ts_ms.nbytes + d.values.nbytes + d.is_int.nbytes + ENTRY_OVERHEAD_BYTES


@dataclass(eq=False, slots=True)
class RangeEntry:
    """What a reader assembled from a whole key range of closed rows (every series of the
    range, ready for the engine), validated by one stamp of the range: ``(cells or rows,
    newest write time in ms)`` over all of it (see docs/cache.md). ``nbytes`` counts every
    array the payload holds on to."""

    stamp: Stamp
    payload: object
    nbytes: int  # of the arrays it alone holds on to (and its bookkeeping)
    rows: int  # the stored rows it stands for (a hit counts them as row hits)
    blocks: tuple[Block, ...] = ()  # kept blocks its arrays are views of: counted once


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    stale: int = 0  # entries found with another stamp: the row changed
    evictions: int = 0
    # Range entries (``hits`` also counts the rows a range hit stands for).
    range_hits: int = 0
    range_misses: int = 0
    range_stale: int = 0


class HourCache:
    """An LRU of :class:`CachedRow` by ``(table, row key)`` under a byte budget; thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.stats = CacheStats()
        self._entries: OrderedDict[tuple[str, bytes], CachedRow | RangeEntry] = OrderedDict()
        self._lock = threading.Lock()
        self._ranges = 0  # range entries among the entries
        # The blocks some entry holds, by id: a handful, where entries are thousands.
        self._blocks: dict[int, Block] = {}
        # (table, first row key of a read): reads held cold until its rows settle.
        self._settling = HeldBack()
        # (table, key ranges): rows dearer to stamp than to read, read whole (read_whole).
        self._whole = HeldBack()

    def __len__(self) -> int:
        """Row entries kept (range entries are counted by :attr:`ranges`)."""
        return len(self._entries) - self.ranges

    @property
    def ranges(self) -> int:
        return self._ranges

    def get(self, table: str, key: bytes, stamp: Stamp) -> CachedRow | None:
        """The entry of the row when its stamp is still ``stamp``; a stale one is dropped."""
        with self._lock:
            entry = self._entries.get((table, key))
            if not isinstance(entry, CachedRow):  # none (range entries have spaces apart)
                self.stats.misses += 1
                return None
            if entry.stamp != stamp:
                self.stats.stale += 1
                self.stats.misses += 1
                self._drop((table, key))
                return None
            self._entries.move_to_end((table, key))
            self.stats.hits += 1
            return entry

    def get_range(self, space: str, key: bytes, stamp: Stamp) -> RangeEntry | None:
        """The range entry under ``key`` when its stamp is still ``stamp``; a stale one is
        dropped (a range's key names its table, rows and what was kept of them)."""
        with self._lock:
            slot = (space, key)
            entry = self._entries.get(slot)
            if not isinstance(entry, RangeEntry):
                self.stats.range_misses += 1
                return None
            if entry.stamp != stamp:
                self.stats.range_stale += 1
                self.stats.range_misses += 1
                self._drop(slot)
                return None
            self._entries.move_to_end(slot)
            self.stats.range_hits += 1
            self.stats.hits += entry.rows
            return entry

    def put_range(self, space: str, key: bytes, entry: RangeEntry) -> bool:
        """Keep a range entry unless it alone would take more than the budget."""
        if entry.nbytes + sum(block.nbytes for block in entry.blocks) > self.max_bytes:
            return False
        self.put_many(space, [(key, entry)])
        return True

    def blocks_by_root(self) -> dict[int, Block]:
        """The kept blocks by the ``id`` of their arrays' owners: a range entry made of
        views of them counts them once, beside the row entries (``RangeEntry.blocks``)."""
        with self._lock:
            return {id(root_array(array)): block for block in self._blocks.values()
                    for array in (block.arrays.ts_ms, block.arrays.values, block.arrays.is_int)}

    def holds(self, table: str, key: bytes, stamp: Stamp) -> bool:
        """Whether the row's entry is kept with this stamp (no statistics, no LRU move)."""
        with self._lock:
            entry = self._entries.get((table, key))
            return entry is not None and entry.stamp == stamp

    def has_row(self, table: str, key: bytes) -> bool:
        """Whether an entry of the row is kept, whatever its stamp (no statistics)."""
        with self._lock:
            return isinstance(self._entries.get((table, key)), CachedRow)

    def lookup(self, table: str, stamped: Sequence[tuple[bytes, int, int, *tuple[int, ...]]]
               ) -> list[CachedRow | None]:
        """:meth:`get` for many ``(key, cells, newest, ...)`` rows under one lock."""
        out: list[CachedRow | None] = []
        found = 0
        with self._lock:
            entries = self._entries
            for row in stamped:
                key, cells, newest = row[0], row[1], row[2]
                slot = (table, key)
                entry = entries.get(slot)
                if isinstance(entry, RangeEntry):  # not in a row space
                    entry = None
                if entry is not None and entry.stamp[0] == cells and entry.stamp[1] == newest:
                    entries.move_to_end(slot)
                    found += 1
                elif entry is not None:
                    self.stats.stale += 1
                    self._drop(slot)
                    entry = None
                out.append(entry)
            self.stats.hits += found
            self.stats.misses += len(out) - found
        return out

    def put(self, table: str, key: bytes, entry: CachedRow) -> None:
        self.put_many(table, [(key, entry)])

    def put_many(self, table: str,
                 entries: Sequence[tuple[bytes, CachedRow | RangeEntry]]) -> None:
        with self._lock:
            for key, entry in entries:
                if (table, key) in self._entries:
                    self._drop((table, key))
                self._entries[(table, key)] = entry
                self._ranges += isinstance(entry, RangeEntry)
                self.bytes += entry.nbytes
                for block in _blocks_of(entry):
                    if block.rows == 0:
                        self.bytes += block.nbytes
                        self._blocks[id(block)] = block
                    block.rows += 1
            while self.bytes > self.max_bytes and self._entries:
                oldest = next(iter(self._entries))
                self._drop(oldest)
                self.stats.evictions += 1

    def settle_later(self, table: str, key: bytes, until_ms: int) -> None:
        """A cold read of rows from ``key`` on could keep few of them: most are of closed
        hours but too new, and settle at ``until_ms`` (a compaction or late points just
        rewrote them). Reads from ``key`` stay cold until then (:meth:`settling`): a warm
        read would scan every stamp, then the rows it lacks, twice a cold read's work."""
        self._settling.hold((table, key), until_ms)

    def settling(self, table: str, key: bytes, now_ms: int) -> bool:
        """Whether a read of rows from ``key`` is to stay cold (:meth:`settle_later`): until
        the rows settle, and for the first read after, which keeps them."""
        return self._settling.held((table, key), now_ms)

    def read_whole(self, table: str, ranges: object, until_ms: int | None) -> None:
        """A read found most rows of ``ranges`` dearer to stamp than to read (``StampCost``:
        rows not compacted, on HBase): until ``until_ms`` their reads skip the stamps and the
        keeping (:meth:`reads_whole`). None: it found them otherwise (compacted since)."""
        if until_ms is None:
            self._whole.release((table, ranges))
        else:
            self._whole.hold((table, ranges), until_ms)

    def reads_whole(self, table: str, ranges: object, now_ms: int) -> bool:
        """Whether reads of ``ranges`` go whole, in one pass, keeping nothing
        (:meth:`read_whole`): their entries would serve no stamp."""
        return self._whole.held((table, ranges), now_ms)

    def clear(self) -> None:
        with self._lock:
            for block in self._blocks.values():
                block.rows = 0  # a block kept again later is counted afresh
            self._entries.clear()
            self._blocks.clear()
            self._settling.clear()
            self._whole.clear()
            self.bytes = self._ranges = 0

    def _drop(self, slot: tuple[str, bytes]) -> None:
        entry = self._entries.pop(slot)
        self.bytes -= entry.nbytes
        self._ranges -= isinstance(entry, RangeEntry)
        for block in _blocks_of(entry):
            block.rows -= 1
            if block.rows == 0:
                self.bytes -= block.nbytes
                del self._blocks[id(block)]


def _blocks_of(entry: CachedRow | RangeEntry) -> tuple[Block, ...]:
    if isinstance(entry, RangeEntry):
        return entry.blocks
    return () if entry.block is None else (entry.block,)


def root_array(array: np.ndarray) -> np.ndarray:
    """The array owning ``array``'s memory (a view keeps it alive whole)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def clock_ms() -> int:
    """The wall clock in ms, as the stores stamp cells (one function: tests move it on)."""
    return time.time_ns() // 1_000_000


def keepable(base_s: int, span_s: int, stamp: Stamp, now_ms: int) -> bool:
    """Whether a row's decode may be kept: its hour is over and its newest cell settled."""
    return settles_at_ms(base_s, span_s, stamp) <= now_ms


def settles_at_ms(base_s: int, span_s: int, stamp: Stamp) -> int:
    """When a row's decode becomes keepable: its hour over and its newest cell settled."""
    return max((base_s + span_s) * 1000, stamp[1]) + SETTLED_MS


_CACHES: weakref.WeakKeyDictionary[TSDB, HourCache] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def cache_for(tsdb: TSDB) -> HourCache | None:
    """The process's cache for ``tsdb``'s store (None when ``tsd.query.cache.max_bytes`` is 0)."""
    max_bytes = int(tsdb.config["tsd.query.cache.max_bytes"])
    if max_bytes <= 0:
        return None
    with _CACHES_LOCK:
        cache = _CACHES.get(tsdb)
        if cache is None:
            cache = _CACHES[tsdb] = HourCache(max_bytes)
        return cache
