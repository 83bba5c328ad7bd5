"""Which RPC this process's data scans take (``tsd.storage.hbase.scan_rpc``), decided here;
its writes (``tsd.storage.hbase.write_rpc``) are decided the same way, by a second
:class:`RpcChoice` (:data:`WRITES`; a native write that cannot reach HBase: ``multi.Unreached``).

``thrift``: the Thrift gateway always. ``native``: HBase's own RPC always; a failure is a
503. ``auto`` (the default): native while it works. The first data scan of a process probes
(:func:`probe`): ZooKeeper at ``tsd.storage.hbase.zk_quorum`` names the server of
``hbase:meta``, that server lists the data table's regions, and every server holding one
accepts a connection, each step within ``PROBE_TIMEOUT_S``. When any step fails, scans go
through Thrift, a warning says why, and the probe runs again every
``tsd.storage.hbase.scan_rpc_probe_s`` on a thread of its own (a ZooKeeper that comes up
later is then used, and no query waits for the probe). A native scan that cannot reach its
servers later (ZooKeeper gone, a connection refused, a name no longer resolved) finishes
through Thrift from where it stopped (:class:`AutoScannerCalls`) and puts the process back
on Thrift the same way; an error HBase itself answered, or a call that timed out, is the
query's error as on Thrift.

Each process decides alone (a forked gunicorn worker probes again): the nodes of a fleet
may differ, harmlessly, as both RPCs read the same cells.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from app.errors import StorageError
from app.storage.hbase_native.calls import OpenScans
from app.storage.hbase_native.client import NativeClient
from app.storage.hbase_native.rpc import Connection, RpcError, unreachable
from app.storage.hbase_reply import ReplyRow
from app.storage.hbase_scan import ScannerCalls

log = logging.getLogger(__name__)

SETTINGS = ("auto", "native", "thrift")
PROBE_TIMEOUT_S = 2.0  # per step: a refused or unresolved address answers at once
StatLine = tuple[str, "float | int", dict[str, str]]


@dataclass(frozen=True)
class Use:
    """What a :class:`RpcChoice` decides for: its setting, its words in the log, its stats."""

    setting: str
    doing: str
    call: str
    stat: str
    probes_stat: str


SCANS = Use("tsd.storage.hbase.scan_rpc", "HBase data scans", "scan",
            "tsd.storage.hbase.native_scans", "tsd.storage.hbase.native_probes")
WRITES = Use("tsd.storage.hbase.write_rpc", "HBase writes", "write",
             "tsd.storage.hbase.native_writes", "tsd.storage.hbase.native_write_probes")


def probe(client: NativeClient, tables: Sequence[bytes], timeout_s: float) -> str:
    """What the native RPC reaches for ``tables`` (a sentence for the log), or an
    ``OSError`` (``ZooKeeperError``, ``RpcError``) saying where it stops. A client of its
    own with ``timeout_s``: the real one's sockets keep ``tsd.storage.hbase.timeout_ms``."""
    prober = NativeClient(client.zk_quorum, client.zk_basedir, timeout_s)
    try:
        servers: set[str] = set()
        for table in tables:  # hbase:meta's server from ZooKeeper, then a scan of it
            servers.update(region.server for region in prober.regions(table) if region.server)
        for server in sorted(servers):
            host, _, port = server.rpartition(":")
            try:
                Connection(host, int(port), timeout_s).close()
            except OSError as exc:
                raise RpcError(f"cannot connect to HBase region server {server} "
                               f"(named in hbase:meta): {exc}") from exc
    finally:
        prober.close()
    return (f"ZooKeeper at {client.zk_quorum} located hbase:meta; the data table's regions "
            f"are on {', '.join(sorted(servers)) or 'no server yet'}")


