"""The embedded store's write side: the write lock, group commit and the staging table.

**Staging (LSM-lite).** Data cells arrive in collector order: each point of a batch belongs to
another series, so written straight into ``cells`` each one dirties its own B-tree leaf (and
one of the ``cells_stamp`` index), and every commit writes all those pages to the WAL.
``put_many`` therefore appends them to ``staged``, a log of cells in arrival order (the same
columns plus an arrival number ``seq``, so a commit writes only the log's last few pages), in
the same transaction as before: a committed cell is stored, and a crash loses nothing that was
acknowledged. Staged cells move into ``cells`` in key order, in bulk (each page of ``cells``
touched once for many cells):

* when a process has staged :data:`STAGE_MAX_CELLS` cells or :data:`STAGE_MAX_BYTES` bytes
  since its last merge (so ``staged`` holds at most that much per writing process);
* before any read of a table, by any process, when that table has staged cells (a cheap
  ``EXISTS``, then the merge under the write lock): readers never read a union of the two;
* before any other write to the table (append, delete, increment, check-and-put, a batch of
  big cells written directly), in that write's transaction, so read-modify-writes and deletes
  act on every cell written before.

Each cell keeps the write time (``ts``) it was staged with, and of a cell staged twice the
later arrival wins (SQLite's ``max()`` aggregate takes the other columns from the row with the
largest ``seq``: https://sqlite.org/lang_select.html#bareagg): the hour cache's stamps,
compaction's ``delete(up_to_ms=)`` and query deletes see the same cells and times as if they
had been written to ``cells`` directly.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.errors import StorageError

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

STAGING_SCHEMA = """
CREATE TABLE IF NOT EXISTS staged (
    seq INTEGER PRIMARY KEY, tbl TEXT NOT NULL, row BLOB NOT NULL, family TEXT NOT NULL,
    qualifier BLOB NOT NULL, value BLOB NOT NULL, ts INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS staged_tbl ON staged (tbl);
"""
COLUMNS = "tbl, row, family, qualifier, value, ts"
Record = tuple[str, bytes, str, bytes, bytes, int]
"""A cell as stored: ``(tbl, row, family, qualifier, value, ts)``."""


def stage(db: sqlite3.Connection, records: Sequence[Record]) -> None:
    """Write cells into the staging table."""
    db.executemany(f"INSERT INTO staged ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)", records)


def has_staged(db: sqlite3.Connection, table: str) -> bool:
    """Whether ``table`` has staged cells (one look-up in the ``staged_tbl`` index)."""
    found = db.execute("SELECT 1 FROM staged WHERE tbl = ? LIMIT 1", (table,)).fetchone()
    return found is not None


def merge_staged(db: sqlite3.Connection, table: str | None = None) -> None:
    """Move the staged cells (of ``table``, or all) into ``cells``, in key order. A staged
    cell is always newer than the one it replaces: other writes to ``cells`` merge first."""
    where, args = ("", ()) if table is None else (" WHERE tbl = ?", (table,))
    # GROUP BY sorts the log into the key order of ``cells``; of a cell staged twice, the
    # bare columns come from the row of max(seq): the later arrival.
    db.execute(f"INSERT OR REPLACE INTO cells ({COLUMNS}) SELECT {COLUMNS} FROM (SELECT "
               f"{COLUMNS}, max(seq) FROM staged{where} GROUP BY tbl, row, family, qualifier)",
               args)
    db.execute("DELETE FROM staged" + where, args)


class WriteLock:
    """Mutual exclusion of writers: a re-entrant lock in the process, ``flock`` across them.

    ``flock`` is on a file of its own beside the database: opening and closing the database
    file itself would drop the POSIX locks SQLite holds on it.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._pid = -1
        self._threads = threading.RLock()
        self._fd = -1
        self._depth = 0

    def __enter__(self) -> None:
        if self._pid != os.getpid():  # after a fork: fresh state, the parent's fd is not ours
            self._pid, self._threads, self._fd, self._depth = (
                os.getpid(), threading.RLock(), -1, 0)
        self._threads.acquire()
        try:
            if self._depth == 0:
                if self._fd < 0:
                    self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(self._fd, fcntl.LOCK_EX)
        except OSError as exc:
            self._threads.release()
            raise StorageError("The embedded store is not writable",
                               f"Cannot lock {self.path}: {exc}") from exc
        self._depth += 1

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._threads.release()


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

    def write(self, table: str, records: Sequence[Record]) -> None:
        """Store ``table``'s cells: staged, or written directly when they are big."""
        mine = _Pending(table, records)
        with self._ready:
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
                for pending in group:
                    _write(db, pending)
            merge = self._count(group)
        except BaseException as exc:  # every writer of the group learns it failed
            error = exc
        with self._ready:
            for pending in group:
                pending.done, pending.error = True, error
            self._writing = False
            self._ready.notify_all()
        mine.raise_error()
        if merge:
            self._merge()

    def _merge(self) -> None:
        """Merge every staged cell. The writes are already committed and acknowledged: a
        failure is logged, not raised (the cells stay staged; the next read merges them)."""
        try:
            with self._store.transaction() as db:
                merge_staged(db)
        except (sqlite3.Error, StorageError):
            log.exception("merging the staged cells of %s failed", self._store.path)

    def _count(self, group: list[_Pending]) -> bool:
        """Count the group's staged cells; True (and reset) when a merge is due."""
        staged = [pending for pending in group if not pending.direct]
        self._staged_cells += sum(len(pending.records) for pending in staged)
        self._staged_bytes += sum(pending.nbytes for pending in staged)
        if self._staged_cells < STAGE_MAX_CELLS and self._staged_bytes < STAGE_MAX_BYTES:
            return False
        self._staged_cells = self._staged_bytes = 0
        return True


def _write(db: sqlite3.Connection, pending: _Pending) -> None:
    if not pending.direct:
        stage(db, pending.records)
        return
    if has_staged(db, pending.table):  # older staged cells first: these are newer
        merge_staged(db, pending.table)
    db.executemany(f"INSERT OR REPLACE INTO cells ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                   pending.records)


class _Pending:
    def __init__(self, table: str, records: Sequence[Record]) -> None:
        self.table = table
        self.records = records
        self.nbytes = sum(len(record[4]) for record in records)
        self.direct = self.nbytes >= DIRECT_MIN_BYTES_PER_CELL * len(records) > 0
        self.done = False
        self.error: BaseException | None = None

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error
