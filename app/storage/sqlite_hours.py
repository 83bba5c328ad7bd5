"""Hour columns: a columnar form of a closed hour's rows (every series of one metric in one salt
bucket), kept beside their cells as ONE blob per hour, and dropped the moment a cell of the
hour changes.

What a blob holds is ``app.storage.hour_blob``'s (the hour's rows decoded). The
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

One copy (``tsd.storage.sqlite.one_copy``, ``hour_values``): a kept blob then also holds the
values of its hour's cells, which keep only their keys (:func:`strip_kept`, run by the
server's background work, ``app.tsdb.hour_strip``, never by a read; only where the blob gives
back a cell's very bytes). The blob is then that hour's storage: the triggers give every
such cell its value back before they drop it (:func:`_value_triggers`), and a blob that holds
values cannot be deleted, changed or replaced. The scans read such a cell's value from the
blob, so ``pytsd cells``, scans and exports still give OpenTSDB's bytes.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Sequence

from app.storage import hour_blob, hour_values
from app.storage.base import HourPut, prefix_stop
from app.storage.sqlite_pack import (
    float_widths,
    pack,
    pack_plain,
    unpack_many,
    unpack_qualifier,
    unpack_qualifiers,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS hour_columns (
    tbl TEXT NOT NULL, hour BLOB NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (tbl, hour)
) WITHOUT ROWID;
"""


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _triggers(table: str, prefix_bytes: int, one_copy: bool) -> list[str]:
    """The three triggers that drop the blob of a changed cell's hour (``prefix_bytes``: the
    length of an hour's key prefix in ``table``); ``one_copy``: those that first make the
    hour's cells whole from it (:func:`_value_triggers`)."""
    name = f"{table.encode().hex()}_{prefix_bytes}"
    literal = _literal(table)
    if one_copy:
        return _value_triggers(name, literal, prefix_bytes)
    return [f"CREATE TRIGGER IF NOT EXISTS hour_columns_{event.lower()}_{name} AFTER {event}"
            f" ON cells WHEN {row}.tbl = {literal} BEGIN DELETE FROM hour_columns"
            f" WHERE tbl = {row}.tbl AND hour = substr({row}.row, 1, {prefix_bytes}); END"
            for event, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD"))]


# The rows of an hour: its prefix, then at most this many bytes (a row key longer than that
# keeps its values: ``strip``), so one index range holds them all.
ROW_TAIL_MAX_BYTES = 255
_HOUR_END = "x'" + "FF" * ROW_TAIL_MAX_BYTES + "'"


def _value_triggers(name: str, literal: str, prefix_bytes: int) -> list[str]:
    """:func:`_triggers` of a table whose hours may keep their cells' values in their blob
    (one copy): before the blob of a changed cell's hour is dropped, every cell of the hour
    whose value is in it gets its value back (packed, as compaction left it), in the same
    statement; the trigger's own updates (``z & RESTORING``) do not fire it again. They keep
    the names older pytsd creates its triggers under (``IF NOT EXISTS``), so an older pytsd
    does not put back triggers that only drop the blob. And a blob whose hour's cells need
    it cannot be deleted, changed or replaced."""
    flag, restoring = hour_values.HOUR_VALUE, hour_values.RESTORING
    out = []
    for event, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")):
        hour = f"substr({row}.row, 1, {prefix_bytes})"
        kept = f"(SELECT data FROM hour_columns WHERE tbl = {row}.tbl AND hour = {hour})"
        rows = (f"tbl = {row}.tbl AND row >= {hour}"
                f" AND row <= CAST({hour} || {_HOUR_END} AS BLOB) AND family = 't'")
        when = f"{row}.tbl = {literal}"
        if event == "UPDATE":
            when += (f" AND NOT (coalesce(NEW.z, 0) & {restoring})"
                     f" AND NOT (coalesce(OLD.z, 0) & {restoring})")
        out.append(
            f"CREATE TRIGGER hour_columns_{event.lower()}_{name} AFTER {event} ON cells"
            f" WHEN {when} AND {kept} IS NOT NULL BEGIN"
            f" UPDATE cells SET value = tsd_restore({kept}, row, qualifier, z, value),"
            f" z = (z & 2) | 1 | {restoring} WHERE {rows} AND z & {flag};"
            f" DELETE FROM hour_columns WHERE tbl = {row}.tbl AND hour = {hour};"
            f" UPDATE cells SET z = z & 3 WHERE {rows} AND z & {restoring}; END")
    for event, row in (("INSERT", "NEW"), ("UPDATE", "OLD"), ("DELETE", "OLD")):
        when = f"{row}.tbl = {literal}"
        if event == "INSERT":  # a first blob of an hour is put after its cells are stripped
            when += (" AND EXISTS (SELECT 1 FROM hour_columns WHERE tbl = NEW.tbl"
                     " AND hour = NEW.hour)")
        out.append(
            f"CREATE TRIGGER hour_columns_keep_{event.lower()}_{name} BEFORE {event}"
            f" ON hour_columns WHEN {when} AND EXISTS (SELECT 1 FROM cells"
            f" WHERE tbl = {row}.tbl AND row >= {row}.hour"
            f" AND row <= CAST({row}.hour || {_HOUR_END} AS BLOB)"
            f" AND family = 't' AND z & {flag}) BEGIN SELECT RAISE(ABORT,"
            " 'an hour column holds its cells'' values: write its cells instead'); END")
    return out


def _use_value_triggers(db: sqlite3.Connection, table: str, prefix_bytes: int) -> None:
    """Replace the table's triggers that only drop a blob by :func:`_value_triggers`."""
    wanted = _triggers(table, prefix_bytes, one_copy=True)
    for statement in wanted:
        name = statement.split()[2]
        found = db.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?",
                           (name,)).fetchone()
        if found is not None and found[0] == statement:
            continue
        db.execute(f"DROP TRIGGER IF EXISTS {name}")
        db.execute(statement)


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
    write transaction); the hours kept. A read puts them: its cells keep their values here
    (the background work strips them later, :func:`strip_kept`), so a read stays cheap."""
    for statement in _triggers(table, prefix_bytes, one_copy=False):
        db.execute(statement)  # IF NOT EXISTS: a table's value triggers stay
    kept = 0
    for hour in hours:
        if len(hour.prefix) != prefix_bytes or hour_stamp(db, table, hour.prefix) != hour.stamp:
            continue  # written since it was read
        if _holds_values(db, table, hour.prefix):
            continue  # its blob is its cells' values: it stays as it is
        db.execute("INSERT OR REPLACE INTO hour_columns VALUES (?, ?, ?)",
                   (table, hour.prefix, hour.data))
        kept += 1
    return kept


def unstripped(db: sqlite3.Connection, table: str, after: bytes, most: int) -> list[bytes]:
    """Up to ``most`` prefixes, after ``after`` and in order, of the kept hours none of whose
    cells has given its value to the blob yet (:func:`strip_kept`'s work)."""
    return [hour for (hour,) in db.execute(
        "SELECT hour FROM hour_columns AS h WHERE tbl = ? AND hour > ? AND NOT EXISTS"
        " (SELECT 1 FROM cells WHERE tbl = h.tbl AND row >= h.hour"
        f" AND row <= CAST(h.hour || {_HOUR_END} AS BLOB) AND family = 't'"
        f" AND z & {hour_values.HOUR_VALUE}) ORDER BY hour LIMIT ?", (table, after, most))]


def strip_kept(db: sqlite3.Connection, table: str, prefix: bytes) -> int:
    """One copy of a kept hour (in the caller's write transaction): its cells give their
    values to its blob (:func:`strip`); the cells stripped. The blob is taken away while the
    cells are rewritten (so the triggers do not drop it for their change) and put back, the
    same bytes: the triggers keep a kept blob current, so it is its cells' truth."""
    data = blob(db, table, prefix)
    if data is None or _holds_values(db, table, prefix):
        return 0  # dropped since it was found, or stripped by another process
    _use_value_triggers(db, table, len(prefix))
    db.execute("DELETE FROM hour_columns WHERE tbl = ? AND hour = ?", (table, prefix))
    stripped = strip(db, table, prefix, data)
    db.execute("INSERT INTO hour_columns VALUES (?, ?, ?)", (table, prefix, data))
    return stripped


def _hour_rows(prefix: bytes) -> tuple[bytes, bytes]:
    """The bounds (both included) of the rows of the hour of ``prefix`` that may hold their
    values in its blob."""
    return prefix, prefix + b"\xff" * ROW_TAIL_MAX_BYTES


def _holds_values(db: sqlite3.Connection, table: str, prefix: bytes) -> bool:
    return db.execute(
        "SELECT 1 FROM cells WHERE tbl = ? AND row >= ? AND row <= ? AND family = 't'"
        f" AND z & {hour_values.HOUR_VALUE} LIMIT 1", (table, *_hour_rows(prefix))
    ).fetchone() is not None


def strip(db: sqlite3.Connection, table: str, prefix: bytes, blob: bytes) -> int:
    """Drop the value of every data cell of the hour that ``blob`` (about to be kept for it,
    with the value triggers on) gives back byte for byte (``hour_values``); the cells
    stripped. Each is deleted and inserted again: SQLite merges pages a delete leaves
    underfull, not those an update does (which would keep the bytes' pages in use)."""
    try:
        rows = hour_blob.BlobRows(blob)
    except ValueError:  # not a blob it can read: no value is dropped
        return 0
    flag = hour_values.HOUR_VALUE | 1 | len(prefix) << hour_values.PREFIX_SHIFT
    found = [cell for cell in db.execute(
        "SELECT row, qualifier, value, ts, coalesce(z, 0) FROM cells WHERE tbl = ?"
        " AND row >= ? AND row <= ? AND family = 't'", (table, *_hour_rows(prefix)))
        if not cell[4] & hour_values.HOUR_VALUE]
    packed = [at for at, cell in enumerate(found) if cell[4] & 1]
    keyed = [at for at, cell in enumerate(found) if cell[4] & 2]
    raws = [cell[2] for cell in found]
    qualifiers = [cell[1] for cell in found]
    try:
        for at, raw in zip(packed, unpack_many([found[at][2] for at in packed])):
            raws[at] = raw
        for at, qualifier in zip(keyed, unpack_qualifiers([found[at][1] for at in keyed])):
            qualifiers[at] = qualifier
    except (ValueError, zlib.error):  # a cell no read could give either: the hour as it is
        return 0
    updates = []
    for (row, stored_qualifier, value, ts, z), raw, qualifier in zip(found, raws, qualifiers):
        size = hour_values.points_bytes(qualifier)
        if size is None or not 0 <= len(raw) - size <= hour_values.MAX_TAIL_BYTES:
            continue
        stored = hour_values.marker(len(raw), raw[size:])
        if len(stored) >= len(value):
            continue
        # What every read makes of the marker (``cell_value``), checked: the very bytes.
        if _made_again(rows, row, qualifier, stored) != raw:
            continue
        updates.append((table, row, stored_qualifier, stored, ts, flag | (z & 2)))
    db.executemany("DELETE FROM cells WHERE tbl = ? AND row = ? AND family = 't'"
                   " AND qualifier = ?", [update[:3] for update in updates])
    db.executemany("INSERT INTO cells (tbl, row, family, qualifier, value, ts, z)"
                   " VALUES (?, ?, 't', ?, ?, ?, ?)", updates)
    return len(updates)


def stored_bytes(db: sqlite3.Connection, table: str) -> tuple[int, int]:
    """``(hours, bytes of their blobs)`` kept for ``table``."""
    hours, size = db.execute("SELECT count(*), sum(length(data)) FROM hour_columns"
                             " WHERE tbl = ?", (table,)).fetchone()
    return int(hours), int(size or 0)


def _made_again(rows: hour_blob.BlobRows, row: bytes, qualifier: bytes, stored: bytes
                ) -> bytes | None:
    try:
        return hour_values.cell_value(rows, row, qualifier, stored)
    except ValueError:
        return None


def cell_value(blob: bytes | None, row: bytes, qualifier: bytes, z: int, stored: bytes) -> bytes:
    """The value of a cell whose value is in its hour's ``blob`` (``tsd_hour_value``), from
    the cell as stored (its qualifier may be a short key)."""
    return hour_values.cell_value(
        blob, bytes(row), unpack_qualifier(qualifier) if z & 2 else bytes(qualifier), stored)


def restored(blob: bytes | None, row: bytes, qualifier: bytes, z: int, stored: bytes) -> bytes:
    """What a cell whose value is in ``blob`` stores again when its hour changes
    (``tsd_restore``): its value, packed (``z & 1``) as compaction packs it."""
    value = cell_value(blob, row, qualifier, z, stored)
    return (pack(value, float_widths(unpack_qualifier(qualifier) if z & 2 else qualifier))
            or pack_plain(value))
