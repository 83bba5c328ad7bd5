"""The embedded store's write side: the write lock, group commit and the staging table.

**Staging (LSM-lite).** Data cells arrive in collector order: each point of a batch belongs to
another series, so written straight into ``cells`` each one dirties its own B-tree leaf (and
one of the ``cells_stamp`` index), and every commit writes all those pages to the WAL.
``put_many`` therefore appends each batch to ``staged_batches`` as ONE row (an arrival number
``seq``, the table, the write time and the batch's cells packed into one blob,
:func:`pack_cells`), in the same transaction as before: a committed cell is stored, and a crash
loses nothing that was acknowledged. One row per batch rather than one per cell: binding six
parameters and inserting a row and an index entry per cell cost about as much as the merge
itself, and a batch is written once to the log either way. The writer's blocks of data cells
(``put_block``) are staged likewise, in a columnar form (sqlite_block.py). Staged cells move
into ``cells`` in key order, in bulk (each page of ``cells`` touched once for many cells), the
points of a row that blocks brought as ONE compacted cell per merge step (:class:`MergeChunk`):

* when a process has staged :data:`STAGE_MAX_CELLS` cells or :data:`STAGE_MAX_BYTES` bytes
  since its last merge (so ``staged_batches`` holds at most that much per writing process);
* before any read of a table, by any process, when that table has staged cells (a cheap
  ``EXISTS``, then the merge under the write lock): readers never read a union of the two;
* before any other write to the table (append, delete, increment, check-and-put, a batch of
  big cells written directly), in that write's transaction, so read-modify-writes and deletes
  act on every cell written before.

Each cell keeps the write time (``ts``) it was staged with (a compacted cell, the newest of
its points'), and of a cell staged twice the later arrival (the larger ``seq``) wins: the hour
cache's stamps, compaction's ``delete(up_to_ms=)`` and query deletes see cells and times that
order as if they had been written to ``cells`` directly (:class:`MergeChunk` says why).
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from app.errors import StorageError
from app.storage.base import CellBlock, WriteBusy, prefix_stop
from app.storage.sqlite_block import block_blob, block_records
from app.storage.sqlite_merge import (
    PACKED_FAMILY,
    Floors,
    MergeChunk,
    Record,
    as_records,
    mark_cells,
)
from app.storage.sqlite_pack import KEY_MIN_BYTES, pack_columns, pack_qualifier, pack_qualifiers

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from app.storage.sqlite import SqliteStore

# A merge costs a few us per cell and holds the write lock meanwhile: these bound both the
# staging table and the longest pause a merge puts on writers and on the read that triggers it.
STAGE_MAX_CELLS = 50_000
STAGE_MAX_BYTES = 16 * 1024 * 1024
# Batches of cells this big on average (compacted rows: the importer, compaction) go straight
# into ``cells``: each fills much of a page by itself, so staging would only copy it twice.
DIRECT_MIN_BYTES_PER_CELL = 256
# A merge reads the staged batches this many cells at a time (in arrival order, so a later
# chunk rightly replaces an earlier one's cells): it bounds the merge's memory, not its work.
MERGE_CHUNK_CELLS = 100_000

STAGING_SCHEMA = """
CREATE TABLE IF NOT EXISTS staged_batches (
    seq INTEGER PRIMARY KEY, tbl TEXT NOT NULL, ts INTEGER NOT NULL, cells INTEGER NOT NULL,
    data BLOB NOT NULL, cell_index TEXT
);
-- The tables that have staged cells, which every read looks up first. A row per table, not
-- an index on ``staged_batches (tbl)``: an index wrote a page of its own to the log at each
-- commit (16 KiB), where the ``INSERT OR IGNORE`` of a table already listed changes none.
CREATE TABLE IF NOT EXISTS staged_tables (tbl TEXT PRIMARY KEY) WITHOUT ROWID;
-- Per table, the newest write time of a cell in ``cells`` (merges and direct writes raise
-- it): a merge leaves single the points of a row it could not compact safely (MergeChunk).
CREATE TABLE IF NOT EXISTS cell_marks (
    tbl TEXT PRIMARY KEY, newest_ms INTEGER NOT NULL
) WITHOUT ROWID;
"""
COLUMNS = "tbl, row, family, qualifier, value, ts"
Puts = Sequence[tuple[bytes, Mapping[bytes, bytes]]]
"""``put_many``'s argument: ``[(row, {b"family:qualifier": value})]``."""
ROWS_PER_INSERT = 500  # 3,000 parameters: well under SQLite's limit of 32,766
_INSERT_ONE = f"INSERT OR REPLACE INTO cells ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
_INSERT_MANY = (f"INSERT OR REPLACE INTO cells ({COLUMNS}) VALUES "
                + ", ".join(["(?, ?, ?, ?, ?, ?)"] * ROWS_PER_INSERT))
