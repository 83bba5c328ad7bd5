"""The three scanner calls ``hbase_scan.Scanner`` makes (``ScannerCalls``), on HBase's native
RPC: a scanner id names a :class:`~app.storage.hbase_native.scan.TableScan` of this object,
which reads across regions; failures become pytsd's storage errors."""

from __future__ import annotations

import itertools
import threading
from typing import Generic, TypeVar

from app.errors import StorageError, StorageUnavailableError
from app.storage.hbase_native.client import NativeClient
from app.storage.hbase_native.rpc import RpcError
from app.storage.hbase_native.scan import TableScan
from app.storage.hbase_native.zk import ZooKeeperError
from app.storage.hbase_reply import ReplyRow

Scan = TypeVar("Scan")

# Java exception names that mean "HBase cannot serve this right now" (a 503).
UNAVAILABLE = ("NotServingRegion", "RegionMoved", "RegionOpening", "RegionServerStopped",
               "ServerNotRunningYet", "RegionTooBusy", "CallQueueTooBig", "ServerTooBusy",
               "PleaseHold", "CallTimeout")


def storage_error(client: NativeClient, table: str, exc: Exception) -> StorageError:
    op = f"scan {table} (native RPC, ZooKeeper quorum {client.zk_quorum})"
    if isinstance(exc, RpcError) and exc.exception_class:
        if any(marker in exc.exception_class for marker in UNAVAILABLE):
            return StorageUnavailableError(
                f"HBase is unavailable: its region servers did not serve the request ({op})",
                str(exc))
        return StorageError(f"HBase failed to {op}", str(exc))
    if isinstance(exc, RpcError | ZooKeeperError | OSError):
        return StorageUnavailableError(f"HBase is unavailable: {op} failed", str(exc))
    return StorageError(f"HBase failed to {op}: unreadable reply", repr(exc))


class OpenScans(Generic[Scan]):
    """The scans a ``ScannerCalls`` has open, by the ids it hands ``hbase_scan.Scanner``
    (thread-safe: a query's scans run on several threads)."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._scans: dict[int, Scan] = {}
        self._lock = threading.Lock()

    def add(self, scan: Scan) -> int:
        with self._lock:
            scanner_id = next(self._ids)
            self._scans[scanner_id] = scan
        return scanner_id

    def get(self, scanner_id: int) -> Scan:
        with self._lock:
            return self._scans[scanner_id]

    def pop(self, scanner_id: int) -> Scan | None:
        with self._lock:
            return self._scans.pop(scanner_id, None)


class NativeScannerCalls:
    """``open_scanner`` / ``scanner_rows`` / ``close_scanner`` of one table, natively.
    ``filter_message`` (a native ``Filter``) replaces the filter-language string."""

    def __init__(self, client: NativeClient, name: str, full_name: bytes,
                 filter_message: bytes | None) -> None:
        self.client = client
        self.name = name
        self.full_name = full_name
        self.filter_message = filter_message
        self._scans: OpenScans[TableScan] = OpenScans()

    def open_scanner(self, start: bytes, stop: bytes | None, columns: list[bytes],
                     caching: int, filter_string: bytes | None) -> int:
        scan = TableScan(self.client, self.full_name, start, stop, columns,
                         self.filter_message)
        return self._scans.add(scan)

    def scanner_rows(self, scanner_id: int, count: int) -> list[ReplyRow]:
        scan = self._scans.get(scanner_id)
        try:
            return scan.rows(count)
        except (RpcError, ZooKeeperError, OSError, ValueError) as exc:
            raise storage_error(self.client, self.name, exc) from exc

    def close_scanner(self, scanner_id: int) -> None:
        scan = self._scans.pop(scanner_id)
        if scan is not None:
            scan.close()
