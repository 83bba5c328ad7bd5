"""The embedded backend: HBase's data model on one SQLite file.

Every cell is one SQL row ``(tbl, row, family, qualifier, value, ts)`` in a clustered
``WITHOUT ROWID`` table, so rows come back in HBase's byte order and the bytes are exactly
what OpenTSDB writes to HBase. WAL mode lets several gunicorn workers read while one writes;
``synchronous=FULL`` makes every acknowledged write durable.

Writes: every write transaction of a process runs on one connection (whose page cache stays
warm between transactions) under :class:`WriteLock`, a lock across threads and processes
that wakes a waiter as soon as it is free (SQLite's own busy handler sleeps 1 to 100 ms
between tries, which under concurrent ingest costs more than the writes). ``put_many`` appends
its cells to a staging log that is merged into ``cells`` in bulk, and before any read or other
write of the table (``sqlite_write``): every read method starts with ``self._settle()``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.config import SETTINGS
from app.errors import StorageError
from app.storage import hour_values, sqlite_columns, sqlite_hours
from app.storage.base import (
    CellBlock,
    ColumnsPut,
    ColumnsRead,
    FdReaders,
    HourPut,
    Row,
    StoreSpace,
    WriteBusy,
    prefix_stop,
)
from app.storage.hour_blob import BlobRows
from app.storage.sqlite_block import fits
from app.storage.sqlite_merge import mark_cells, split_qualified
from app.storage.sqlite_pack import (
    Unpacked,
    pack_qualifier,
    unpack,
    unpack_many,
    unpack_qualifier,
    unpack_qualifiers,
    unpacked_length,
)
from app.storage.sqlite_space import (
    add_packed_flag,
    count_points,
    release_free_pages,
    store_space,
)
from app.storage.sqlite_sync import WalSync
from app.storage.sqlite_write import (
    COLUMNS,
    STAGING_SCHEMA,
    GroupCommit,
    WriteLock,
    add_block_index,
    has_block_index,
    has_cell_staging,
    has_staged,
    has_table_index,
    merge_staged,
    retire_cell_staging,
    retire_table_index,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS hbase_tables (name TEXT PRIMARY KEY, families TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cells (
    tbl TEXT NOT NULL, row BLOB NOT NULL, family TEXT NOT NULL, qualifier BLOB NOT NULL,
    value BLOB NOT NULL, ts INTEGER NOT NULL, z INTEGER,
    PRIMARY KEY (tbl, row, family, qualifier)
) WITHOUT ROWID;
-- The hour cache reads each row's stamp (cells, newest write time) from here, not from the
-- cells: their values overflow into other pages, which a read of ts would walk.
CREATE INDEX IF NOT EXISTS cells_stamp ON cells (tbl, row, family, ts);
""" + STAGING_SCHEMA + sqlite_columns.SCHEMA + sqlite_hours.SCHEMA
BUSY_TIMEOUT_S = 30.0
KEYS_PER_STATEMENT = 500  # row keys fetched by one statement of ``rows``
WRITER_CACHE_KIB = 32 * 1024  # the writing connection's page cache: the B-tree pages it dirties
PAGE_SIZE_BYTES = 16384  # of a new store (an existing one keeps its own): docs/performance.md
# The WAL file is cut back to this size after a checkpoint empties it (it keeps its largest
# size otherwise, however little is in it).
WAL_LIMIT_BYTES = 64 * 1024 * 1024
# A cell as stored may be packed (sqlite_pack.py): ``z & 1``, its value; ``z & 2``, its
# qualifier kept as a short key. What every read selects instead of the bare columns:
# ``z & 4``: the value is in the hour's blob (``hour_values``, ``sqlite_hours``), whose key is the
# row's first ``z >> PREFIX_SHIFT`` bytes.
VALUE = ("CASE WHEN z & 4 THEN tsd_hour_value((SELECT data FROM hour_columns AS h"
         " WHERE h.tbl = cells.tbl AND h.hour = substr(cells.row, 1,"
         f" cells.z >> {hour_values.PREFIX_SHIFT})),"
         " cells.row, cells.qualifier, cells.z, cells.value)"
         " WHEN z & 1 THEN tsd_unpack(value) ELSE value END")
