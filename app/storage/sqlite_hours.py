"""Hour columns: a columnar form of a closed hour's rows (every series of one metric in one salt
bucket), kept beside their cells as ONE blob per hour, and dropped the moment a cell of the
hour changes.

What a blob holds is the caller's (``app.tsdb.read.hour_blob``: the hour's rows decoded). The
store keeps it under the hour's key prefix (salt, metric, base time), so a day of a metric is
24 SQL rows per salt bucket, not 24,000 (docs/performance.md, "Cold raw reads from hour
columns").

Why a kept blob is never stale: before the first blob of a table is put, triggers on ``cells``
are created that delete the blob of a cell's hour whenever a cell is inserted, updated or
deleted, by any process or path (the staging merges, appends, compaction, deletes, an older
pytsd); where no blob is kept that costs one index probe per cell written. A put happens in a
write transaction that first compares the hour's stamp (its cells and their newest write time)
with the one its cells were read under, so a write between the read and the put leaves the
hour without a blob. The cells stay the one truth: ``pytsd cells``, scans and exports never
read this table.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from app.storage.base import HourPut, prefix_stop

SCHEMA = """
CREATE TABLE IF NOT EXISTS hour_columns (
    tbl TEXT NOT NULL, hour BLOB NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (tbl, hour)
) WITHOUT ROWID;
"""


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _triggers(table: str, prefix_bytes: int) -> list[str]:
    """The three triggers that drop the blob of a changed cell's hour (``prefix_bytes``: the
    length of an hour's key prefix in ``table``)."""
    name = f"{table.encode().hex()}_{prefix_bytes}"
    literal = _literal(table)
    return [f"CREATE TRIGGER IF NOT EXISTS hour_columns_{event.lower()}_{name} AFTER {event}"
            f" ON cells WHEN {row}.tbl = {literal} BEGIN DELETE FROM hour_columns"
            f" WHERE tbl = {row}.tbl AND hour = substr({row}.row, 1, {prefix_bytes}); END"
            for event, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD"))]


def prefixes(db: sqlite3.Connection, table: str, ranges: Sequence[tuple[bytes, bytes]]
             ) -> list[bytes]:
    """The prefixes of the kept hours in ``ranges``, in order."""
    return [hour for start, stop in ranges for (hour,) in db.execute(
        "SELECT hour FROM hour_columns WHERE tbl = ? AND hour >= ? AND hour < ? ORDER BY hour",
        (table, start, stop))]


def blob(db: sqlite3.Connection, table: str, prefix: bytes) -> bytes | None:
    """The kept blob of one hour, if any."""
    found = db.execute("SELECT data FROM hour_columns WHERE tbl = ? AND hour = ?",
                       (table, prefix)).fetchone()
    return None if found is None else bytes(found[0])


def hour_stamp(db: sqlite3.Connection, table: str, prefix: bytes) -> tuple[int, int]:
    """``(cells, newest write time)`` of the hour's data cells (the ``cells_stamp`` index)."""
    stop = prefix_stop(prefix)
    bound = " AND row < ?" if stop is not None else ""
    count, newest = db.execute(
        "SELECT count(*), max(ts) FROM cells WHERE tbl = ? AND row >= ?" + bound
        + " AND family = 't'", [table, prefix, *([stop] if stop is not None else [])]
    ).fetchone()
    return int(count), int(newest or 0)


def put(db: sqlite3.Connection, table: str, prefix_bytes: int,
        hours: Sequence[HourPut]) -> int:
    """Keep each hour's blob if its cells are still those it was made from (in the caller's
    write transaction); the hours kept."""
    for statement in _triggers(table, prefix_bytes):
        db.execute(statement)
    kept = 0
    for hour in hours:
        if len(hour.prefix) != prefix_bytes or hour_stamp(db, table, hour.prefix) != hour.stamp:
            continue  # written since it was read
        db.execute("INSERT OR REPLACE INTO hour_columns VALUES (?, ?, ?)",
                   (table, hour.prefix, hour.data))
        kept += 1
    return kept


def stored_bytes(db: sqlite3.Connection, table: str) -> tuple[int, int]:
    """``(hours, bytes of their blobs)`` kept for ``table``."""
    hours, size = db.execute("SELECT count(*), sum(length(data)) FROM hour_columns"
                             " WHERE tbl = ?", (table,)).fetchone()
    return int(hours), int(size or 0)
