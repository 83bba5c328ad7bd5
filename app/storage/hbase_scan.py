"""Reading one HBase scan batch by batch through the Thrift1 gateway.

A Thrift1 scanner is an id held by the gateway, not by a connection, so every batch borrows a
pooled connection for one ``scannerGetList`` call only: an abandoned or slow consumer never
holds a connection. When a connection breaks or the gateway forgot the scanner (its lease
expired), the scan is reopened just after the last row returned, so no row is lost or repeated.

Rows per call adapt to the rows' size: a compacted hour row is one cell, a raw one up to 3600,
and a call should move a few megabytes, not hundreds of them. While the caller works through
one batch the next is already being fetched (the store's prefetch threads): reading
uncompacted rows is mostly the gateway's time, which then overlaps the caller's.

A range read before, whose read took a while and was not large, is read again in two halves
at once (cut at the row that halved its last read, :class:`Halves`): one scanner is one
handler thread on a region server, and a read of compacted rows (whose deleted cells the
server still walks) or of a few hundred raw rows is mostly that thread's time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Executor, Future
from typing import Any, Protocol

from app.errors import StorageError, StorageUnavailableError
from app.storage import hbase_errors
from app.storage.base import Row
from app.storage.hbase_reply import ReplyRow

log = logging.getLogger(__name__)

FIRST_SCAN_CALL_ROWS = 100  # until the rows' size is known
# Later calls: about this many cells (~2 MB, HBase's own max result size per RPC), so a read
# of a few hundred raw rows has several calls and the prefetched ones overlap the caller's
# work. On the 2 shared cores of the development box (gateway, region server and pytsd on
# the same cores) the wall time measured the same as with 200,000 (bench_hbase_fresh.py).
SCAN_CALL_CELLS = 50_000
# A full read of a range at least this long (wall time, its caller's work included) and of
# at most this many cells is read in halves the next time: the second half is held in
# memory while the first streams, and a short read gains less than a scanner's opening costs.
HALVES_MIN_MS = 8.0
HALVES_MAX_CELLS = 4 * SCAN_CALL_CELLS


class ScannerCalls(Protocol):
    """The three Thrift1 scanner calls, as ``HBaseTable`` makes them."""

    name: str

    def open_scanner(self, start: bytes, stop: bytes | None, columns: list[bytes],
                     caching: int, filter_string: bytes | None) -> int: ...

    def scanner_rows(self, scanner_id: int, count: int) -> list[ReplyRow]: ...

    def close_scanner(self, scanner_id: int) -> None: ...


def row_cells(result: ReplyRow) -> tuple[bytes, Row]:
    """A row of a ``scannerGetList`` reply as ``(row_key, {column: value})``, in HBase's
    column order (``hbase_reply`` sorts the gateway's signed-order map)."""
    return result.row, result.cells()


def row_stamp(result: ReplyRow) -> tuple[bytes, int, int]:
    """``(row_key, cells, newest write time in ms)``."""
    return result.row, result.count, result.newest_ms


def row_cells_stamped(result: ReplyRow) -> tuple[bytes, Row, int, int, int]:
    """``(row_key, {column: value}, cells, newest write time in ms, stored bytes)``: the
    stamp of exactly the cells returned (a row is read atomically)."""
    return (result.row, result.cells(), result.count, result.newest_ms,
            result.stored_bytes())


def row_stamp_sized(result: ReplyRow) -> tuple[bytes, int, int, int]:
    """:func:`row_stamp` and the row's stored bytes, from a ``KeyOnlyFilter(true)`` scan
    (each value is its length as a 4-byte integer)."""
    size = len(result.row) * result.count + len(result.columns) + result.value_total()
    return result.row, result.count, result.newest_ms, size


class Scanner:
    """One scan of ``[start, stop)``; :meth:`rows` yields ``shape(result)`` per row,
    ``(row_key, cells)`` by default."""

    def __init__(self, table: ScannerCalls, start: bytes, stop: bytes | None,
                 columns: list[bytes], max_rows: int, filter_string: bytes | None,
                 shape: Callable[[ReplyRow], Any] = row_cells,
                 prefetch: Executor | None = None) -> None:
        self.shape = shape
        self.prefetch = prefetch
        self.table = table
        self.start = start
        self.stop = stop
        self.columns = columns
        self.max_rows = max_rows
        self.per_call = min(max_rows, FIRST_SCAN_CALL_ROWS)
        self.filter_string = filter_string

    def _open(self, start: bytes) -> int:
        return self.table.open_scanner(start, self.stop, self.columns, self.per_call,
                                       self.filter_string)

    def _close(self, scanner_id: int) -> None:
        try:
            self.table.close_scanner(scanner_id)
        except StorageError as exc:  # the gateway expires it anyway; the rows are read
            log.info("could not close an HBase scanner: %s", exc.details)

    def _next(self, scanner_id: int, count: int, resume: bytes) -> tuple[int, list[ReplyRow]]:
        try:
            return scanner_id, self.table.scanner_rows(scanner_id, count)
        except StorageError as exc:
            if not _reopenable(exc.__cause__):
                raise
        log.info("reopening an HBase scan of %s", self.table.name)
        scanner_id = self._open(resume)
        return scanner_id, self.table.scanner_rows(scanner_id, count)

    def _resize(self, results: list[ReplyRow]) -> None:
        cells = sum(result.count for result in results)
        rows_in_budget = SCAN_CALL_CELLS * len(results) // max(cells, 1)
        self.per_call = max(1, min(self.max_rows, rows_in_budget))

    def rows(self, limit: int | None = None) -> Iterator[Any]:
        """The rows, shaped; a whole range read before in halves when :data:`HALVES` says
        so (never with a ``limit``: a look at the first rows)."""
        if limit is not None:
            yield from map(self.shape, self._results(limit))
            return
        cut = HALVES.cut(self.table.name, self.start, self.stop) \
            if self.prefetch is not None else None
        started = time.perf_counter()
        keys: list[bytes] | None = []
        cells = 0
        results = self._results(None) if cut is None else self._halves(cut)
        try:
            for result in results:
                if keys is not None:
                    keys.append(result.row)
                    cells += result.count
                    if cells > HALVES_MAX_CELLS:
                        keys = None  # too large to hold a half of
                yield self.shape(result)
        finally:
            results.close()
        elapsed_ms = (time.perf_counter() - started) * 1000
        HALVES.read(self.table.name, self.start, self.stop,
                    keys if elapsed_ms >= HALVES_MIN_MS else None)

    def _part(self, start: bytes, stop: bytes | None,
              prefetch: Executor | None = None) -> Scanner:
        return Scanner(self.table, start, stop, self.columns, self.max_rows,
                       self.filter_string, prefetch=prefetch)

    def _halves(self, cut: bytes) -> Generator[ReplyRow, None, None]:
        """The range's rows from two scanners at once: the second half fetched on a
        prefetch thread (inline calls only there: it never waits for another prefetch
        thread), up to ``HALVES_MAX_CELLS`` (the rest streamed after it: the range may
        have grown), while the first streams here. The second starts once the caller asks
        for a second row (a look at the first row, ``cached.first_row``, reads no more)."""
        assert self.prefetch is not None
        later: Future[tuple[list[ReplyRow], bytes | None]] | None = None
        try:
            for result in self._part(self.start, cut, self.prefetch)._results(None):
                yield result
                if later is None:
                    later = self.prefetch.submit(_held, self._part(cut, self.stop))
            if later is None:
                later = self.prefetch.submit(_held, self._part(cut, self.stop))
            held, rest = later.result()
            yield from held
            if rest is not None:
                yield from self._part(rest, self.stop, self.prefetch)._results(None)
        finally:
            if later is not None:
                later.cancel()  # not started yet: not needed; else it ends on its own

    def _results(self, limit: int | None) -> Generator[ReplyRow, None, None]:
        """The range's rows as read; with a ``prefetch`` executor the next batch is fetched
        while the caller works through this one (the gateway's time overlaps the caller's:
        Thrift I/O releases the GIL). One call is in flight at a time, so batches stay in
        order."""
        if limit is not None and limit <= 0:
            return
        scanner_id = self._open(self.start)
        reachable = True
        pending: Future[tuple[int, list[ReplyRow]]] | None = None
        try:
            remaining = limit
            count = self.per_call if remaining is None else min(self.per_call, remaining)
            # The first batch is waited for anyway: fetched here, without a thread hop (most
            # narrowed scans are one batch).
            current = pending = self._fetch(scanner_id, count, self.start, inline=True)
            while True:
                scanner_id, results = current.result()
                pending = None
                if remaining is not None:
                    remaining -= len(results)
                # A short batch is the end of the range.
                more = len(results) == count and (remaining is None or remaining > 0)
                if more:
                    self._resize(results)
                    count = self.per_call if remaining is None else min(self.per_call,
                                                                         remaining)
                    # The smallest key after the last row: where a reopened scan resumes.
                    current = pending = self._fetch(scanner_id, count,
                                                    results[-1].row + b"\x00")
                yield from results
                if not more:
                    return
        except StorageUnavailableError:
            reachable = False  # closing would only wait for the same unreachable server
            raise
        finally:
            if pending is not None:  # the caller stopped early: let the call in flight end
                try:
                    scanner_id, _ = pending.result()
                except StorageUnavailableError:
                    reachable = False
                except StorageError:
                    pass
            if reachable:
                self._close(scanner_id)

    def _fetch(self, scanner_id: int, count: int, resume: bytes,
               inline: bool = False) -> Future[tuple[int, list[ReplyRow]]]:
        if inline or self.prefetch is None:
            done: Future[tuple[int, list[ReplyRow]]] = Future()
            try:
                done.set_result(self._next(scanner_id, count, resume))
            except StorageError as exc:
                done.set_exception(exc)
            return done
        return self.prefetch.submit(self._next, scanner_id, count, resume)


def _held(scanner: Scanner) -> tuple[list[ReplyRow], bytes | None]:
    """A scanner's rows up to ``HALVES_MAX_CELLS`` (a row more at most), and where the rest
    starts (None: no rest)."""
    held: list[ReplyRow] = []
    cells = 0
    results = scanner._results(None)
    try:
        for result in results:
            held.append(result)
            cells += result.count
            if cells >= HALVES_MAX_CELLS:
                return held, result.row + b"\x00"
    finally:
        results.close()
    return held, None


class Halves:
    """Where to cut ranges read before (by table and range: the row that halved the last
    full read), for those whose last read was long and not large; a bounded memory shared by
    a process's threads."""

    MAX_RANGES = 1024

    def __init__(self) -> None:
        self._cuts: OrderedDict[tuple[str, bytes, bytes | None], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def cut(self, table: str, start: bytes, stop: bytes | None) -> bytes | None:
        with self._lock:
            return self._cuts.get((table, start, stop))

    def read(self, table: str, start: bytes, stop: bytes | None,
             keys: list[bytes] | None) -> None:
        """A full read of the range ended: ``keys``, its rows' keys (None: not worth
        halving next time)."""
        at = (table, start, stop)
        with self._lock:
            if keys is None or len(keys) < 2:
                self._cuts.pop(at, None)
                return
            self._cuts[at] = keys[len(keys) // 2]
            self._cuts.move_to_end(at)
            while len(self._cuts) > self.MAX_RANGES:
                self._cuts.popitem(last=False)


HALVES = Halves()


def _reopenable(cause: BaseException | None) -> bool:
    """A lost scanner, or a broken (not timed-out) connection: reopening may work."""
    if cause is None:
        return False
    if hbase_errors.is_lost_scanner(cause):
        return True
    return hbase_errors.is_transport_error(cause) and not hbase_errors.is_timeout(cause)
