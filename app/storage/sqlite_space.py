"""The embedded store's disk space: given back, and reported (bytes per data point).

**Given back.** A new file is made with ``auto_vacuum=INCREMENTAL``: pages freed by
compaction (its deleted single-point cells) and by the staging log's merges go to SQLite's
free list, and :func:`release_free_pages` hands all but a reserve of them back to the file
system after merges and deletes, once twice the reserve is free, in a short transaction of
its own followed by a WAL checkpoint that does not wait for readers. SQLite can turn
auto-vacuum on for a file that has tables only by rewriting it (``VACUUM``): a store made by
an older pytsd says so once in the log, and ``pytsd vacuum`` does it (docs/performance.md).

**Reported.** :func:`store_space`: the file (and WAL) size, the pages in use and free, and
the data points of the data table (one per single-point cell, the qualifiers of a compacted
cell counted; appended columns are not counted).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager

from app.storage.base import StoreSpace

log = logging.getLogger(__name__)

AUTO_VACUUM_INCREMENTAL = 2  # PRAGMA auto_vacuum's answer
BUSY_TIMEOUT_MS = 30_000  # the store's connections' (sqlite.BUSY_TIMEOUT_S), set back after
# Free pages kept for the next writes (which would otherwise grow the file straight back):
# at least this many, and this fraction of the file.
KEEP_FREE_PAGES = 64  # 1 MiB of 16 KiB pages
KEEP_FREE_DIVISOR = 20  # 5%
MS_BYTE_FLAG = 0xF0  # a qualifier byte at or above it starts a 4-byte (millisecond) qualifier

Transaction = Callable[[], AbstractContextManager[sqlite3.Connection]]
_told: set[str] = set()  # files whose missing auto-vacuum was logged by this process


def count_points(qualifier: bytes) -> int:
    """Data points named by a compacted qualifier: 2 bytes per second, 4 per millisecond."""
    points = at = 0
    while at < len(qualifier):
        at += 4 if qualifier[at] >= MS_BYTE_FLAG else 2
        points += 1
    return points


# One SQL pass over the data table: a single-point cell is 1 without a Python call; only
# compacted qualifiers (a few per hour row) go through count_points. Odd lengths are
# annotations and appended columns.
_POINTS = ("SELECT coalesce(sum(CASE WHEN z & 2 THEN tsd_points(tsd_unpack_qualifier(qualifier))"
           " WHEN length(qualifier) = 2 THEN 1"
           " WHEN length(qualifier) % 2 = 1 THEN 0"
           " WHEN length(qualifier) = 4 AND substr(qualifier, 1, 1) >= x'F0' THEN 1"
           " ELSE tsd_points(qualifier) END), 0)"
           " FROM cells WHERE tbl = ? AND family = 't'")


def store_space(db: sqlite3.Connection, path: str, data_table: str) -> StoreSpace:
    """What :class:`StoreSpace` says of the file at ``path``, read on ``db``."""
    def pragma(name: str) -> int:
        return int(db.execute(f"PRAGMA {name}").fetchone()[0])

    wal_bytes = _size(path + "-wal")
    points = int(db.execute(_POINTS, (data_table,)).fetchone()[0])
    return StoreSpace(file_bytes=_size(path) + wal_bytes, wal_bytes=wal_bytes,
                      page_size_bytes=pragma("page_size"), pages=pragma("page_count"),
                      free_pages=pragma("freelist_count"), points=points,
                      auto_vacuum=pragma("auto_vacuum") == AUTO_VACUUM_INCREMENTAL)


def release_free_pages(db: sqlite3.Connection, run_script: Callable[[str], None]) -> int:
    """Release the free pages beyond the reserve (``PRAGMA incremental_vacuum``, run by
    ``run_script`` under the write lock); how many. Three cheap look-ups when there is
    nothing to release."""
    if int(db.execute("PRAGMA auto_vacuum").fetchone()[0]) != AUTO_VACUUM_INCREMENTAL:
        return 0
    pages = int(db.execute("PRAGMA page_count").fetchone()[0])
    keep = max(KEEP_FREE_PAGES, pages // KEEP_FREE_DIVISOR)
    free = int(db.execute("PRAGMA freelist_count").fetchone()[0])
    if free < 2 * keep:  # not after every delete: compaction frees a page or two each
        return 0
    # The pragma frees a page per step of its statement, and sqlite3's execute() steps a
    # statement without result columns once: a script runs it to the end. The checkpoint
    # then moves the truncation into the file and empties the WAL, unless a reader holds
    # it: without waiting for one (busy_timeout 0), as the write lock is held meanwhile.
    run_script(f"PRAGMA incremental_vacuum({free - keep}); PRAGMA busy_timeout=0;"
               f" PRAGMA wal_checkpoint(TRUNCATE); PRAGMA busy_timeout={BUSY_TIMEOUT_MS};")
    return free - keep


def add_packed_flag(db: sqlite3.Connection, transaction: Transaction) -> None:
    """Give a store an older pytsd made the ``z`` column (packed values, sqlite_pack.py):
    its rows read as not packed, as they are. Also says, once per file, when the file does
    not give freed pages back (auto-vacuum off) and how to turn it on."""
    if "z" not in _columns(db):
        with transaction() as writer:
            if "z" not in _columns(writer):  # another process did it meanwhile
                writer.execute("ALTER TABLE cells ADD COLUMN z INTEGER")
    path = db.execute("PRAGMA database_list").fetchone()[2]
    vacuum = int(db.execute("PRAGMA auto_vacuum").fetchone()[0])
    if vacuum != AUTO_VACUUM_INCREMENTAL and path not in _told:
        _told.add(path)
        log.warning("The embedded store %s was made without incremental auto-vacuum: space "
                    "freed by compaction is reused but never given back. Run `pytsd vacuum` "
                    "once (the server stopped; it needs about the file's size free on disk) "
                    "to turn it on.", path)


def _columns(db: sqlite3.Connection) -> set[str]:
    return {row[1] for row in db.execute("PRAGMA table_info(cells)")}


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
