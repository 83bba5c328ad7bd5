"""The HBase backend: the storage interface over HBase's Thrift1 gateway, through happybase.

It reads and writes OpenTSDB's own tables byte for byte; nothing here knows about points or
UIDs. What it adds to raw happybase:

* a happybase ``ConnectionPool`` per process, created on first use (so after a gunicorn fork),
  with a socket timeout on every call and connections renewed after a long idle period (Thrift
  servers close idle sockets, 60 s by default);
* one retry, on a fresh connection, of calls that are safe to repeat (reads, puts, deletes) when
  the connection broke; appends, increments and checkAndPuts are never repeated;
* Thrift and HBase exceptions turned into ``StorageUnavailableError`` (503) or
  ``StorageError`` (500) with the first line of HBase's message (``hbase_errors``);
* scans narrowed on the server by row ranges, ``columns`` and ``KeyOnlyFilter``, and, for
  tag filters, a ``RowFilter`` regexp (``with_row_regex``, ``tsd.storage.hbase.scan_filters``):
  the filter language decodes keys as UTF-8 text, so that regexp only narrows (it is built to
  keep every row it should, ``app.tsdb.read.key_regex``) and the reader still tests each row;
* ``scan_many`` reads several row ranges (salt buckets) concurrently, one connection each.

Atomic operations map to Thrift1 calls exactly as OpenTSDB uses them through asynchbase:
``counter_inc`` is ``atomicIncrement`` (an 8-byte big-endian long), ``check_and_put`` is
``checkAndPut`` (no expected value = the cell must be absent), ``append`` is ``append``
(HBase's Append, OpenTSDB's append mode).
"""

from __future__ import annotations

import copy
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

import happybase
from Hbase_thrift import (  # the thriftpy2 module that `import happybase` registers
    AlreadyExists,
    BatchMutation,
    ColumnDescriptor,
    Hbase,
    Mutation,
    TAppend,
    TRowResult,
    TScan,
)
from thriftpy2.thrift import TException

from app.config import Config
from app.errors import StorageError, StorageUnavailableError, TablesMissingError
from app.storage import hbase_errors
from app.storage.base import Row, prefix_stop
from app.storage.hbase_halves import Middles, RangeScan
from app.storage.hbase_native import filters as native_filters
from app.storage.hbase_native.calls import NativeScannerCalls
from app.storage.hbase_native.client import NativeClient
from app.storage.hbase_native.multi import MultiWriter, Unreached
from app.storage.hbase_native.scan_rpc import WRITES, AutoScannerCalls, RpcChoice
from app.storage.hbase_reply import ReplyRow, scanner_get_list
from app.storage.hbase_scan import (
    Scanner,
    ScannerCalls,
    row_cells,
    row_cells_stamped,
    row_stamp,
    row_stamp_sized,
)
from app.storage.hbase_thrift import mutate_rows, mutate_rows_args
from app.storage.hbase_write import WriteBatcher

log = logging.getLogger(__name__)

T = TypeVar("T")
MUTATE_ROWS_RESULT = Hbase.mutateRows_result  # read by hbase_thrift.mutate_rows
SCANNER_GET_LIST_RESULT = Hbase.scannerGetList_result  # read by hbase_reply
Client = Any  # thriftpy2's generated Hbase client: untyped
Range = tuple[bytes | None, bytes | None]

# Renew a pooled connection idle longer than this: HBase's Thrift server closes sockets idle
# for hbase.thrift.server.socket.read.timeout (60 s by default), and a write sent on such a
# socket fails in a way that cannot safely be retried.
IDLE_RENEW_S = 30.0
ROWS_PER_GET = 500  # row keys per getRowsWithColumns call
CELLS_PER_PUT = 20_000  # cells per mutateRows call: large batches, bounded request size
MAX_ROWS_PER_SCAN_CALL = 1000  # caps batch_size: more gained nothing (bench_hbase.py)
# A row of this many cells or more is not compacted: dearer to stamp than to read whole.
STAMP_DEARER_CELLS = 8
# HBase's own family defaults (what `create` in the HBase shell gives), which differ from the
# Thrift1 ColumnDescriptor's defaults (3 versions, no bloom filter, block cache off).
FAMILY_DEFAULTS: dict[str, object] = {
    "maxVersions": 1, "compression": "NONE", "bloomFilterType": "ROW", "blockCacheEnabled": True,
    "inMemory": False, "timeToLive": 2**31 - 1,
}
FAMILY_OPTION_NAMES = {
    "max_versions": "maxVersions", "compression": "compression", "in_memory": "inMemory",
    "bloom_filter_type": "bloomFilterType", "block_cache_enabled": "blockCacheEnabled",
    "time_to_live": "timeToLive",
}