VALUE_LENGTH = "CASE WHEN z & 1 THEN tsd_unpacked_length(value) ELSE length(value) END"
QUALIFIER = "CASE WHEN z & 2 THEN tsd_unpack_qualifier(qualifier) ELSE qualifier END"
# What the scans select instead: the cells as stored, unpacked a batch at a time
# (:func:`_unpacked`), where a call of the SQL functions per cell cost ~3x the open hour's read.
STORED = "z, qualifier, value"
# Of the values and short keys lately unpacked, kept by each store of a process: ~20 bytes a
# point of the open hour (10,000 series of 10 s points: ~8 MiB each).
UNPACKED_MAX_BYTES = 16 * 1024 * 1024

# Whether compacted columns are packed at rest: decided once, by the setting's default (a
# store built directly, as tests and tools do, packs as a configured server does).
PACK_CELLS_DEFAULT: bool = SETTINGS["tsd.storage.sqlite.pack_cells"].default

Column = tuple[str, bytes]


def split_column(column: bytes) -> tuple[str, bytes | None]:
    """``b"t:\\x00\\x00"`` -> ``("t", b"\\x00\\x00")``; ``b"t"`` -> ``("t", None)``."""
    family, sep, qualifier = column.partition(b":")
    return family.decode(), (qualifier if sep else None)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _wal_mode(db: sqlite3.Connection) -> None:
    """WAL mode, waited for like any lock: while other processes set up the same new file,
    SQLite answers "database is locked" at once to this pragma, without its busy handler."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class SqliteStore:
    """A :class:`~app.storage.base.Store` on one SQLite file; one connection per thread."""

    # Unlike HBase, where OpenTSDB's tables must be made beforehand, the embedded store
    # creates them on first use (see app/tsdb/schema.py ensure_tables).
    sets_itself_up = True
    writes_promptly = True  # PromptWrites: prompt() and durable()

    def __init__(self, path: str | Path, synchronous: str = "FULL",
                 page_size: int = PAGE_SIZE_BYTES, pack_cells: bool = PACK_CELLS_DEFAULT
                 ) -> None:
        self.path = str(path)
        self.pack_cells = pack_cells  # compacted columns packed at rest (sqlite_pack.py)
        self.synchronous = synchronous
        self.page_size = page_size
        self._local = threading.local()
        self._known_tables: set[str] = set()
        self._columns_on: set[str] = set()  # tables whose row columns are kept (seen so)
        self._group = GroupCommit(self)
        self._write_lock = WriteLock(self.path + ".writelock")
        self._wal_sync = WalSync(self.path + "-wal")
        self._writer: tuple[int, sqlite3.Connection] | None = None
        self.unpacked_values = Unpacked(unpack_many, UNPACKED_MAX_BYTES)
        self.unpacked_keys = Unpacked(unpack_qualifiers, UNPACKED_MAX_BYTES)
        try:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self.connection().executescript(SCHEMA)  # idempotent: racing processes are fine
            add_packed_flag(self.connection(), self.transaction)  # a store an older pytsd wrote
            if has_cell_staging(self.connection()):  # a store an older pytsd wrote
                with self.transaction() as db:
                    retire_cell_staging(db)
            if not has_block_index(self.connection()):  # a store an older pytsd wrote
                with self.transaction() as db:
                    add_block_index(db)
            if has_table_index(self.connection()):  # a store an older pytsd wrote
                with self.transaction() as db:
                    retire_table_index(db)
        except (OSError, sqlite3.Error) as exc:
            raise StorageError(f"Cannot open or create the embedded store {self.path}",
                               f"{exc}. Check that its folder exists or can be created and "
                               "is writable, or set TSD_STORAGE") from exc

    def connection(self) -> sqlite3.Connection:
        # A connection must not cross a fork (gunicorn) or a thread: key it by both.
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None or self._local.pid != os.getpid():
            db = self._connect()
            self._local.db, self._local.pid = db, os.getpid()
        return db

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                             check_same_thread=False)
        db.execute(f"PRAGMA page_size={self.page_size}")  # a new file only, before WAL mode
        # A new file only, too: freed pages can be given back (release_free_pages). An older
        # file keeps auto_vacuum off until `pytsd vacuum` rewrites it once.
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        _wal_mode(db)
        db.execute(f"PRAGMA synchronous={self.synchronous}")
        db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
        db.create_function("tsd_unpack", 1, unpack, deterministic=True)
        db.create_function("tsd_unpacked_length", 1, unpacked_length, deterministic=True)
        db.create_function("tsd_points", 1, count_points, deterministic=True)
        db.create_function("tsd_unpack_qualifier", 1, unpack_qualifier, deterministic=True)
        db.create_function("tsd_hour_value", 5, sqlite_hours.cell_value, deterministic=True)
        db.create_function("tsd_restore", 5, sqlite_hours.restored, deterministic=True)
        return db

    def _write_connection(self) -> sqlite3.Connection:
        """The process's one writing connection (used only under the write lock)."""
        if self._writer is None or self._writer[0] != os.getpid():
            db = self._connect()
            db.execute(f"PRAGMA cache_size=-{WRITER_CACHE_KIB}")
            self._writer = (os.getpid(), db)
        return self._writer[1]

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that takes the write lock up front (no upgrade deadlocks).
        Within :meth:`prompt`, it takes the lock only if free, and commits without the disk
        sync that ``synchronous=FULL`` makes (:meth:`durable` syncs for it)."""
        prompt = self.prompting()
        self._write_lock.acquire(wait=not prompt)
        try:
            db = self._write_connection()
            deferred = prompt and self.synchronous == "FULL"
            if deferred:
                db.execute("PRAGMA synchronous=NORMAL")
            try:
                yield from self._committed(db)
            finally:
                if deferred:
                    db.execute("PRAGMA synchronous=FULL")
            if deferred:
                self._wal_sync.committed()
        finally:
            self._write_lock.release()

    @staticmethod
    def _committed(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StorageError("The embedded store is not writable", str(exc)) from exc
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    @contextmanager
    def prompt(self) -> Iterator[None]:
        """This thread's writes within it are prompt (``PromptWrites``): no wait for another
        writer (:class:`WriteBusy`), no disk sync at commit; :meth:`durable` says when they
        are on disk. For the server's loop, which stores a small put itself."""
        self._local.prompt = True
        try:
            yield
        finally:
            self._local.prompt = False

    def prompting(self) -> bool:
        return getattr(self._local, "prompt", False)

    def merge_first(self, db: sqlite3.Connection, table: str) -> None:
        """In a write transaction, merge ``table``'s staged cells, if any, before what it
        writes (older cells first); a prompt write refuses (:class:`WriteBusy`): a merge is
        long."""
        if has_staged(db, table):
            if self.prompting():
                raise WriteBusy("staged cells to merge first")
            merge_staged(db, table, self.pack_cells)

    def durable(self) -> Future[None]:
        """Done when every prompt write of this process so far is on disk (sqlite_sync.py)."""
        return self._wal_sync.durable()

    def read_syncs_on(self, readers: FdReaders) -> None:
        self._wal_sync.read_on(readers)

    def release_free_pages(self) -> int:
        """Give the file's free pages back to the file system beyond a small reserve (what
        the next writes reuse); the pages released. Called after merges and deletes."""
        return release_free_pages(self.connection(), self._script)

    def _script(self, sql: str) -> None:
        """``sql`` run to its end on the writing connection, in a transaction of its own."""
        with self._write_lock:
            self._write_connection().executescript(sql)

    def space(self, data_table: str) -> StoreSpace:
        """The file's size, its pages in use and the data points of ``data_table``."""
        self.table(data_table)._settle()
        return store_space(self.connection(), self.path, data_table)

    def vacuum(self) -> None:
        """Rewrite the file once with incremental auto-vacuum on (``pytsd vacuum``): the
        only way SQLite turns it on for a file that has tables. Holds the write lock (and
        needs about the file's size free on disk) while it runs."""
        with self._write_lock:
            db = self._write_connection()
            db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            db.execute("VACUUM")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def table(self, name: str) -> SqliteTable:
        if name in self._known_tables:
            return SqliteTable(self, name)
        row = self.connection().execute(
            "SELECT families FROM hbase_tables WHERE name = ?", (name,)).fetchone()
        if row is not None:
            self._known_tables.add(name)  # tables are never dropped while we run
        else:
            raise StorageError(f"Table not found: {name}",
                                "Run `pytsd create-tables` to create OpenTSDB's tables")
        return SqliteTable(self, name)

    def create_table(self, name: str, families: Mapping[str, Mapping[str, object]]) -> bool:
        with self.transaction() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO hbase_tables (name, families) VALUES (?, ?)",
                (name, json.dumps({f: dict(o) for f, o in families.items()})))
            return cursor.rowcount == 1

    def table_names(self) -> list[str]:
        rows = self.connection().execute("SELECT name FROM hbase_tables ORDER BY name")
        return [name for (name,) in rows]

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
        if self._writer is not None and self._writer[0] == os.getpid():
            with self._write_lock:
                self._writer[1].close()
                self._writer = None
        self._wal_sync.close()