_MANY_PARAMS = 6 * ROWS_PER_INSERT
_INSERT_PACKED = (f"INSERT OR REPLACE INTO cells ({COLUMNS}, z) VALUES (?, ?, ?, ?, ?, ?, ?)")
_DELETE_CELL = "DELETE FROM cells WHERE tbl = ? AND row = ? AND family = ? AND qualifier = ?"
LENGTH = np.dtype("<u4")  # the packed lengths: little-endian on any machine (files move)


def pack_cells(puts: Puts) -> tuple[int, bytes]:
    """``(cells, blob)``: the cells' row, column and value bytes, each field's length first.

    The blob is ``3 * cells`` little-endian uint32 lengths, then the fields back to back in
    the order ``row, column, value`` per cell: built by C loops (``map``, ``join``), with no
    Python-level call per field."""
    fields = [field for row, data in puts for column, value in data.items()
              for field in (row, column, value)]
    lengths = np.fromiter(map(len, fields), LENGTH, len(fields))
    return len(fields) // 3, lengths.tobytes() + b"".join(fields)


def unpack_cells(cells: int, blob: bytes) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """:func:`pack_cells` undone: the rows, columns and values, in the order packed."""
    head = 3 * cells * LENGTH.itemsize
    ends = (np.cumsum(np.frombuffer(blob, LENGTH, 3 * cells), dtype=np.int64) + head).tolist()
    fields = [blob[start:end] for start, end in zip([head, *ends[:-1]], ends)]
    return fields[0::3], fields[1::3], fields[2::3]


def records_of(table: str, puts: Puts, ts: int) -> list[Record]:
    """The cells of ``puts`` as rows of ``cells``."""
    cells = [(row, column, value) for row, data in puts for column, value in data.items()]
    rows, columns, values = (list(field) for field in zip(*cells)) if cells else ([], [], [])
    return as_records(table, rows, columns, values, ts)


def has_staged(db: sqlite3.Connection, table: str) -> bool:
    """Whether ``table`` has staged cells (one look-up in ``staged_tables``)."""
    return db.execute("SELECT 1 FROM staged_tables WHERE tbl = ?", (table,)).fetchone() \
        is not None


def staged_records(db: sqlite3.Connection, table: str | None = None,
                   after_seq: int = 0) -> tuple[list[Record], int]:
    """The staged cells (of ``table``, or all) of the batches after ``after_seq``, in arrival
    order, up to about :data:`MERGE_CHUNK_CELLS`; and the last batch's ``seq`` (0: none).
    Cell by cell, as staged (what a test or a tool inspects); the merge compacts them
    (:func:`merge_staged`)."""
    records: list[Record] = []
    last = 0
    for part, seq in _staged_parts(db, table, after_seq):
        records += part if isinstance(part, list) else block_records(*part)
        last = seq
    return records, last


StagedBlock = tuple[str, int, bytes, str]
"""A staged block: ``(tbl, write time in ms, data, cell_index)``."""


def _staged_parts(db: sqlite3.Connection, table: str | None, after_seq: int
                  ) -> Iterator[tuple[list[Record] | StagedBlock, int]]:
    """The staged batches after ``after_seq`` in arrival order, each with the last ``seq``
    it covers: runs of ``put_many`` batches as records (up to about
    :data:`MERGE_CHUNK_CELLS`), blocks one by one. Stops after :data:`MERGE_CHUNK_CELLS`."""
    records: list[Record] = []
    last = 0
    for seq, tbl, ts, cells, blob, cell_index in _staged_rows(db, table, after_seq):
        if cell_index is not None:
            if records:
                yield records, last
                records = []
            yield (tbl, ts, blob, cell_index), seq
        else:
            records += as_records(tbl, *unpack_cells(cells, blob), ts)
        last = seq
    if records:
        yield records, last