class _ConnectionPool(happybase.ConnectionPool):
    """happybase's pool, plus closing the idle connections (happybase has no close)."""

    def close(self) -> None:
        while True:
            try:
                connection = self._queue.get_nowait()
            except queue.Empty:
                return
            connection.close()


class HBaseStore:
    """A :class:`~app.storage.base.Store` on an HBase Thrift1 server."""

    sets_itself_up = False  # OpenTSDB's rule: the tables must exist (`pytsd create-tables`)
    writes_promptly = False  # a write is a network round trip: never on the server's loop

    def __init__(self, host: str, port: int, table_prefix: str = "", timeout_ms: int = 10_000,
                 pool_size: int = 4, writers: int = 4, write_linger_ms: float = 1.0,
                 scan_filters: bool = True, native: NativeClient | None = None,
                 native_tables: frozenset[str] = frozenset(), write_rpc: str = "thrift",
                 scan_rpc: str = "native", probe_every_s: float = 300.0) -> None:
        self.host = host
        self.table_prefix = table_prefix
        # HBase's native RPC for the scans of these tables, when ``scan_rpc`` says so
        # (``tsd.storage.hbase.scan_rpc``: ``hbase_native.scan_rpc`` decides).
        self.native = native
        self.native_tables = native_tables
        self.scan_rpc = RpcChoice(scan_rpc if native is not None else "thrift", native,
                                [self.full_name(name) for name in sorted(native_tables)],
                                probe_every_s)
        # ... and for every put and append (``tsd.storage.hbase.write_rpc``), decided the same
        # way; under ``auto`` a native write that cannot reach HBase goes through Thrift.
        self.write_rpc = RpcChoice(write_rpc if native is not None else "thrift", native,
                                 self.scan_rpc.tables, probe_every_s, use=WRITES)
        self.native_writer = (MultiWriter(native.call, native.regions, native.zk_quorum)
                              if native is not None and self.write_rpc.setting != "thrift"
                              else None)
        # Whether tables offer ``with_row_regex`` (tag filters narrowed on the region servers).
        self.scan_filters = scan_filters
        self.port = port
        self.address = f"{host}:{port}"
        self.timeout_ms = timeout_ms
        # The writers get connections of their own on top of the readers' pool_size, so a
        # burst of writes never leaves a query waiting for a connection (or the reverse).
        self.pool_size = max(pool_size, 1) + max(writers, 0)
        self.batcher: WriteBatcher | None = None
        if writers > 0:
            appends = self.append_cells if self.native_writer is not None else None
            self.batcher = WriteBatcher(self.put_rows, self.append_cell, writers,
                                        write_linger_ms, CELLS_PER_PUT,
                                        wait_s=4 * timeout_ms / 1000 + 1, appends_call=appends,
                                        gateway=self._through_thrift)
        self._lock = threading.Lock()
        self._pool: _ConnectionPool | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._executor_pid = 0
        self._prefetch: ThreadPoolExecutor | None = None
        self._prefetch_pid = 0
        self._pid = 0
        self._known_tables: set[str] = set()
        self.native_fallbacks = 0  # native writes Thrift finished (``write_rpc=auto``), for stats
        self.middles = Middles()  # where long scans of a range split (hbase_halves)

    @classmethod
    def from_config(cls, config: Config) -> HBaseStore:
        """From ``tsd.storage=hbase://host:port`` and the ``tsd.storage.hbase.*`` settings."""
        url = config["tsd.storage"]
        address = url[len("hbase://"):].strip("/")
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise StorageError(f"Invalid tsd.storage URL: {url}", "Use hbase://host:port")
        scan_rpc = config["tsd.storage.hbase.scan_rpc"]
        native = None
        write_rpc = config["tsd.storage.hbase.write_rpc"]
        if scan_rpc != "thrift" or write_rpc != "thrift":  # no socket yet: `auto` probes later
            native = NativeClient(config["tsd.storage.hbase.zk_quorum"],
                                  config["tsd.storage.hbase.zk_basedir"],
                                  config["tsd.storage.hbase.timeout_ms"] / 1000)
        return cls(host, int(port), config["tsd.storage.hbase.table_prefix"],
                   config["tsd.storage.hbase.timeout_ms"], config["tsd.storage.hbase.pool_size"],
                   config["tsd.storage.hbase.writers"], config["tsd.storage.hbase.write_linger_ms"],
                   config["tsd.storage.hbase.scan_filters"], native,
                   frozenset({config["tsd.storage.hbase.data_table"]}), write_rpc, scan_rpc,
                   config["tsd.storage.hbase.scan_rpc_probe_s"])

    # ------------------------------------------------------------ connections

    def _connection_pool(self) -> _ConnectionPool:
        if self._pool is None or self._pid != os.getpid():
            with self._lock:
                if self._pool is None or self._pid != os.getpid():
                    # The pool opens its first connection at once: a down server fails here.
                    self._pool = _ConnectionPool(
                        self.pool_size, host=self.host, port=self.port, timeout=self.timeout_ms)
                    self._pid = os.getpid()
        return self._pool

    @contextmanager
    def _connection(self) -> Iterator[happybase.Connection]:
        pool = self._connection_pool()
        with pool.connection(timeout=self.timeout_ms / 1000) as conn:
            last_used = getattr(conn, "pytsd_last_used", None)
            if last_used is not None and time.monotonic() - last_used > IDLE_RENEW_S:
                conn.close()
                conn.open()
            try:
                yield conn
            except (TException, OSError):
                conn.close()  # happybase then replaces the client, but leaks the old socket
                raise
            except BaseException:
                # Cut short by anything else (KeyboardInterrupt, a thread's forced end, a
                # bug): the reply may be unread on the socket or half read into the
                # transport's buffer, and happybase would hand the connection on as it is:
                # the next call would read this reply as its own. A new socket and transport,
                # as happybase makes for Thrift errors.
                conn.close()
                conn._refresh_thrift_client()
                raise
            conn.pytsd_last_used = time.monotonic()

    def call(self, op: str, fn: Callable[[Client], T], retry: bool = False) -> T:
        """Run ``fn(client)`` on a pooled connection; map failures to storage errors.

        :param op: what is being done, for error messages ("scan tsdb").
        :param retry: the call is safe to repeat: retry it once on a broken connection.
        """
        return self.call_on_connection(op, lambda connection: fn(connection.client), retry)

    def call_on_connection(self, op: str, fn: Callable[[happybase.Connection], T],
                           retry: bool = False) -> T:
        """:meth:`call` with the whole happybase connection (its transport, for calls whose
        arguments are already encoded: ``hbase_thrift``)."""
        attempts = 2 if retry else 1
        for attempt in range(1, attempts + 1):
            try:
                with self._connection() as connection:
                    return fn(connection)
            except happybase.NoConnectionsAvailable as exc:
                raise StorageUnavailableError(
                    f"HBase is busy: no free Thrift connection within {self.timeout_ms} ms ({op})",
                    f"all {self.pool_size} connections of tsd.storage.hbase.pool_size are in use"
                ) from exc
            except (TException, OSError) as exc:
                if not hbase_errors.is_transport_error(exc):
                    raise hbase_errors.hbase_error(self.address, op, exc) from exc
                if attempt == attempts or hbase_errors.is_timeout(exc):
                    log.warning("HBase %s failed: %s", op, hbase_errors.first_line(exc))
                    raise hbase_errors.unavailable(self.address, op, exc) from exc
                log.info("retrying HBase %s after a broken connection: %s", op,
                         hbase_errors.first_line(exc))
        raise AssertionError("unreachable")

    # ------------------------------------------------------------ writes

    def _through_thrift(self) -> bool:
        """Whether writes go through the Thrift gateway now (the batcher's lingers and
        spreads a batch over several calls for it, ``hbase_write``)."""
        return self.write_rpc.on_native is not True

    def _native_writer(self) -> MultiWriter | None:
        """The native writer for this write, or None: through Thrift (``write_rpc``)."""
        return self.native_writer if self.write_rpc.client() is not None else None

    def _native_first(self, write: Callable[[MultiWriter], None], items: list[T]
                      ) -> list[T] | None:
        """``write`` of ``items`` natively where ``write_rpc`` says so: None when it wrote
        them all; else what Thrift is to write: ``items`` (not native now), or those a native
        write that could not reach HBase left (``Unreached.rows``; under ``auto`` only, and
        the process then stays on Thrift until a probe works; otherwise the error, a 503)."""
        native = self._native_writer()
        if native is None:
            return items
        try:
            write(native)
            return None
        except Unreached as exc:
            if self.write_rpc.setting != "auto":
                raise
            self.write_rpc.unreachable(exc.details or str(exc))
            self.native_fallbacks += 1
            return exc.rows

    def put_rows(self, table: bytes, rows: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        """One ``mutateRows`` call (the batcher's, or a direct write without it); natively,
        a ``Multi`` call per region server."""
        left = self._native_first(lambda native: native.put(table, rows), rows)
        if left is None:
            return
        args = mutate_rows_args(table, left)  # no Thrift object per row or cell
        # Puts are idempotent: repeating one after a broken connection, or any row a native
        # write may not have written, is safe.
        self.call_on_connection(
            f"write to {table.decode()}",
            lambda connection: mutate_rows(connection.transport, args, MUTATE_ROWS_RESULT),
            retry=True)

    def append_cell(self, table: bytes, row: bytes, column: bytes, value: bytes) -> None:
        """One ``append`` call: never repeated (a second one would append twice)."""
        self.append_cells(table, [(row, column, value)])

    def append_cells(self, table: bytes, cells: list[tuple[bytes, bytes, bytes]]) -> None:
        """Each ``(row, column, value)`` appended (one per row and column): natively, a
        ``Multi`` call per region server; through Thrift, an ``append`` call each, the calls
        concurrent. None is ever repeated once it may have reached HBase (a second one would
        append twice): only the appends a native write never sent go through Thrift."""
        left = self._native_first(lambda native: native.append(table, cells), cells)
        if left is None:
            return
        if len(left) == 1:
            self._thrift_append(table, *left[0])
            return
        for done in [self.executor().submit(self._thrift_append, table, *cell) for cell in left]:
            done.result()

    def _thrift_append(self, table: bytes, row: bytes, column: bytes, value: bytes) -> None:
        append = TAppend(table=table, row=row, columns=[column], values=[value])
        self.call(f"append to {table.decode()}", lambda c: c.append(append))

    def executor(self) -> ThreadPoolExecutor:
        """Threads for concurrent scans: one per pooled connection, per process (threads do
        not survive a fork)."""
        with self._lock:
            if self._executor is None or self._executor_pid != os.getpid():
                self._executor = ThreadPoolExecutor(self.pool_size,
                                                    thread_name_prefix="pytsd-hbase-scan")
                self._executor_pid = os.getpid()
            return self._executor

    def prefetcher(self) -> ThreadPoolExecutor:
        """Threads that fetch a scan's next batch while its reader works through the last
        (``hbase_scan.Scanner``); apart from :meth:`executor`, whose scans wait on them."""
        with self._lock:
            if self._prefetch is None or self._prefetch_pid != os.getpid():
                self._prefetch = ThreadPoolExecutor(self.pool_size,
                                                    thread_name_prefix="pytsd-hbase-fetch")
                self._prefetch_pid = os.getpid()
            return self._prefetch

    # ------------------------------------------------------------ tables

    def full_name(self, name: str) -> bytes:
        """The HBase table name: the configured prefix (or ``namespace:``) + ``name``."""
        return (self.table_prefix + name).encode("utf-8")

    def table(self, name: str) -> HBaseTable:
        if name not in self._known_tables:
            if name not in self.table_names():
                raise TablesMissingError(f"{self.table_prefix}{name}")
        return FilteringHBaseTable(self, name) if self.scan_filters else HBaseTable(self, name)

    def table_names(self) -> list[str]:
        """This store's tables (those starting with the prefix), without the prefix."""
        raw = self.call("list tables", lambda c: c.getTableNames(), retry=True)
        prefix = self.table_prefix.encode("utf-8")
        names = sorted(n[len(prefix):].decode("utf-8") for n in raw if n.startswith(prefix))
        self._known_tables = set(names)
        return names

    def create_table(self, name: str, families: Mapping[str, Mapping[str, object]]) -> bool:
        descriptors = [_column_descriptor(family, options) for family, options in families.items()]
        full = self.full_name(name)
        if name in self.table_names():
            return False
        try:
            self.call(f"create table {full.decode()}",
                      lambda c: c.createTable(full, descriptors))
        except StorageError as exc:
            if isinstance(exc.__cause__, AlreadyExists):
                self._known_tables.add(name)
                return False
            raise
        self._known_tables.add(name)
        return True

    def drop_tables(self) -> list[str]:
        """Disable and delete every table of this store's prefix (tests, never the CLI)."""
        if not self.table_prefix:
            raise StorageError("Refusing to drop tables without a tsd.storage.hbase.table_prefix")
        dropped = []
        for name in self.table_names():
            self._drop(self.full_name(name))
            dropped.append(name)
        self._known_tables.clear()
        return dropped

    def _drop(self, full: bytes) -> None:
        self.call(f"disable table {full.decode()}", lambda c: c.disableTable(full))
        self.call(f"delete table {full.decode()}", lambda c: c.deleteTable(full))

    def clear_tables(self) -> None:
        """Delete every row of this store's tables, keeping the tables (tests: creating and
        dropping OpenTSDB's four tables costs seconds, clearing a small one milliseconds)."""
        if not self.table_prefix:
            raise StorageError("Refusing to clear tables without a tsd.storage.hbase.table_prefix")
        for name in self.table_names():
            HBaseTable(self, name).clear()
        # A delete marker hides every cell written up to its millisecond: let the clock move
        # past it so the next write is not hidden by it.
        time.sleep(0.002)

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()  # its queued writes first: they hold pooled connections
        with self._lock:
            if self._executor is not None and self._executor_pid == os.getpid():
                self._executor.shutdown(wait=True)
            if self._prefetch is not None and self._prefetch_pid == os.getpid():
                self._prefetch.shutdown(wait=True)
            # Never in a forked child: closing shuts the socket down for the parent too.
            if self._pool is not None and self._pid == os.getpid():
                self._pool.close()
            self._pool, self._executor, self._prefetch = None, None, None
        if self.native_writer is not None:
            self.native_writer.close()
        if self.native is not None:
            self.native.close()


class HBaseTable:
    """One HBase table, as the storage interface sees it."""

    # The optional abilities of ``app.storage.base`` this backend offers (and
    # ``with_row_regex``, FilteringHBaseTable, while ``tsd.storage.hbase.scan_filters`` is on).
    abilities = frozenset({"scan_stamps", "scan_stamped", "scan_stamps_sized", "scan_many",
                           "scan_packed", "scan_stamps_packed", "append_many", "store_stats",
                           "stamp_dearer_than_values"})

    def __init__(self, store: HBaseStore, name: str) -> None:
        self.store = store
        self.name = name
        self.full_name = store.full_name(name)
        # ANDed to every scan's filter: what ``with_row_regex`` sets.
        self.row_filter: bytes | None = None
        # The store's choice of RPC for this table's scans (None: Thrift always).
        self.scan_rpc = store.scan_rpc if name in store.native_tables else None

    def _call(self, op: str, fn: Callable[[Client], T], retry: bool = False) -> T:
        return self.store.call(f"{op} {self.name}", fn, retry)

    def _scanner(self, start: bytes, stop: bytes | None, columns: list[bytes], max_rows: int,
                 filter_string: bytes | None, shape: Callable[[ReplyRow], Any] = row_cells
                 ) -> RangeScan:
        """A scan of ``[start, stop)``, in two halves at once when the last took long."""
        if self.row_filter is not None:
            filter_string = (self.row_filter if filter_string is None
                             else filter_string + b" AND " + self.row_filter)
        calls, prefetch = self._scanner_calls(filter_string), self.store.prefetcher()

        def open_scanner(first: bytes, last: bytes | None) -> Scanner:
            return Scanner(calls, first, last, columns, max_rows, filter_string, shape,
                           prefetch)
        key = (self.full_name, start, stop, filter_string, tuple(columns))
        return RangeScan(self.store.middles, key, open_scanner, shape)

    def _scanner_calls(self, filter_string: bytes | None) -> ScannerCalls:
        """Thrift's scanner calls, or the native client's when ``scan_rpc`` has this scan
        go native and the client expresses the filter (``hbase_native.filters``; any other
        stays on Thrift); under ``auto``, native ones that finish on Thrift if need be."""
        native = self.scan_rpc.client() if self.scan_rpc is not None else None
        if native is None:
            return self
        try:
            native_filter = native_filters.from_filter_string(filter_string)
        except native_filters.Unsupported:
            return self
        calls = NativeScannerCalls(native, self.name, self.full_name, native_filter)
        if self.scan_rpc is not None and self.scan_rpc.setting == "auto":
            return AutoScannerCalls(calls, self, self.scan_rpc)
        return calls

    def store_stats(self) -> list[tuple[str, float | int, dict[str, str]]]:
        """This process's RPC for data scans and writes (``hbase_native.scan_rpc``), and
        the native writes that fell back to Thrift, for /api/stats."""
        return [*self.store.scan_rpc.stat_lines(), *self.store.write_rpc.stat_lines(),
                ("tsd.storage.hbase.native_write_fallbacks", self.store.native_fallbacks,
                 {"setting": self.store.write_rpc.setting})]

    def row(self, row: bytes, columns: Sequence[bytes] | None = None) -> Row:
        found = self._call("get row of", lambda c: c.getRowWithColumns(
            self.full_name, row, list(columns or ()), {}), retry=True)
        return _cells(found[0].columns) if found else {}

    def row_write_times(self, row: bytes) -> dict[bytes, int]:
        found = self._call("get row of", lambda c: c.getRow(self.full_name, row, {}), retry=True)
        if not found:
            return {}
        return {column: cell.timestamp for column, cell in sorted(found[0].columns.items())}

    def rows(self, rows: Sequence[bytes],
             columns: Sequence[bytes] | None = None) -> list[tuple[bytes, Row]]:
        found: dict[bytes, Row] = {}
        for start in range(0, len(rows), ROWS_PER_GET):
            found.update(self._get_rows(list(rows[start:start + ROWS_PER_GET]), columns))
        return [(key, found[key]) for key in rows if found.get(key)]

    def _get_rows(self, keys: list[bytes],
                  columns: Sequence[bytes] | None) -> Iterator[tuple[bytes, Row]]:
        results = self._call("get rows of", lambda c: c.getRowsWithColumns(
            self.full_name, keys, list(columns or ()), {}), retry=True)
        return ((result.row, _cells(result.columns)) for result in results)

    def scan(self, row_start: bytes | None = None, row_stop: bytes | None = None,
             row_prefix: bytes | None = None, columns: Sequence[bytes] | None = None,
             limit: int | None = None, batch_size: int = 1000,
             keys_only: bool = False) -> Iterator[tuple[bytes, Row]]:
        if row_prefix is not None:
            row_start, row_stop = row_prefix, prefix_stop(row_prefix)
        max_rows = max(1, min(batch_size, MAX_ROWS_PER_SCAN_CALL))
        scanner = self._scanner(row_start or b"", row_stop, list(columns or ()), max_rows,
                           b"KeyOnlyFilter()" if keys_only else None)
        return scanner.rows(limit)

    def scan_stamps(self, row_start: bytes, row_stop: bytes | None, family: str,
                    limit: int | None = None) -> Iterator[tuple[bytes, int, int]]:
        """``(row, cells, newest write time in ms)`` of each row of ``family`` in the range
        (the first ``limit`` rows: no more asked of the region servers), values left on the
        region servers (KeyOnlyFilter keeps the cell timestamps)."""
        scanner = self._scanner(row_start, row_stop, [family.encode()], MAX_ROWS_PER_SCAN_CALL,
                          b"KeyOnlyFilter()", shape=row_stamp)
        rows: Iterator[tuple[bytes, int, int]] = scanner.rows(limit)
        return rows

    @staticmethod
    def stamp_dearer_than_values(cells: int) -> bool:
        """A row not compacted yet (a cell per point): its stamp, a ``KeyOnlyFilter`` scan,
        costs the region server a filter call per cell, ~2.5x the CPU of a plain scan of the
        row (60,000 single cells: 15-19 ms against 6), and saves no bytes (a single cell's
        value is 1-8 bytes, a sized stamp's stand-in 4)."""
        return cells >= STAMP_DEARER_CELLS

    def scan_stamped(self, row_start: bytes, row_stop: bytes | None,
                     family: str) -> Iterator[tuple[bytes, Row, int, int, int]]:
        """Rows of ``family`` with the stamp and stored bytes of the very cells returned."""
        scanner = self._scanner(row_start, row_stop, [family.encode()], MAX_ROWS_PER_SCAN_CALL,
                          None, shape=row_cells_stamped)
        rows: Iterator[tuple[bytes, Row, int, int, int]] = scanner.rows()
        return rows

    def scan_stamps_sized(self, row_start: bytes, row_stop: bytes | None,
                          family: str) -> Iterator[tuple[bytes, int, int, int]]:
        """:meth:`scan_stamps` and each row's stored bytes; ``KeyOnlyFilter(true)`` sends
        each value's length instead of the value."""
        scanner = self._scanner(row_start, row_stop, [family.encode()], MAX_ROWS_PER_SCAN_CALL,
                          b"KeyOnlyFilter(true)", shape=row_stamp_sized)
        rows: Iterator[tuple[bytes, int, int, int]] = scanner.rows()
        return rows

    def open_scanner(self, start: bytes, stop: bytes | None, columns: list[bytes],
                     caching: int, filter_string: bytes | None) -> int:
        """Thrift1 ``scannerOpenWithScan``: each row's cells as a map (``hbase_scan`` sorts
        them into HBase's order)."""
        scan = TScan(startRow=start, stopRow=stop, columns=columns or None, caching=caching,
                     filterString=filter_string, sortColumns=False)
        return int(self._call("scan", lambda c: c.scannerOpenWithScan(
            self.full_name, scan, {}), retry=True))

    def scanner_rows(self, scanner_id: int, count: int) -> list[ReplyRow]:
        """Thrift1 ``scannerGetList``, its reply read as bytes (``hbase_reply``: no Python
        object per cell); never repeated (it moves the scanner on)."""
        return self.store.call_on_connection(
            f"scan {self.name}", lambda connection: scanner_get_list(
                connection.transport, scanner_id, count, SCANNER_GET_LIST_RESULT, TRowResult))

    def close_scanner(self, scanner_id: int) -> None:
        self._call("close a scanner of", lambda c: c.scannerClose(scanner_id))

    def scan_many(self, ranges: Sequence[Range],
                  columns: Sequence[bytes] | None = None) -> Iterator[tuple[bytes, Row]]:
        """The rows of each ``[start, stop)`` range in turn, fetched concurrently."""
        if len(ranges) < 2:
            for start, stop in ranges:
                yield from self.scan(row_start=start, row_stop=stop, columns=columns)
            return
        executor = self.store.executor()
        futures: list[Future[list[tuple[bytes, Row]]]] = [
            executor.submit(self._scan_list, start, stop, columns) for start, stop in ranges]
        try:
            for future in futures:
                yield from future.result()
        finally:
            for future in futures:
                future.cancel()

    def _scan_list(self, start: bytes | None, stop: bytes | None,
                   columns: Sequence[bytes] | None) -> list[tuple[bytes, Row]]:
        return list(self.scan(row_start=start, row_stop=stop, columns=columns))

    def put(self, row: bytes, data: Mapping[bytes, bytes]) -> None:
        self.put_many([(row, data)])

    def put_many(self, puts: Iterable[tuple[bytes, Mapping[bytes, bytes]]]) -> None:
        """Store the cells; returns once HBase has them. Through the store's write batcher
        (merged with other threads' writes, ``hbase_write``) unless it is off."""
        batcher = self.store.batcher
        if batcher is not None:
            batcher.put(self.full_name, puts)
            return
        batch: list[tuple[bytes, dict[bytes, bytes]]] = []
        cells = 0
        for row, data in puts:
            batch.append((row, dict(data)))
            cells += len(data)
            if cells >= CELLS_PER_PUT:
                self.store.put_rows(self.full_name, batch)
                batch, cells = [], 0
        if batch:
            self.store.put_rows(self.full_name, batch)

    def _mutate(self, batch: list[Any]) -> None:
        # Puts and deletes are idempotent: repeating one after a broken connection is safe.
        self._call("write to", lambda c: c.mutateRows(self.full_name, batch, {}), retry=True)

    def append(self, row: bytes, column: bytes, value: bytes) -> None:
        self.append_many([(row, column, value)])

    def append_many(self, cells: Sequence[tuple[bytes, bytes, bytes]]) -> None:
        """Append each ``(row, column, value)``, in order within a row and column: one
        ``append`` call per row and column, the rows' calls concurrent (``hbase_write``)."""
        batcher = self.store.batcher
        if batcher is not None:
            batcher.append(self.full_name, cells)
            return
        for row, column, value in cells:
            self.store.append_cell(self.full_name, row, column, value)

    def delete(self, row: bytes, columns: Sequence[bytes] | None = None,
               up_to_ms: int | None = None) -> None:
        if columns is not None and up_to_ms is not None:
            # A delete marker at up_to_ms hides only the versions written at or before it.
            mutations = [Mutation(isDelete=True, column=column) for column in columns]
            batch = [BatchMutation(row=row, mutations=mutations)]
            self._call("write to", lambda c: c.mutateRowsTs(self.full_name, batch, up_to_ms, {}),
                       retry=True)
            return
        if columns is None:
            self._call("delete from", lambda c: c.deleteAllRow(self.full_name, row, {}),
                       retry=True)
            return
        mutations = [Mutation(isDelete=True, column=column) for column in columns]
        self._mutate([BatchMutation(row=row, mutations=mutations)])

    def counter_inc(self, row: bytes, column: bytes, value: int = 1) -> int:
        return int(self._call("increment a counter in", lambda c: c.atomicIncrement(
            self.full_name, row, column, value)))

    def check_and_put(self, row: bytes, column: bytes, expected: bytes | None,
                      value: bytes) -> bool:
        mutation = Mutation(column=column, value=value)
        return bool(self._call("check and put in", lambda c: c.checkAndPut(
            self.full_name, row, column, expected, mutation, {})))

    def clear(self) -> None:
        """Delete every row (whole families, so no qualifier is missed)."""
        descriptors = self._call("describe", lambda c: c.getColumnDescriptors(self.full_name),
                                 retry=True)
        families = [name.rstrip(b":") for name in descriptors]
        keys = [key for key, _ in self._scanner(b"", None, [], MAX_ROWS_PER_SCAN_CALL,
                                           b"FirstKeyOnlyFilter() AND KeyOnlyFilter()").rows()]
        for start in range(0, len(keys), MAX_ROWS_PER_SCAN_CALL):
            self._mutate([BatchMutation(row=key, mutations=[
                Mutation(isDelete=True, column=family) for family in families])
                for key in keys[start:start + MAX_ROWS_PER_SCAN_CALL]])

    def scan_packed(self, row_start: bytes, row_stop: bytes | None, family: str,
                    qualifier_prefixes: Sequence[bytes]
                    ) -> Iterator[tuple[bytes, int, int, bytes, bytes]]:
        """``(row, cells, newest write time in ms, qualifiers joined, values joined)`` of
        each row of the range, over its cells of ``family`` whose qualifier starts with one of
        ``qualifier_prefixes`` (a ``MultipleColumnPrefixFilter``: the other cells stay on the
        region servers); as the embedded store's method of the same name."""
        scanner = self._scanner(row_start, row_stop, [family.encode()], MAX_ROWS_PER_SCAN_CALL,
                          _prefix_filter(qualifier_prefixes), shape=_packed_row)
        rows: Iterator[tuple[bytes, int, int, bytes, bytes]] = scanner.rows()
        return rows

    def scan_stamps_packed(self, row_start: bytes, row_stop: bytes | None, family: str,
                           qualifier_prefixes: Sequence[bytes]
                           ) -> Iterator[tuple[bytes, int, int]]:
        """:meth:`scan_stamps` over the cells :meth:`scan_packed` reads."""
        scanner = self._scanner(row_start, row_stop, [family.encode()], MAX_ROWS_PER_SCAN_CALL,
                          b"KeyOnlyFilter() AND " + _prefix_filter(qualifier_prefixes),
                          shape=row_stamp)
        rows: Iterator[tuple[bytes, int, int]] = scanner.rows()
        return rows


class FilteringHBaseTable(HBaseTable):
    """An HBase table whose scans can be narrowed by a row-key regexp (``scan_filters`` on)."""

    abilities = HBaseTable.abilities | {"with_row_regex"}

    def with_row_regex(self, regex: str) -> HBaseTable:
        """This table, its scans keeping only the rows whose key matches ``regex`` on the
        region servers (``RowFilter(=, 'regexstring:...')``, base.RowRegex)."""
        filtered = copy.copy(self)
        filtered.row_filter = row_regex_filter(regex)
        return filtered


def _cells(columns: Mapping[bytes, Any] | None) -> Row:
    """``{column: TCell}`` -> ``{column: value}`` in HBase's column order (the gateway's map
    is sorted by signed bytes, HBase's order is unsigned)."""
    return {column: cell.value for column, cell in sorted((columns or {}).items())}


def _column_descriptor(family: str, options: Mapping[str, object]) -> Any:
    fields = dict(FAMILY_DEFAULTS)
    for option, value in options.items():
        if option not in FAMILY_OPTION_NAMES:
            raise StorageError(f"Unknown column family option for HBase: {option}")
        fields[FAMILY_OPTION_NAMES[option]] = value
    return ColumnDescriptor(name=family.encode("utf-8") + b":", **fields)


def row_regex_filter(regex: str) -> bytes:
    """HBase's filter language for the rows whose key matches ``regex``: the comparator
    decodes the quoted bytes as UTF-8, a single quote is doubled."""
    return b"RowFilter(=, " + _quoted(b"regexstring:" + regex.encode("utf-8")) + b")"


def _quoted(value: bytes) -> bytes:
    return b"'" + value.replace(b"'", b"''") + b"'"


def _prefix_filter(prefixes: Sequence[bytes]) -> bytes:
    """HBase's filter language: quoted byte strings, a quote doubled."""
    return b"MultipleColumnPrefixFilter(" + b", ".join(map(_quoted, prefixes)) + b")"


def _packed_row(result: ReplyRow) -> tuple[bytes, int, int, bytes, bytes]:
    """A scanned row as ``(row, cells, newest, qualifiers joined, values joined)``."""
    family_end = result.columns.index(b":") + 1 if result.count else 0
    return (result.row, result.count, result.newest_ms, result.qualifiers(family_end),
            result.values)
