"""A long scan of one key range, read the next time as its two halves at once.

A scan's time on HBase is mostly the region server's: one RPC handler walks the range,
skipping every cell a delete hides (a compacted hour whose single cells are not yet gone from
its store files costs ~85 ms of its CPU for 200 rows where the cells alone cost ~6). Two
scans of the halves run on two handlers: 83 -> 44-46 ms for those rows on the 2-core
development box, 14.4 -> 12.4 ms for the same hour as written (``bench_hbase_fresh`` data;
four parts were no faster than two there). OpenTSDB scans one range per salt bucket.

Where the middle lies is learnt, not guessed: every scan of a range remembers the key at the
middle of its rows and how long it took (``Middles``, per range and filter, bounded). The
next scan of that range, when the last took at least ``SPLIT_AFTER_MS``, reads
``[start, middle)`` here and ``[middle, stop)`` in a thread, a few batches ahead at most
(``AHEAD_BATCHES``: memory stays bounded on a huge range), and yields the rows in key order:
exactly the rows one scan returns, whatever the middle. A first scan, a scan with a row
limit, or an open-ended one is never split.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

from app.recent import Recent
from app.storage.hbase_reply import ReplyRow
from app.storage.hbase_scan import Scanner

# A range whose last scan took this long is read as two halves (a split costs a thread and a
# second scanner: ~0.3 ms).
SPLIT_AFTER_MS = 10.0
# Batches the second half may fetch ahead of the reader (each up to ~2 MB: SCAN_CALL_CELLS).
AHEAD_BATCHES = 4
MAX_REMEMBERED = 1024
# Keys of a scan held to find its middle (every 2**n-th row's).
SAMPLE_KEYS = 2048
# How long the second half's thread waits for room before it looks whether the reader left.
PUT_WAIT_S = 0.05

MiddleKey = tuple[bytes, bytes, bytes | None, bytes | None, tuple[bytes, ...]]
OpenScanner = Callable[[bytes, bytes | None], Scanner]


class Middles:
    """What the scans of each range learnt: the key at the middle of its rows and how long
    the scan took (ms). Bounded (the oldest forgotten), thread-safe."""

    def __init__(self) -> None:
        self._learnt: Recent[MiddleKey, tuple[bytes, float]] = Recent(MAX_REMEMBERED)

    def split_at(self, key: MiddleKey) -> bytes | None:
        """Where to split the next scan of ``key``'s range (None: read it whole)."""
        learnt = self._learnt.get(key)
        if learnt is None or learnt[1] < SPLIT_AFTER_MS:
            return None
        return learnt[0]

    def learn(self, key: MiddleKey, middle: bytes, took_ms: float) -> None:
        """A scan of ``key``'s range took ``took_ms``; ``middle`` the key at the middle of
        its rows. A short scan of a range not learnt yet is not remembered."""
        if took_ms < SPLIT_AFTER_MS and key not in self._learnt:
            return
        self._learnt.put(key, (middle, took_ms))


class RangeScan:
    """A scan of ``key``'s range ``[start, stop)`` as :class:`Scanner` reads it, split in
    two when the last scan of the range took long (:meth:`rows`)."""

    def __init__(self, middles: Middles, key: MiddleKey, open_scanner: OpenScanner,
                 shape: Callable[[ReplyRow], Any]) -> None:
        self.middles = middles
        self.key = key
        self.open_scanner = open_scanner
        self.shape = shape

    def rows(self, limit: int | None = None) -> Iterator[Any]:
        """The shaped rows: the first ``limit`` in one scan, else maybe two at once."""
        start, stop = self.key[1], self.key[2]
        if limit is not None or stop is None:
            return self.open_scanner(start, stop).rows(limit)
        return _rows(self.middles, self.key, self.open_scanner, self.shape)


def _rows(middles: Middles, key: MiddleKey, open_scanner: OpenScanner,
          shape: Callable[[ReplyRow], Any]) -> Iterator[Any]:
    """The shaped rows of ``key``'s range: in one scan, or in two at once when the last
    scan of the range took long; either way the range's middle is learnt."""
    start, stop = key[1], key[2]
    assert stop is not None  # RangeScan.rows reads open-ended ranges whole
    middle = middles.split_at(key)
    sample = MiddleSample()
    started = time.perf_counter()
    batches = (open_scanner(start, stop).batches() if middle is None or not start < middle < stop
               else _halves(open_scanner(start, middle), open_scanner(middle, stop)))
    try:
        for batch in batches:
            sample.add(batch)
            yield from map(shape, batch)
    finally:  # a reader that stops early closes the scanners now, not when collected
        batches.close()
    if sample.keys:
        middles.learn(key, sample.middle(), (time.perf_counter() - started) * 1000)


class MiddleSample:
    """Every ``stride``-th key of a scan's rows, the stride doubled whenever more than
    ``SAMPLE_KEYS`` are held: the middle key of any number of rows in bounded memory."""

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.stride = 1
        self.rows = 0

    def add(self, batch: list[ReplyRow]) -> None:
        stride = self.stride
        self.keys.extend(result.row for result in batch[(-self.rows) % stride::stride])
        self.rows += len(batch)
        while len(self.keys) > SAMPLE_KEYS:
            del self.keys[1::2]  # those at odd multiples of the stride
            self.stride *= 2

    def middle(self) -> bytes:
        return self.keys[len(self.keys) // 2]


def _halves(first: Scanner, second: Scanner) -> Generator[list[ReplyRow], None, None]:
    """``first``'s batches, then ``second``'s, which a thread fetches meanwhile."""
    ahead: queue.Queue[list[ReplyRow] | BaseException | None] = queue.Queue(AHEAD_BATCHES)
    left = threading.Event()  # the reader stopped early: the thread stops too
    thread = threading.Thread(target=_fetch_ahead, args=(second, ahead, left),
                              name="pytsd-hbase-half", daemon=True)
    thread.start()
    try:
        yield from first.batches()
        while (batch := ahead.get()) is not None:
            if isinstance(batch, BaseException):
                raise batch
            yield batch
    finally:
        left.set()
        thread.join()


def _fetch_ahead(scanner: Scanner, ahead: queue.Queue[list[ReplyRow] | BaseException | None],
                 left: threading.Event) -> None:
    batches = scanner.batches()
    try:
        for batch in batches:
            if not _put(ahead, batch, left):
                return
        _put(ahead, None, left)
    except BaseException as exc:  # handed to the reader, which raises it
        _put(ahead, exc, left)
    finally:
        batches.close()  # closes the scanner when the reader left early


def _put(ahead: queue.Queue[Any], item: Any, left: threading.Event) -> bool:
    """Hand ``item`` to the reader; False when the reader left."""
    while not left.is_set():
        try:
            ahead.put(item, timeout=PUT_WAIT_S)
            return True
        except queue.Full:
            continue
    return False