def _staged_rows(db: sqlite3.Connection, table: str | None, after_seq: int
                 ) -> Iterator[tuple[int, str, int, int, bytes, str | None]]:
    """The rows of ``staged_batches`` after ``after_seq`` in arrival order, up to the first
    that brings the count to :data:`MERGE_CHUNK_CELLS`."""
    where, args = ("seq > ?", (after_seq,)) if table is None else (
        "seq > ? AND tbl = ?", (after_seq, table))
    counted = 0
    for found in db.execute("SELECT seq, tbl, ts, cells, data, cell_index FROM staged_batches"
                            f" WHERE {where} ORDER BY seq", args):
        yield found
        counted += found[3]
        if counted >= MERGE_CHUNK_CELLS:
            break


def merge_staged(db: sqlite3.Connection, table: str | None = None, pack: bool = False) -> None:
    """Move the staged cells (of ``table``, or all) into ``cells``, in arrival order, the
    cells of blocks compacted per row (:class:`MergeChunk`). A staged cell is always newer
    than the cells already in ``cells``: other writes to ``cells`` merge first.
    One transaction (the caller's): see docs/performance.md on merging in steps."""
    after = 0
    floors = Floors(db)
    while True:
        chunk = MergeChunk()
        last = 0
        for seq, tbl, ts, cells, blob, cell_index in _staged_rows(db, table, after):
            last = seq
            if cell_index is not None:
                chunk.add_block(seq, tbl, ts, blob, cell_index)
            else:
                chunk.add_batch(seq, tbl, ts, *unpack_cells(cells, blob))
        if not last:
            floors.save(db)
            if table is None:
                db.execute("DELETE FROM staged_tables")
            else:
                db.execute("DELETE FROM staged_tables WHERE tbl = ?", (table,))
            return
        insert_merged(db, chunk.records(floors), pack)
        where, args = ("", (last,)) if table is None else (" AND tbl = ?", (last, table))
        db.execute(f"DELETE FROM staged_batches WHERE seq <= ?{where}", args)
        after = last


def insert_cells(db: sqlite3.Connection, records: list[Record]) -> None:
    """``INSERT OR REPLACE`` the records in their order (of two writes of a cell, the later
    one wins), :data:`ROWS_PER_INSERT` rows per statement: binding a row costs SQLite's Python
    module a step of its own, which a statement of many rows pays once (a merge's cost per
    cell fell from ~3.3 to ~1.8 us)."""
    whole = len(records) - len(records) % ROWS_PER_INSERT
    flat = list(chain.from_iterable(records[:whole]))
    db.executemany(_INSERT_MANY, [flat[at:at + _MANY_PARAMS]
                                  for at in range(0, len(flat), _MANY_PARAMS)])
    db.executemany(_INSERT_ONE, records[whole:])


def has_cell_staging(db: sqlite3.Connection) -> bool:
    """Whether the store has the staging table of an older pytsd (one SQL row per cell)."""
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'staged'"
                      ).fetchone() is not None


