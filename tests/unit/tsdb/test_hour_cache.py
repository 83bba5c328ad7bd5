"""The hour cache's LRU: byte budget, stale stamps, blocks shared by several entries."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from app.storage.codec_decode import DecodedRow
from app.tsdb.hour_cache import (
    ENTRY_OVERHEAD_BYTES,
    SETTLED_MS,
    Block,
    CachedRow,
    HourCache,
    RangeEntry,
    keepable,
)


def row(points: int) -> DecodedRow:
    return DecodedRow(np.arange(points, dtype=np.int64), np.ones(points), np.zeros(points, bool))


def entry(points: int, stamp: tuple[int, int] = (1, 100)) -> CachedRow:
    return CachedRow(stamp, row(points), stored_bytes=50)


ONE_POINT = 8 + 8 + 1 + ENTRY_OVERHEAD_BYTES


def test_a_hit_needs_the_same_stamp_and_a_stale_entry_goes() -> None:
    cache = HourCache(10_000)
    cache.put("tsdb", b"k", entry(1, (1, 100)))
    assert cache.get("tsdb", b"k", (1, 100)) is not None
    assert cache.get("tsdb", b"k", (1, 101)) is None  # a newer cell
    assert cache.get("tsdb", b"k", (1, 100)) is None  # the stale entry was dropped
    assert cache.stats.hits == 1 and cache.stats.stale == 1 and cache.bytes == 0
    assert cache.get("other", b"k", (1, 100)) is None  # tables do not share rows


def test_the_least_recently_used_go_first_under_the_budget() -> None:
    cache = HourCache(3 * ONE_POINT)
    for key in (b"a", b"b", b"c"):
        cache.put("t", key, entry(1))
    assert cache.lookup("t", [(b"a", 1, 100)])[0] is not None  # a is now the newest
    cache.put("t", b"d", entry(1))
    assert cache.bytes == 3 * ONE_POINT and cache.stats.evictions == 1
    assert cache.get("t", b"b", (1, 100)) is None
    assert all(cache.get("t", key, (1, 100)) is not None for key in (b"a", b"c", b"d"))


def test_a_block_is_counted_once_and_freed_with_its_last_entry() -> None:
    decoded = row(100)
    block = Block(decoded)
    assert block.nbytes == 100 * 17
    cache = HourCache(10_000)
    cache.put_many("t", [(key, CachedRow((1, 1), decoded, 10, block)) for key in (b"a", b"b")])
    assert cache.bytes == block.nbytes + 2 * ENTRY_OVERHEAD_BYTES
    cache.get("t", b"a", (2, 2))  # stale: dropped, the block stays for b
    assert cache.bytes == block.nbytes + ENTRY_OVERHEAD_BYTES
    cache.get("t", b"b", (2, 2))
    assert cache.bytes == 0 and len(cache) == 0


def test_an_entry_over_the_whole_budget_is_not_kept() -> None:
    cache = HourCache(100)
    cache.put("t", b"a", entry(100))
    assert len(cache) == 0 and cache.bytes == 0


def test_only_closed_settled_rows_are_kept() -> None:
    hour_ms = 3600_000
    now_ms = 10 * hour_ms
    assert keepable(8 * 3600, 3600, (1, 9 * hour_ms), now_ms)
    assert not keepable(9 * 3600, 3600, (1, 9 * hour_ms), now_ms)  # the open hour
    assert not keepable(8 * 3600, 3600, (1, now_ms - SETTLED_MS + 1), now_ms)  # just written
    assert keepable(8 * 3600, 3600, (1, now_ms - SETTLED_MS), now_ms)


def test_a_range_entry_counts_its_rows_and_shares_kept_blocks() -> None:
    """A range entry made of views of a kept block counts the block once, beside the row
    entries; the block's bytes go with the last entry of either kind."""
    decoded = row(100)
    block = Block(decoded)
    cache = HourCache(10_000)
    cache.put("t", b"a", CachedRow((1, 1), decoded, 10, block))
    own = 300
    assert cache.put_range("t\x00ranges", b"r", RangeEntry((5, 9), "series", own, 4, (block,)))
    assert cache.bytes == block.nbytes + ENTRY_OVERHEAD_BYTES + own
    assert len(cache) == 1 and cache.ranges == 1  # len counts row entries
    assert cache.get_range("t\x00ranges", b"r", (5, 9)) is not None
    assert cache.stats.range_hits == 1 and cache.stats.hits == 4  # the rows it stands for
    cache.get("t", b"a", (2, 2))  # the row entry goes stale: the range keeps the block
    assert cache.bytes == block.nbytes + own
    assert cache.get_range("t\x00ranges", b"r", (5, 10)) is None  # a newer cell in the range
    assert cache.stats.range_stale == 1 and cache.bytes == 0 and cache.ranges == 0


def test_a_range_entry_bigger_than_the_budget_is_not_kept() -> None:
    cache = HourCache(1_000)
    assert not cache.put_range("s", b"r", RangeEntry((1, 1), None, 800, 1, (Block(row(20)),)))
    assert cache.bytes == 0 and cache.ranges == 0
    assert cache.put_range("s", b"r", RangeEntry((1, 1), None, 800, 1))
    assert cache.bytes == 800


@pytest.mark.parametrize("views", [True, False], ids=["views of a block", "own arrays"])
def test_the_budget_counts_what_an_entry_really_holds(views: bool) -> None:
    entries, points = 3000, 360
    big = row(entries * points)
    block = Block(big)
    keys = [b"\x00\x00\x01" + i.to_bytes(4, "big") + b"\x00\x00\x01\x00\x00\x02"
            for i in range(entries)]
    cache = HourCache(10**12)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        made = []
        for i, key in enumerate(keys):
            part = slice(i * points, (i + 1) * points)
            if views:  # as a cold read keeps rows: views of its decode pass's arrays
                decoded = DecodedRow(big.ts_ms[part], big.values[part], big.is_int[part])
                made.append((bytes(key), CachedRow((points, i), decoded, 50, block, part.start)))
            else:
                made.append((bytes(key), CachedRow((points, i), row(points), 50)))
        cache.put_many("tsdb", made)
        del made
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    counted = cache.bytes - (block.nbytes if views else 0)  # the block existed before
    assert 0.8 * held <= counted <= 1.2 * held, (held / entries, counted / entries)