class SqliteTable:
    """One HBase table inside a :class:`SqliteStore`."""

    # The optional abilities of ``app.storage.base`` this backend offers.
    abilities = frozenset({"scan_stamps", "scan_stamped", "scan_stamps_sized", "range_stamp",
                           "scan_packed", "space_used", "put_block", "scan_columns",
                           "hour_column"})

    def __init__(self, store: SqliteStore, name: str) -> None:
        self.store = store
        self.name = name

    def _db(self) -> sqlite3.Connection:
        return self.store.connection()

    def _settle(self) -> None:
        """Merge this table's staged cells into ``cells``: the first step of every read."""
        if has_staged(self._db(), self.name):
            with self.store.transaction() as db:  # no change to count: each was counted
                merge_staged(db, self.name, self.store.pack_cells)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction on ``cells`` that first merges the table's staged cells."""
        with self.store.transaction() as db:
            self.store.merge_first(db, self.name)
            mark_cells(db, self.name, now_ms())  # the merge's floor (sqlite_write)
            yield db

    def row(self, row: bytes, columns: Sequence[bytes] | None = None) -> Row:
        self._settle()
        return self._row(row, columns)

    def _row(self, row: bytes, columns: Sequence[bytes] | None) -> Row:
        where, params = _column_clause(columns)
        cursor = self._db().execute(
            f"SELECT family, {QUALIFIER}, {VALUE} FROM cells WHERE tbl = ? AND row = ?" + where,
            (self.name, row, *params))
        return {f.encode() + b":" + q: v for f, q, v in cursor}

    def row_write_times(self, row: bytes) -> dict[bytes, int]:
        self._settle()
        cursor = self._db().execute(
            f"SELECT family, {QUALIFIER}, ts FROM cells WHERE tbl = ? AND row = ?",
            (self.name, row))
        return {f.encode() + b":" + q: ts for f, q, ts in cursor}

    def rows(self, rows: Sequence[bytes],
             columns: Sequence[bytes] | None = None) -> list[tuple[bytes, Row]]:
        self._settle()
        where, params = _column_clause(columns)
        found: dict[bytes, Row] = {}
        for at in range(0, len(rows), KEYS_PER_STATEMENT):
            chunk = rows[at:at + KEYS_PER_STATEMENT]
            cursor = self._db().execute(
                f"SELECT row, family, {QUALIFIER}, {VALUE} FROM cells WHERE tbl = ?"
                f" AND row IN ({', '.join('?' * len(chunk))})" + where,
                (self.name, *chunk, *params))
            for key, family, qualifier, value in cursor:
                found.setdefault(key, {})[family.encode() + b":" + qualifier] = value
        return [(key, found[key]) for key in rows if key in found]

    def scan(self, row_start: bytes | None = None, row_stop: bytes | None = None,
             row_prefix: bytes | None = None, columns: Sequence[bytes] | None = None,
             limit: int | None = None, batch_size: int = 1000,
             keys_only: bool = False) -> Iterator[tuple[bytes, Row]]:
        if row_prefix is not None:
            row_start, row_stop = row_prefix, prefix_stop(row_prefix)
        self._settle()
        where, params = _column_clause(columns)
        sql = ("SELECT row, family, " + ("z & 2, qualifier, x''" if keys_only else STORED)
               + " FROM cells WHERE tbl = ? AND row >= ?" + where)
        args: list[object] = [self.name, row_start or b"", *params]
        if row_stop is not None:
            sql += " AND row < ?"
            args.append(row_stop)
        cursor = self._db().execute(sql + " ORDER BY row, family, qualifier", args)
        cursor.arraysize = batch_size
        yield from _group_rows(self.store, self.name, cursor, limit)

    def scan_stamps(self, row_start: bytes, row_stop: bytes | None, family: str,
                    limit: int | None = None) -> Iterator[tuple[bytes, int, int]]:
        """``(row, cells, newest write time in ms)`` of each row of ``family`` in the range
        (the first ``limit`` rows): what the hour cache validates a decoded row with, without
        reading values."""
        cursor = self._range_query("SELECT row, count(*), max(ts)", row_start, row_stop,
                                   family, " GROUP BY row ORDER BY row"
                                   + ("" if limit is None else f" LIMIT {int(limit)}"))
        while batch := cursor.fetchmany():
            yield from batch

    def range_stamp(self, ranges: Sequence[tuple[bytes, bytes]],
                    family: str) -> tuple[int, int]:
        """``(cells, newest write time in ms)`` over every cell of ``family`` in all the
        ranges at once: one statement, one snapshot, counted in the ``cells_stamp`` index
        (no value read, no row returned per HBase row). What the hour cache validates a whole
        key range of closed rows with (docs/cache.md)."""
        self._settle()
        values = ", ".join(["(?, ?)"] * len(ranges))
        args: list[object] = [b for pair in ranges for b in pair]
        found = self._db().execute(
            f"WITH r(lo, hi) AS (VALUES {values}) SELECT count(*), coalesce(max(c.ts), 0)"
            " FROM r CROSS JOIN cells AS c INDEXED BY cells_stamp"
            " WHERE c.tbl = ? AND c.row >= r.lo AND c.row < r.hi AND c.family = ?",
            [*args, self.name, family]).fetchone()
        return int(found[0]), int(found[1])

    def _range_query(self, select: str, row_start: bytes, row_stop: bytes | None,
                     family: str, tail: str, head_args: Sequence[object] = ()
                     ) -> sqlite3.Cursor:
        """``select`` over the cells of ``family`` in ``[row_start, row_stop)``, then
        ``tail`` (grouping, order), on the settled table; ``head_args`` bind ``select``'s
        parameters."""
        self._settle()
        sql = select + " FROM cells WHERE tbl = ? AND row >= ? AND family = ?"
        args: list[object] = [*head_args, self.name, row_start, family]
        if row_stop is not None:
            sql += " AND row < ?"
            args.append(row_stop)
        cursor = self._db().execute(sql + tail, args)
        cursor.arraysize = 1000
        return cursor

    def put(self, row: bytes, data: Mapping[bytes, bytes]) -> None:
        self.put_many([(row, data)])

    def put_many(self, puts: Iterable[tuple[bytes, Mapping[bytes, bytes]]]) -> None:
        puts = list(puts)
        for _, data in puts:  # refused now, not when the staged cells are merged
            for column in data:
                if column[:2] != b"t:":
                    split_qualified(column)
        self.store._group.write(self.name, puts)

    def put_block(self, block: CellBlock) -> None:
        """Stage a block of data cells as one row, merged by SQLite alone (sqlite_block.py);
        a block that does not fit its index goes through :meth:`put_many`."""
        if fits(block):
            self.store._group.write_block(self.name, block)
        elif len(block):
            self.put_many(block.puts())

    def append(self, row: bytes, column: bytes, value: bytes) -> None:
        family, qualifier = split_qualified(column)
        with self._transaction() as db:
            db.execute(
                f"INSERT INTO cells ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE"
                f" SET value = CAST({VALUE} || excluded.value AS BLOB), ts = excluded.ts,"
                " z = NULL",
                (self.name, row, family, qualifier, value, now_ms()))

    def delete(self, row: bytes, columns: Sequence[bytes] | None = None,
               up_to_ms: int | None = None) -> None:
        where, params = _column_clause(columns)
        if up_to_ms is not None:
            where, params = where + " AND ts <= ?", [*params, up_to_ms]
        with self._transaction() as db:
            db.execute("DELETE FROM cells WHERE tbl = ? AND row = ?" + where,
                       (self.name, row, *params))
        self.store.release_free_pages()

    def space_used(self) -> StoreSpace:
        """The store's file size and pages in use, and this table's data points."""
        return self.store.space(self.name)

    def counter_inc(self, row: bytes, column: bytes, value: int = 1) -> int:
        family, qualifier = split_qualified(column)
        with self._transaction() as db:
            found = db.execute(
                f"SELECT {VALUE} FROM cells WHERE tbl = ? AND row = ? AND family = ? "
                "AND qualifier = ?", (self.name, row, family, qualifier)).fetchone()
            current = int.from_bytes(found[0], "big", signed=True) if found else 0
            new = current + value
            db.execute(f"INSERT OR REPLACE INTO cells ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                       (self.name, row, family, qualifier,
                        new.to_bytes(8, "big", signed=True), now_ms()))
        return new

    def check_and_put(self, row: bytes, column: bytes, expected: bytes | None,
                      value: bytes) -> bool:
        family, qualifier = split_qualified(column)
        with self._transaction() as db:
            found = db.execute(
                f"SELECT {VALUE} FROM cells WHERE tbl = ? AND row = ? AND family = ? "
                "AND qualifier = ?", (self.name, row, family, qualifier)).fetchone()
            if (found[0] if found else None) != expected:
                return False
            db.execute(f"INSERT OR REPLACE INTO cells ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                       (self.name, row, family, qualifier, value, now_ms()))
        return True

    def scan_stamped(self, row_start: bytes, row_stop: bytes | None,
                     family: str) -> Iterator[tuple[bytes, Row, int, int, int]]:
        """``(row, cells, cell count, newest write time in ms, stored bytes)`` of each row of
        ``family`` in the range: values and write times read by one statement, so one
        snapshot (WAL), and each row's stamp is that of exactly the cells returned. Stored
        bytes: per cell its row key, column name and value (the query byte limit's weight)."""
        cursor = self._range_query(f"SELECT row, {STORED}, ts", row_start, row_stop, family,
                                   " ORDER BY row, qualifier")
        prefix = family.encode() + b":"
        current: bytes | None = None
        cells: Row = {}
        newest = size = 0
        while batch := cursor.fetchmany():
            for row, qualifier, value, ts in _unpacked(self.store, self.name, batch, 1):
                if row != current:
                    if current is not None:
                        yield (current, cells, len(cells), newest,
                               (len(current) + len(prefix)) * len(cells) + size)
                    current, cells, newest, size = row, {}, ts, 0
                cells[prefix + qualifier] = value
                newest = max(newest, ts)
                size += len(qualifier) + len(value)
        if current is not None:
            yield (current, cells, len(cells), newest,
                   (len(current) + len(prefix)) * len(cells) + size)

    def scan_stamps_sized(self, row_start: bytes, row_stop: bytes | None,
                          family: str) -> Iterator[tuple[bytes, int, int, int]]:
        """:meth:`scan_stamps` and each row's stored bytes (row key, column name and value
        per cell, as the query byte limit weighs them), still without reading the values
        (their lengths are in the records)."""
        cursor = self._range_query(
            f"SELECT row, count(*), max(ts), sum(length(row) + ? + length({QUALIFIER})"
            f" + {VALUE_LENGTH})", row_start, row_stop, family, " GROUP BY row ORDER BY row",
            head_args=[len(family) + 1])  # "family:" before each qualifier
        while batch := cursor.fetchmany():
            yield from batch

    def scan_packed(self, row_start: bytes, row_stop: bytes | None, family: str,
                    qualifier_prefixes: Sequence[bytes]
                    ) -> Iterator[tuple[bytes, int, int, bytes, bytes]]:
        """``(row, cells, newest write time in ms, qualifiers joined, values joined)`` of
        each row of the range, over its cells of ``family`` whose qualifier starts with one of
        ``qualifier_prefixes``: one SQL row per HBase row, not one per cell (rollup rows hold
        a cell per aggregate per interval). Both joins are built in the same pass over the
        same cells, so they list the cells in the same order. The newest write time is that
        of every cell of the row's family (as :meth:`scan_newest` reads it), from the same
        statement, so it describes the very cells read."""
        self._settle()
        where, args = self._packed_where(row_start, row_stop, family, qualifier_prefixes)
        cursor = self._db().execute(
            "SELECT row, count(*), (SELECT max(ts) FROM cells AS c WHERE c.tbl = cells.tbl"
            " AND c.row = cells.row AND c.family = cells.family),"
            f" CAST(group_concat({QUALIFIER}, x'') AS BLOB),"
            f" CAST(group_concat({VALUE}, x'') AS BLOB) FROM cells" + where
            + " GROUP BY row ORDER BY row", args)
        cursor.arraysize = 1000
        while batch := cursor.fetchmany():
            yield from batch

    def scan_columns(self, ranges: Sequence[tuple[bytes, bytes | None]],
                     parts: Sequence[int],
                     blocks: Sequence[tuple[bytes, bytes]] = ()) -> ColumnsRead:
        """The kept columnar parts of the rows of ``ranges`` (``sqlite_columns``): each part
        one joined blob per column over all current rows; the rows changed since listed. The
        first call on a table starts keeping them (its rows all listed, once)."""
        self._settle()
        if self.name not in self.store._columns_on:
            if not sqlite_columns.enabled(self._db(), self.name):
                with self.store.transaction() as db:
                    sqlite_columns.enable(db, self.name)
            self.store._columns_on.add(self.name)
        return sqlite_columns.scan(self._db(), self.name, ranges, parts, blocks)

    def put_columns(self, rows: Sequence[ColumnsPut]) -> int:
        """Keep the rows' parts, each only if no cell of it changed since it was read."""
        if not rows:
            return 0
        with self.store.transaction() as db:
            self.store.merge_first(db, self.name)  # staged cells mark their rows as they merge
            if not sqlite_columns.enabled(db, self.name):
                return 0  # nothing marks its rows yet: scan_columns starts that
            return sqlite_columns.put(db, self.name, rows)

    def put_column_blocks(self, blocks: Sequence[tuple[bytes, bytes]], parts: Sequence[int],
                          encode: Callable[[bytes], bytes | None]) -> int:
        """Keep each range's parts as one block (``sqlite_columns.put_blocks``)."""
        if not blocks:
            return 0
        with self.store.transaction() as db:
            self.store.merge_first(db, self.name)  # staged cells mark their rows as they merge
            return sqlite_columns.put_blocks(db, self.name, blocks, parts, encode)

    def hour_prefixes(self, ranges: Sequence[tuple[bytes, bytes]]) -> list[bytes]:
        """The hours of ``ranges`` with kept columns (``sqlite_hours``)."""
        self._settle()
        return sqlite_hours.prefixes(self._db(), self.name, ranges)

    def hour_column(self, prefix: bytes) -> bytes | None:
        """The kept columns of one hour (``sqlite_hours``)."""
        self._settle()
        return sqlite_hours.blob(self._db(), self.name, prefix)

    def put_hour_columns(self, prefix_bytes: int, hours: Sequence[HourPut]) -> int:
        """Keep the hours' blobs, each only if its cells are those it was made from."""
        if not hours:
            return 0
        with self.store.transaction() as db:
            self.store.merge_first(db, self.name)  # staged cells change their hours as they merge
            return sqlite_hours.put(db, self.name, prefix_bytes, hours)

    def hours_to_strip(self) -> bool:
        """Whether a kept hour's cells still hold their values (``sqlite_hours.unstripped``)."""
        return bool(sqlite_hours.unstripped(self._db(), self.name, b"", 1))

    def strip_hour_values(self, after: bytes, most: int) -> tuple[bytes | None, int]:
        """One copy of up to ``most`` kept hours after the prefix ``after`` (``sqlite_hours.
        strip_kept``), each in its own short write transaction (writers wait for one hour at
        most); the last hour done (None when none is left after it: the free pages are then
        given back) and the cells stripped."""
        self._settle()
        hours = sqlite_hours.unstripped(self._db(), self.name, after, most)
        stripped = 0
        for prefix in hours:
            with self.store.transaction() as db:
                stripped += sqlite_hours.strip_kept(db, self.name, prefix)
        if len(hours) < most:  # the pass's end: the pages the values held, at once (the
            self.store.release_free_pages()  # steps before reuse them as they go)
            return None, stripped
        return hours[-1], stripped

    def _packed_where(self, row_start: bytes, row_stop: bytes | None, family: str,
                      qualifier_prefixes: Sequence[bytes]
                      ) -> tuple[str, list[object]]:
        sql = " WHERE tbl = ? AND row >= ? AND family = ?"
        args: list[object] = [self.name, row_start, family]
        if row_stop is not None:
            sql += " AND row < ?"
            args.append(row_stop)
        terms = []
        for prefix in qualifier_prefixes:
            stop = prefix_stop(prefix)
            terms.append("(qualifier >= ?" + (" AND qualifier < ?)" if stop else ")"))
            args += [prefix, stop] if stop else [prefix]
        return sql + " AND (" + (" OR ".join(terms) or "0") + ")", args


def _column_clause(columns: Sequence[bytes] | None) -> tuple[str, list[object]]:
    """SQL narrowing to families and/or exact columns."""
    if not columns:
        return "", []
    terms: list[str] = []
    params: list[object] = []
    for column in columns:
        family, qualifier = split_column(column)
        if qualifier is None:
            terms.append("family = ?")
            params.append(family)
        elif (key := pack_qualifier(qualifier)) is not None:  # stored as either
            terms.append("(family = ? AND qualifier IN (?, ?))")
            params += [family, qualifier, key]
        else:
            terms.append("(family = ? AND qualifier = ?)")
            params += [family, qualifier]
    return " AND (" + " OR ".join(terms) + ")", params


def _unpacked(store: SqliteStore, table: str, batch: list[Any], at: int) -> list[Any]:
    """The SQL rows of ``batch`` with the cell as stored (``z, qualifier, value`` from column
    ``at``; the row key in column 0) replaced by its qualifier and value as OpenTSDB wrote
    them: the batch's packed cells unpacked together (``sqlite_pack.unpack_many``,
    ``unpack_qualifiers``), or found unpacked already (``store.unpacked_values``,
    ``unpacked_keys``), and values kept in their hour's blob made from it (:func:`_hour_made`)."""
    values = [i for i, found in enumerate(batch) if found[at] and found[at] & 5 == 1]
    keys = [i for i, found in enumerate(batch) if found[at] and found[at] & 2]
    in_hours = [i for i, found in enumerate(batch) if found[at] and found[at] & 4]
    if not values and not keys and not in_hours:
        return [found[:at] + found[at + 1:] for found in batch]
    rows = [list(found[:at] + found[at + 1:]) for found in batch]
    for i, value in zip(values, store.unpacked_values([batch[i][at + 2] for i in values])):
        rows[i][at + 1] = value
    for i, key in zip(keys, store.unpacked_keys([batch[i][at + 1] for i in keys])):
        rows[i][at] = key
    if in_hours:
        _hour_made(store, table, [(rows[i], batch[i], at) for i in in_hours])
    return [tuple(row) for row in rows]


def _hour_made(store: SqliteStore, table: str, cells: list[tuple[list[Any], Any, int]]) -> None:
    """Each cell's value made from its hour's blob (``hour_values``), read on the scan's own
    connection, so in its snapshot while its statement runs. Once its statement is done (the
    last batch) the hour may have changed since: such a cell's value is read again as it is
    now, by key (a blob found is the one the cell's value is in: a blob that holds values
    is never replaced)."""
    db = store.connection()
    blobs: dict[bytes, BlobRows | None] = {}
    for row, found, at in cells:
        z, stored = found[at], found[at + 2]
        prefix = found[0][:z >> hour_values.PREFIX_SHIFT]
        if prefix not in blobs:
            blob = sqlite_hours.blob(db, table, prefix)
            blobs[prefix] = None if blob is None else BlobRows(blob)
        if (rows := blobs[prefix]) is not None:
            row[at + 1] = hour_values.cell_value(rows, found[0], row[at], stored)
            continue
        now = db.execute(f"SELECT {VALUE} FROM cells WHERE tbl = ? AND row = ?"
                         " AND family = 't' AND qualifier = ?",
                         (table, found[0], found[at + 1])).fetchone()
        if now is None:
            raise StorageError("A cell changed while it was read", "retry the read")
        row[at + 1] = now[0]


def _group_rows(store: SqliteStore, table: str, cursor: sqlite3.Cursor, limit: int | None
                ) -> Iterator[tuple[bytes, Row]]:
    """Fold the cell stream (sorted by row) into ``(row, cells)`` pairs."""
    current: bytes | None = None
    cells: Row = {}
    emitted = 0
    while batch := cursor.fetchmany():
        for row, family, qualifier, value in _unpacked(store, table, batch, 2):
            if row != current:
                if current is not None:
                    yield current, cells
                    emitted += 1
                    if limit is not None and emitted >= limit:
                        return
                current, cells = row, {}
            cells[family.encode() + b":" + qualifier] = value
    if current is not None:
        yield current, cells