def add_block_index(db: sqlite3.Connection) -> None:
    """Give the staging table of an older pytsd the ``cell_index`` column of blocks
    (sqlite_block.py): its staged batches read as ``put_many`` batches, as they are. In the
    caller's write transaction."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(staged_batches)")}
    if "cell_index" not in columns:
        db.execute("ALTER TABLE staged_batches ADD COLUMN cell_index TEXT")


def has_table_index(db: sqlite3.Connection) -> bool:
    """Whether the staging table has the index on its tables of an older pytsd."""
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'index'"
                      " AND name = 'staged_batches_tbl'").fetchone() is not None


def retire_table_index(db: sqlite3.Connection) -> None:
    """List the tables an older pytsd staged cells of in ``staged_tables`` and drop its index
    (in the caller's write transaction): reads find those cells as they find new ones."""
    db.execute("INSERT OR IGNORE INTO staged_tables (tbl) SELECT DISTINCT tbl FROM staged_batches")
    db.execute("DROP INDEX IF EXISTS staged_batches_tbl")


def has_block_index(db: sqlite3.Connection) -> bool:
    return "cell_index" in {row[1] for row in db.execute("PRAGMA table_info(staged_batches)")}


def retire_cell_staging(db: sqlite3.Connection) -> None:
    """Merge what an older pytsd staged one SQL row per cell (the table ``staged``) and drop
    that table, so an upgraded store loses no staged cell. A no-op once done."""
    if not has_cell_staging(db):  # another process did it meanwhile
        return
    db.execute(f"INSERT OR REPLACE INTO cells ({COLUMNS}) SELECT {COLUMNS} FROM (SELECT "
               f"{COLUMNS}, max(seq) FROM staged GROUP BY tbl, row, family, qualifier)")
    db.execute("DROP TABLE staged")


class WriteLock:
    """Mutual exclusion of writers: a re-entrant lock in the process, ``flock`` across them.

    ``flock`` is on a file of its own beside the database: opening and closing the database
    file itself would drop the POSIX locks SQLite holds on it.

    A prompt writer (``acquire(wait=False)``: the server's loop storing a put) waits only
    for another prompt writer, whose commit is short: every other writer holds a second
    lock (``.long``) from before it asks for the first until it lets it go, and a prompt
    writer that finds that one held raises :class:`WriteBusy` rather than wait behind a
    merge or a block of a thousand lines.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._pid = -1
        self._threads = threading.RLock()
        self._fd = self._long_fd = -1
        self._depth = 0
        self._long = False  # this process holds the ``.long`` lock

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self, wait: bool = True) -> None:
        """Take the lock; without ``wait``, raise :class:`WriteBusy` unless it is free or
        held by another prompt writer (class doc)."""
        if self._pid != os.getpid():  # after a fork: fresh state, the parent's fds are not ours
            self._pid, self._threads, self._fd, self._long_fd, self._depth, self._long = (
                os.getpid(), threading.RLock(), -1, -1, 0, False)
        if not self._threads.acquire(blocking=wait):
            raise WriteBusy("another thread is writing")
        try:
            if self._depth == 0:
                self._lock_files(wait)
        except BaseException:
            self._threads.release()
            raise
        self._depth += 1

    def _lock_files(self, wait: bool) -> None:
        try:
            if self._fd < 0:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                self._long_fd = os.open(self.path + ".long", os.O_RDWR | os.O_CREAT, 0o644)
            if wait:
                fcntl.flock(self._long_fd, fcntl.LOCK_EX)
                self._long = True
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            elif not _try_flock(self._fd, fcntl.LOCK_EX):
                self._wait_for_prompt()
        except OSError as exc:
            if self._long:
                self._long = False
                fcntl.flock(self._long_fd, fcntl.LOCK_UN)
            raise StorageError("The embedded store is not writable",
                               f"Cannot lock {self.path}: {exc}") from exc

    def _wait_for_prompt(self) -> None:
        """The lock is held: wait for it only if no long writer holds it or waits for it."""
        if not _try_flock(self._long_fd, fcntl.LOCK_SH):
            raise WriteBusy("another process is writing")
        fcntl.flock(self._long_fd, fcntl.LOCK_UN)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            if self._long:
                self._long = False
                fcntl.flock(self._long_fd, fcntl.LOCK_UN)
        self._threads.release()


def _try_flock(fd: int, operation: int) -> bool:
    """``flock`` without waiting: whether it was taken."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


class GroupCommit:
    """Concurrent ``put_many`` calls of one process share a transaction (and its sync).

    A writer queues its records; the first one to find no commit under way takes every
    queued batch, stages them in one transaction and wakes their writers, each of which
    returns (or raises the transaction's error) only once its records are committed. With
    ``synchronous=FULL`` one disk sync then acknowledges many requests or line blocks. The
    writer that staged past the bound then merges, after its group was acknowledged.
    """

    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        self._ready = threading.Condition()
        self._queue: list[_Pending] = []
        self._writing = False
        self._staged_cells = 0  # staged by this process since its last merge
        self._staged_bytes = 0

    def write(self, table: str, puts: Puts) -> None:
        """Store ``table``'s cells: staged, or directly when they are big."""
        self._commit(_Pending(table, puts))

    def write_block(self, table: str, block: CellBlock) -> None:
        """Stage a block of data cells that fits ``sqlite_block``'s index."""
        self._commit(_Pending(table, (), block))

    def _commit(self, mine: _Pending) -> None:
        """Queue ``mine``; commit it with the queued batches of other threads (module doc).
        A prompt write (``SqliteStore.prompt``) waits for no other commit, and leaves the
        merge it makes due to a thread of its own."""
        prompt = self._store.prompting()
        with self._ready:
            if prompt and (self._writing or self._queue):  # a group of waiting writers'
                raise WriteBusy("another thread is committing")  # batches is theirs to write
            self._queue.append(mine)
            while not mine.done and self._writing:
                self._ready.wait()
            if mine.done:
                mine.raise_error()
                return
            self._writing = True
            group, self._queue = self._queue, []
        error: BaseException | None = None
        merge = False
        try:
            with self._store.transaction() as db:
                # Stamped now, under the write lock every process takes, not when the batch
                # was queued: write times then grow in commit order across all writers, which
                # the hour cache's range stamps rely on (docs/cache.md).
                written_ms = time.time_ns() // 1_000_000
                for pending in group:
                    _write(db, pending, written_ms, self._store)
            merge = self._count(group)
        except BaseException as exc:  # every writer of the group learns it failed
            error = exc
        with self._ready:
            for pending in group:
                pending.done, pending.error = True, error
            self._writing = False
            self._ready.notify_all()
        mine.raise_error()
        if merge and prompt:
            threading.Thread(target=self._merge, name="tsd-merge", daemon=True).start()
        elif merge:
            self._merge()

    def _merge(self) -> None:
        """Merge every staged cell. The writes are already committed and acknowledged: a
        failure is logged, not raised (the cells stay staged; the next read merges them)."""
        try:
            with self._store.transaction() as db:
                merge_staged(db, pack=self._store.pack_cells)
            self._store.release_free_pages()  # the merged log's pages, beyond a reserve
        except (sqlite3.Error, StorageError):
            log.exception("merging the staged cells of %s failed", self._store.path)

    def _count(self, group: list[_Pending]) -> bool:
        """Count the group's staged cells; True (and reset) when a merge is due."""
        staged = [pending for pending in group if not pending.direct]
        self._staged_cells += sum(pending.cells for pending in staged)
        self._staged_bytes += sum(pending.nbytes for pending in staged)
        if self._staged_cells < STAGE_MAX_CELLS and self._staged_bytes < STAGE_MAX_BYTES:
            return False
        self._staged_cells = self._staged_bytes = 0
        return True


def _write(db: sqlite3.Connection, pending: _Pending, written_ms: int,
           store: SqliteStore) -> None:
    if not pending.direct:
        db.execute("INSERT INTO staged_batches (tbl, ts, cells, data, cell_index)"
                   " VALUES (?, ?, ?, ?, ?)", (pending.table, written_ms, pending.cells,
                                              pending.blob, pending.cell_index))
        db.execute("INSERT OR IGNORE INTO staged_tables (tbl) VALUES (?)", (pending.table,))
        return
    store.merge_first(db, pending.table)  # older staged cells first: these are newer
    insert_packed(db, records_of(pending.table, pending.puts, written_ms), store.pack_cells)
    mark_cells(db, pending.table, written_ms)


def insert_packed(db: sqlite3.Connection, records: list[Record], packing: bool) -> None:
    """Insert big cells (a direct write: compacted rows), those of the data family packed
    where that saves space when ``packing`` (``tsd.storage.sqlite.pack_cells``;
    sqlite_pack.py: the value deflated, the qualifier kept as its short key), in order (the
    later write of a cell wins). A cell has one stored form: one written under its key
    replaces one stored under its qualifier and the other way round (packing on or off)."""
    _insert_keyed(db, [(record, pack_qualifier(record[3]) if record[2] == PACKED_FAMILY
                        else None) for record in records], packing)


def _insert_keyed(db: sqlite3.Connection, keyed: list[tuple[Record, bytes | None]],
                  packing: bool) -> None:
    """:func:`insert_packed` of records with their short keys (None: the cell has none).

    Each record deletes its cell's other stored form and inserts its own, the deletes all
    first, then the inserts in order, each an ``executemany`` (a statement per column from
    Python cost about as much as packing it). The same as record by record: a delete never
    removes what an insert here writes, since one form is a data qualifier (even length)
    and the other a short key (odd length), and of two inserts of a cell the later wins."""
    deletes: list[tuple[str, bytes, str, bytes]] = []
    inserts: list[tuple[str, bytes, str, bytes, bytes, int, int | None]] = []
    to_pack = [record for record, key in keyed if key is not None] if packing else []
    packs = iter(pack_columns([record[3] for record in to_pack], [record[4] for record in to_pack]))
    for (tbl, row, family, qualifier, value, ts), key in keyed:
        if key is None:
            inserts.append((tbl, row, family, qualifier, value, ts, None))
        elif not packing:  # the other form: the cell packed when packing was on
            deletes.append((tbl, row, family, key))
            inserts.append((tbl, row, family, qualifier, value, ts, None))
        else:
            packed = next(packs)  # pack(value, float_widths(qualifier)), all at once
            deletes.append((tbl, row, family, qualifier))
            inserts.append((tbl, row, family, key, packed or value, ts,
                            2 | (1 if packed is not None else 0)))
    db.executemany(_DELETE_CELL, deletes)
    db.executemany(_INSERT_PACKED, inserts)


def insert_merged(db: sqlite3.Connection, records: list[Record], pack: bool) -> None:
    """Insert merged staged cells in bulk, a compacted column in one stored form (a data
    column long enough to have a short key: sqlite_pack.py). Packing on, such columns go
    through :func:`insert_packed`; off, each first deletes its packed form, which a store
    that packed before may hold (one statement per column: ``pack_qualifier`` costs tens of
    microseconds a column, more than the column's whole merge)."""
    long = [record for record in records
            if len(record[3]) >= KEY_MIN_BYTES and record[2] == PACKED_FAMILY]
    if not long:
        insert_cells(db, records)
        return
    if not pack:
        db.executemany(_DELETE_PACKED_FORM, [
            (tbl, row, qualifier[:4], prefix_stop(qualifier[:4]) or b"\xff" * 5, qualifier)
            for tbl, row, _, qualifier, _, _ in long])
        insert_cells(db, records)
        return
    keys = {id(record): key for record, key in zip(long, pack_qualifiers(
        [record[3] for record in long])) if key is not None}  # each distinct one computed once
    insert_cells(db, [record for record in records if id(record) not in keys])
    _insert_keyed(db, [(record, keys[id(record)]) for record in long if id(record) in keys],
                  pack)


# A column kept as its short key starts with the column's first two qualifiers (4 bytes).
_DELETE_PACKED_FORM = (
    "DELETE FROM cells WHERE tbl = ?1 AND row = ?2 AND family = 't' AND qualifier >= ?3"
    " AND qualifier < ?4 AND (CASE WHEN z & 2 THEN tsd_unpack_qualifier(qualifier) END) = ?5")


class _Pending:
    """One writer's batch, packed (when it is to be staged) before it waits for the lock."""

    def __init__(self, table: str, puts: Puts, block: CellBlock | None = None) -> None:
        self.table = table
        self.puts = puts
        self.cell_index: str | None = None
        if block is not None:  # small cells (a block that fits): always staged
            self.cells, self.nbytes, self.direct = len(block), len(block.values), False
            self.blob, self.cell_index = block_blob(block)
        else:
            self.cells = sum(len(data) for _, data in puts)
            self.nbytes = sum(len(value) for _, data in puts for value in data.values())
            self.direct = self.nbytes >= DIRECT_MIN_BYTES_PER_CELL * self.cells > 0
            self.blob = b"" if self.direct else pack_cells(puts)[1]
        self.done = False
        self.error: BaseException | None = None

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error
