"""The native scan client: pooled connections per region server and a table's regions read from
``hbase:meta`` (whose server ZooKeeper names); ``scan.TableScan`` reads a key range with them.

Connections are pooled per server and process (a forked worker opens its own); each call
borrows one, so any thread may scan. A region not served where ``hbase:meta`` said
(``NotServingRegionException``, ``RegionMovedException``, a region still opening) makes the
table's regions be read again, once per batch (``scan.TableScan``); a second failure is an
error.
"""

from __future__ import annotations

import os
import threading

from app.storage.hbase_native import messages, zk
from app.storage.hbase_native.messages import Region
from app.storage.hbase_native.rpc import Connection, RpcError
from app.storage.hbase_native.scan import region_rows

META_REGION = b"hbase:meta,,1"
META_ROWS_PER_CALL = 1000
IDLE_PER_SERVER = 8


class NativeClient:
    """HBase's native RPC client for scans, from a ZooKeeper quorum (``host[:port],...``)."""

    def __init__(self, zk_quorum: str, zk_basedir: str = "/hbase",
                 timeout_s: float = 10.0) -> None:
        self._lock = threading.Lock()  # first: __del__ needs them if parse_quorum raises
        self._idle: dict[str, list[Connection]] = {}
        self._pid = os.getpid()
        self.zk_quorum = zk_quorum
        self.zk_servers = zk.parse_quorum(zk_quorum)
        self.zk_basedir = zk_basedir
        self.timeout_s = timeout_s
        self._regions: dict[bytes, list[Region]] = {}

    # ------------------------------------------------------------ connections

    def call(self, server: str, method: str, request: bytes,
             cells: bytes = b"") -> tuple[bytes, bytes]:
        """One call on a pooled connection to ``server`` (``host:port``); ``cells``: a cell
        block sent with the request (``multi``'s puts)."""
        connection = self._borrow(server)
        try:
            reply = connection.call(method, request, cells)
        finally:
            self._give_back(server, connection)
        return reply

    def _borrow(self, server: str) -> Connection:
        with self._lock:
            if self._pid != os.getpid():  # a forked worker: never share the parent's sockets
                self._idle, self._pid = {}, os.getpid()
            idle = self._idle.get(server)
            if idle:
                return idle.pop()
        host, _, port = server.rpartition(":")
        try:
            return Connection(host, int(port), self.timeout_s)
        except OSError as exc:
            raise RpcError(f"cannot connect to HBase region server {server}: {exc}") from exc

    def _give_back(self, server: str, connection: Connection) -> None:
        if connection.closed:
            return
        with self._lock:
            idle = self._idle.setdefault(server, [])
            if len(idle) < IDLE_PER_SERVER and self._pid == os.getpid():
                idle.append(connection)
                return
        connection.close()

    def __del__(self) -> None:
        # A store dropped without close() (as happybase's connections do for Thrift): its
        # idle sockets are closed, not left to the collector.
        self.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
            if self._pid != os.getpid():  # a forked worker: the parent's sockets stay open
                return
        for connections in idle.values():
            for connection in connections:
                connection.close()

    # ------------------------------------------------------------ regions

    def regions(self, table: bytes, refresh: bool = False) -> list[Region]:
        """The table's online regions in key order."""
        with self._lock:
            known = self._regions.get(table)
        if known is not None and not refresh:
            return known
        found = self._read_meta(table)
        with self._lock:
            self._regions[table] = found
        return found

    def region_of(self, table: bytes, key: bytes, refresh: bool = False) -> Region:
        for region in self.regions(table, refresh):
            if region.holds(key):
                return region
        if not refresh:
            return self.region_of(table, key, refresh=True)
        raise RpcError(f"no region of {table.decode(errors='replace')} holds this key "
                       "in hbase:meta (table missing?)")

    def _read_meta(self, table: bytes) -> list[Region]:
        host, port = zk.meta_server(self.zk_servers, self.zk_basedir, self.timeout_s)
        meta = Region(META_REGION, b"", b"", f"{host}:{port}")
        # Meta rows are "table,start,id.encoded.", ordered by hbase:meta's own comparator
        # (table, then start key, then id): HBase's client reads a table's rows from
        # "table,," to "table ,," (a space sorts after the end of a table's name there).
        scanned = region_rows(self.call, meta, table + b",,", table + b" ,,", [b"info"],
                              META_ROWS_PER_CALL)
        found: list[Region] = []
        for row in scanned:
            cells = dict(zip(row.column_list(), row.value_list(), strict=True))
            info = cells.get(b"info:regioninfo")
            if info is None:
                continue
            start, end, gone = messages.region_info(info)
            if not gone:
                found.append(Region(row.row, start, end,
                                    cells.get(b"info:server", b"").decode()))
        return sorted(found, key=lambda region: region.start)
