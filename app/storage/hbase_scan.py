"""Reading one HBase scan batch by batch through the Thrift1 gateway.

A Thrift1 scanner is an id held by the gateway, not by a connection, so every batch borrows a
pooled connection for one ``scannerGetList`` call only: an abandoned or slow consumer never
holds a connection. When a connection breaks or the gateway forgot the scanner (its lease
expired), the scan is reopened just after the last row returned, so no row is lost or repeated.

Rows per call adapt to the rows' size: a compacted hour row is one cell, a raw one up to 3600,
and a call should move a few megabytes, not hundreds of them. While the caller works through
one batch the next is already being fetched (the store's prefetch threads): reading
uncompacted rows is mostly the gateway's time, which then overlaps the caller's.
"""

from __future__ import annotations

import logging
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
        """The rows, each as ``shape`` makes it (see :meth:`batches`)."""
        for results in self.batches(limit):
            yield from map(self.shape, results)

    def batches(self, limit: int | None = None) -> Generator[list[ReplyRow], None, None]:
        """The rows as the calls return them; with a ``prefetch`` executor the next batch is
        fetched while the caller works through this one (the gateway's time overlaps the
        caller's: Thrift I/O releases the GIL). One call is in flight at a time, so batches
        stay in order."""
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
                yield results
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


def _reopenable(cause: BaseException | None) -> bool:
    """A lost scanner, or a broken (not timed-out) connection: reopening may work."""
    if cause is None:
        return False
    if hbase_errors.is_lost_scanner(cause):
        return True
    return hbase_errors.is_transport_error(cause) and not hbase_errors.is_timeout(cause)
