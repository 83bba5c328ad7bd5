"""A scan through HBase's native RPC: a key range read region by region, each region with a
server-side scanner (``ClientService.Scan``: open, next with ``next_call_seq``, close).

A region's scanner ends when the server says ``more_results_in_region`` is false (it closes
the scanner itself then); the range goes on in the next region unless this one ends at or
after the range's stop, or the server said ``more_results`` false (the scan is over: a filter
is done with all remaining rows). A region that moved, or a scanner the server lost, is
reopened just after the last row returned, once per batch (the regions read again from
``hbase:meta``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from app.storage.hbase_native import cellblock, messages
from app.storage.hbase_native.messages import Region
from app.storage.hbase_native.rpc import RpcError
from app.storage.hbase_reply import ReplyRow

log = logging.getLogger(__name__)

Call = Callable[[str, str, bytes], tuple[bytes, bytes]]  # (server, method, request)
# The server's exceptions after which the scan is reopened where it stopped, the table's
# regions read again from hbase:meta: the region is elsewhere (moved, split, its server
# stopping) or the scanner is gone (its lease expired, a reply lost).
REOPEN = frozenset({"NotServingRegionException", "RegionMovedException",
                    "RegionOpeningException", "RegionServerStoppedException",
                    "ServerNotRunningYetException", "UnknownScannerException",
                    "OutOfOrderScannerNextException", "ScannerResetException",
                    "LeaseException"})


class RegionScanner:
    """One server-side scanner over ``[start, stop)`` within one region."""

    def __init__(self, call: Call, region: Region, start: bytes, stop: bytes | None,
                 columns: list[bytes], filter_message: bytes | None) -> None:
        self.call = call
        self.region = region
        self.start = start
        self.stop = stop
        self.columns = columns
        self.filter_message = filter_message
        self.scanner_id: int | None = None
        self.call_seq = 0
        self.done = False  # the region holds no more rows of the range
        self.scan_over = False  # ... nor does any region after it (``more_results`` false)

    def next_rows(self, count: int) -> list[ReplyRow]:
        if not self.region.server:
            raise RpcError(f"region {self.region.name!r} is not assigned to a server",
                           "NotServingRegionException")
        if self.scanner_id is None:
            scan = messages.scan(max(self.start, self.region.start), self.stop, self.columns,
                                 self.filter_message, count)
            request = messages.open_request(self.region.name, scan, count)
        else:
            request = messages.next_request(self.scanner_id, count, self.call_seq)
            self.call_seq += 1
        response, block = self.call(self.region.server, "Scan", request)
        reply = messages.scan_reply(response)
        if self.scanner_id is None:
            self.scanner_id = reply.scanner_id
        if reply.pb_results:
            raise RpcError("the server sent Result messages, not a cell block")
        rows = cellblock.rows(block, reply.cells_per_row)
        if not reply.more_results or not reply.more_in_region:
            self.done = True  # the server closed the scanner
        self.scan_over = not reply.more_results
        return rows

    def close(self) -> None:
        if self.scanner_id is None or self.done:
            return
        self.done = True
        try:
            self.call(self.region.server, "Scan", messages.close_request(self.scanner_id))
        except RpcError as exc:  # the server's lease expires it anyway
            log.info("could not close an HBase scanner: %s", exc)


def region_rows(call: Call, region: Region, start: bytes, stop: bytes | None,
                columns: list[bytes], rows_per_call: int) -> list[ReplyRow]:
    """All rows of ``[start, stop)`` in one region (small reads: ``hbase:meta``)."""
    scanner = RegionScanner(call, region, start, stop, columns, None)
    out: list[ReplyRow] = []
    try:
        while not scanner.done:
            out.extend(scanner.next_rows(rows_per_call))
    finally:
        scanner.close()
    return out


class Locator(Protocol):
    """Where a table's keys are (``client.NativeClient``)."""

    def call(self, server: str, method: str, request: bytes) -> tuple[bytes, bytes]: ...

    def region_of(self, table: bytes, key: bytes, refresh: bool = False) -> Region: ...


class TableScan:
    """``[start, stop)`` of a table across its regions, read ``count`` rows at a time."""

    def __init__(self, locator: Locator, table: bytes, start: bytes, stop: bytes | None,
                 columns: list[bytes], filter_message: bytes | None) -> None:
        self.locator = locator
        self.table = table
        self.stop = stop or None
        self.columns = columns
        self.filter_message = filter_message
        self.resume = start  # the smallest key not read yet
        self.region: RegionScanner | None = None
        self.finished = False

    def _open(self, refresh: bool) -> RegionScanner:
        region = self.locator.region_of(self.table, self.resume, refresh)
        return RegionScanner(self.locator.call, region, self.resume, self.stop, self.columns,
                             self.filter_message)

    def rows(self, count: int) -> list[ReplyRow]:
        """Up to ``count`` rows; fewer only at the end of the range."""
        out: list[ReplyRow] = []
        while len(out) < count and not self.finished:
            batch = self._batch(count - len(out))
            if batch:
                out.extend(batch)
                self.resume = batch[-1].row + b"\x00"
            assert self.region is not None
            if self.region.done:
                self._next_region()
        return out

    def _batch(self, count: int) -> list[ReplyRow]:
        if self.region is None:
            self.region = self._open(refresh=False)
        try:
            return self.region.next_rows(count)
        except RpcError as exc:
            if exc.timed_out or (exc.exception_class and exc.short_class not in REOPEN):
                raise
            log.info("reopening an HBase scan of %s: %s", self.table.decode(errors="replace"),
                     exc)
        self.region = self._open(refresh=True)
        return self.region.next_rows(count)

    def _next_region(self) -> None:
        assert self.region is not None
        end = self.region.region.end
        over = self.region.scan_over
        self.region = None
        if over or not end or (self.stop is not None and end >= self.stop):
            self.finished = True
        else:
            self.resume = max(self.resume, end)

    def close(self) -> None:
        if self.region is not None:
            self.region.close()
            self.region = None
        self.finished = True