class RpcChoice:
    """Thrift or the native RPC, decided for one store (its process) and one use (data scans
    or writes: ``use``): :meth:`client` before each call."""

    def __init__(self, setting: str, client: NativeClient | None, tables: Sequence[bytes],
                 probe_every_s: float, probe_timeout_s: float = PROBE_TIMEOUT_S,
                 use: Use = SCANS) -> None:
        if setting not in SETTINGS:
            raise ValueError(f"{use.setting} must be one of {SETTINGS}")
        if client is None and setting != "thrift":
            raise ValueError(f"{use.setting}={setting} needs a native client")
        self.use = use
        self.setting = setting
        self.native = client
        self.tables = list(tables)
        self.probe_every_s = probe_every_s
        self.probe_timeout_s = probe_timeout_s
        self._lock = threading.Lock()
        self._first = threading.Lock()  # held by the first probe: other scans wait for it
        self._pid = os.getpid()
        self._on_native: bool | None = None if setting == "auto" else setting == "native"
        self._next_probe_s = 0.0
        self._probing = False
        self.probes = 0  # of this process, for tests and /api/stats

    @property
    def on_native(self) -> bool | None:
        """Whether scans go native now (None: ``auto`` has not probed in this process)."""
        self._after_fork()
        return self._on_native

    def client(self) -> NativeClient | None:
        """The native client for this scan, or None: through Thrift."""
        if self.setting != "auto":
            return self.native if self._on_native else None
        self._after_fork()
        if self._on_native is None:
            with self._first:
                if self._on_native is None:
                    self._probe()
        elif not self._on_native and self._probe_due():
            threading.Thread(target=self._probe, name="pytsd-native-rpc-probe",
                             daemon=True).start()
        return self.native if self._on_native else None

    def unreachable(self, reason: str) -> None:
        """``auto``: a native call could not reach its servers; Thrift until a probe works."""
        with self._lock:
            if not self._on_native or self.setting != "auto":
                return
            self._on_native = False
            self._next_probe_s = time.monotonic() + self.probe_every_s
        log.warning("%s now go through the Thrift gateway (%s=auto): a native %s failed: "
                    "%s; trying the native RPC again in %g s", self.use.doing, self.use.setting,
                    self.use.call, reason, self.probe_every_s)

    def stat_lines(self) -> list[StatLine]:
        """For ``/api/stats``: 1 while this process's data scans (writes) go native."""
        return [(self.use.stat, int(bool(self.on_native)), {"setting": self.setting}),
                (self.use.probes_stat, self.probes, {"setting": self.setting})]

    def _after_fork(self) -> None:
        if self._pid == os.getpid():
            return
        with self._lock:  # a forked worker decides for itself (the parent's probe thread is gone)
            if self._pid != os.getpid():
                self._pid, self._probing, self._next_probe_s = os.getpid(), False, 0.0
                self._first = threading.Lock()
                if self.setting == "auto":
                    self._on_native = None

    def _probe_due(self) -> bool:
        with self._lock:
            if self._probing or time.monotonic() < self._next_probe_s:
                return False
            self._probing = True
            return True

    def _probe(self) -> None:
        assert self.native is not None
        first = self._on_native is None
        try:
            found = probe(self.native, self.tables, self.probe_timeout_s)
        except Exception as exc:  # noqa: BLE001 - whatever stops it, Thrift still answers
            self._decided(False, str(exc) or repr(exc), first)
        else:
            self._decided(True, found, first)

    def _decided(self, native: bool, detail: str, first: bool) -> None:
        with self._lock:
            self.probes += 1
            self._on_native = native
            self._probing = False
            self._next_probe_s = time.monotonic() + self.probe_every_s
        doing, setting = self.use.doing, self.use.setting
        if native:
            log.info("%s go over HBase's native RPC (%s=auto): %s", doing, setting, detail)
        elif first:
            log.warning("%s go through the Thrift gateway (%s=auto): the native RPC is not "
                        "reachable: %s; trying again every %g s "
                        "(tsd.storage.hbase.scan_rpc_probe_s; =thrift stops trying)",
                        doing, setting, detail, self.probe_every_s)
        else:
            log.debug("the native RPC is still not reachable: %s", detail)


@dataclass
class _Scan:
    """One scan of :class:`AutoScannerCalls`: its arguments, where it is, and which RPC's
    scanner reads it now."""

    stop: bytes | None
    columns: list[bytes]
    caching: int
    filter_string: bytes | None
    resume: bytes  # the smallest key not returned yet
    native_id: int | None
    thrift_id: int | None = None


class AutoScannerCalls:
    """``auto``'s scanner calls: natively, until the native RPC cannot reach its servers;
    then through Thrift from the row after the last one returned (nothing lost or repeated),
    the process back on Thrift (:meth:`RpcChoice.unreachable`)."""

    def __init__(self, native: ScannerCalls, thrift: ScannerCalls, rpc: RpcChoice) -> None:
        self.native = native
        self.thrift = thrift
        self.rpc = rpc
        self.name = thrift.name
        self._scans: OpenScans[_Scan] = OpenScans()

    def open_scanner(self, start: bytes, stop: bytes | None, columns: list[bytes],
                     caching: int, filter_string: bytes | None) -> int:
        scan = _Scan(stop, columns, caching, filter_string, start, None)
        if self.rpc.on_native:  # a scan reopened after the process went back to Thrift: Thrift
            scan.native_id = self.native.open_scanner(start, stop, columns, caching,
                                                      filter_string)
        else:
            scan.thrift_id = self.thrift.open_scanner(start, stop, columns, caching,
                                                      filter_string)
        return self._scans.add(scan)

    def scanner_rows(self, scanner_id: int, count: int) -> list[ReplyRow]:
        scan = self._scans.get(scanner_id)
        if scan.native_id is not None:
            try:
                rows = self.native.scanner_rows(scan.native_id, count)
            except StorageError as exc:
                if not unreachable(exc.__cause__):
                    raise
                self.rpc.unreachable(exc.details or str(exc))
                self.native.close_scanner(scan.native_id)
                scan.native_id = None
                scan.thrift_id = self.thrift.open_scanner(
                    scan.resume, scan.stop, scan.columns, scan.caching, scan.filter_string)
            else:
                if rows:
                    scan.resume = rows[-1].row + b"\x00"
                return rows
        assert scan.thrift_id is not None
        return self.thrift.scanner_rows(scan.thrift_id, count)

    def close_scanner(self, scanner_id: int) -> None:
        scan = self._scans.pop(scanner_id)
        if scan is None:
            return
        if scan.native_id is not None:
            self.native.close_scanner(scan.native_id)
        if scan.thrift_id is not None:
            self.thrift.close_scanner(scan.thrift_id)
