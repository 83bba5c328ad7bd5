"""Row columns: a columnar form of a table's rows that the embedded store keeps beside their
cells, and forgets the moment a cell of the row changes.

What the columns hold is the caller's (``app.tsdb.rollup_rows``: a rollup row's cells of one
aggregate decoded, offsets, doubles and integer flags, in one byte string). The store keeps
one blob per ``(table, part, row)`` and returns a whole key range's blobs of a part as ONE
concatenation (``group_concat`` in SQL): a range of 24,000 rows costs SQLite's B-tree steps
and one Python object, not a tuple per cell or per row (docs/performance.md, "Cold rollup
reads from row columns").

Why a kept part is never stale: the first use of a table creates triggers on ``cells`` that
mark a row *dirty* (``row_columns_dirty``, with a generation that goes up) whenever a cell of
it is inserted, updated or deleted, by any process or path (the staging merges, appends,
deletes, an older pytsd); every row that existed then is marked too. A read ignores the parts
of dirty rows and lists them instead; a put makes a row current only if its generation is
still the one read with its cells (a write in between leaves it dirty). The cells stay the
one truth: ``pytsd cells``, scans and exports never read these tables.

Blocks: a key range's rows of a part (a rollup table's rows of every series of a metric over a
few row spans) kept once more as ONE blob in the caller's coarser form
(``app.tsdb.read.rollup_blocks``): read as one B-tree entry, not one per row, without
``group_concat``'s copies. A block is put only while no row of its range is dirty, from the
rows' current parts, and a trigger drops it the moment any row of its range is marked dirty
(a cell inserted, updated or deleted there, by any path, process or version: the mark is the
cells' triggers'). Blocks of a table never overlap (a put drops any it overlaps), so the block
holding a row is the one with the greatest start at or below it: one seek in
``row_column_blocks`` (the ranges alone: a seek there never walks a blob's overflow pages,
which made each mark cost ~0.5 ms with the blobs in the same table); the blobs are in
``row_column_block_data``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from app.storage.base import ColumnsPut, ColumnsRead

# The start of the block holding NEW.row (NULL: none): the one with the greatest start at or
# below it, if it ends after it (blocks never overlap); one index seek.
_HOLDING = ("(SELECT start FROM (SELECT start, stop FROM row_column_blocks WHERE tbl = NEW.tbl"
            " AND start <= NEW.row ORDER BY start DESC LIMIT 1) WHERE stop > NEW.row)")
SCHEMA = """
CREATE TABLE IF NOT EXISTS row_columns (
    tbl TEXT NOT NULL, part INTEGER NOT NULL, row BLOB NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (tbl, part, row)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS row_columns_dirty (
    tbl TEXT NOT NULL, row BLOB NOT NULL, generation INTEGER NOT NULL,
    PRIMARY KEY (tbl, row)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS row_columns_tables (tbl TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS row_column_blocks (
    tbl TEXT NOT NULL, start BLOB NOT NULL, stop BLOB NOT NULL,
    PRIMARY KEY (tbl, start)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS row_column_block_data (
    tbl TEXT NOT NULL, start BLOB NOT NULL, part INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (tbl, start, part)
) WITHOUT ROWID;
""" + "".join(
    # The ranges apart from the blobs: the trigger's seek never walks a blob's pages.
    f"CREATE TRIGGER IF NOT EXISTS row_column_blocks_{event.lower()} AFTER {event}"
    " ON row_columns_dirty BEGIN"
    f" DELETE FROM row_column_block_data WHERE tbl = NEW.tbl AND start = {_HOLDING};"
    f" DELETE FROM row_column_blocks WHERE tbl = NEW.tbl AND start = {_HOLDING}; END;\n"
    for event in ("INSERT", "UPDATE"))
# Up to this many dirty rows of a range are left out of its parts by key; more, by a look-up
# per row (which costs about a third of the read).
FEW_DIRTY_ROWS = 256
Transaction = Callable[[], AbstractContextManager[sqlite3.Connection]]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _triggers(table: str) -> str:
    """The three triggers that mark a row of ``table`` dirty on any change of its cells."""
    name = table.encode().hex()
    mark = ("INSERT OR IGNORE INTO row_columns_dirty VALUES ({x}.tbl, {x}.row, 0);"
            " UPDATE row_columns_dirty SET generation = generation + 1"
            " WHERE tbl = {x}.tbl AND row = {x}.row;")
    literal = _literal(table)
    return "".join(
        f"CREATE TRIGGER IF NOT EXISTS row_columns_{event.lower()}_{name} AFTER {event} ON cells"
        f" WHEN {row}.tbl = {literal} BEGIN {mark.format(x=row)} END;"
        for event, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")))


def enable(db: sqlite3.Connection, table: str) -> None:
    """Start keeping columns for ``table`` (in the caller's write transaction): the triggers,
    and every row it has marked dirty (a loose scan of its keys: two index seeks per row)."""
    if db.execute("SELECT 1 FROM row_columns_tables WHERE tbl = ?", (table,)).fetchone():
        return
    for statement in _triggers(table).split("END;"):
        if statement.strip():
            db.execute(statement + "END;")
    db.execute(
        "WITH RECURSIVE keys(row) AS ("
        " SELECT (SELECT row FROM cells WHERE tbl = ?1 ORDER BY tbl, row LIMIT 1)"
        " UNION ALL SELECT (SELECT row FROM cells WHERE tbl = ?1 AND row > keys.row"
        " ORDER BY tbl, row LIMIT 1) FROM keys WHERE keys.row IS NOT NULL)"
        " INSERT OR IGNORE INTO row_columns_dirty SELECT ?1, row, 0 FROM keys"
        " WHERE row IS NOT NULL", (table,))
    db.execute("INSERT INTO row_columns_tables VALUES (?)", (table,))


def enabled(db: sqlite3.Connection, table: str) -> bool:
    return db.execute("SELECT 1 FROM row_columns_tables WHERE tbl = ?",
                      (table,)).fetchone() is not None


def scan(db: sqlite3.Connection, table: str, ranges: Sequence[tuple[bytes, bytes | None]],
         parts: Sequence[int], blocks: Sequence[tuple[bytes, bytes]] = ()) -> ColumnsRead:
    """The kept blocks of ``blocks`` (those kept for every part), the kept parts of the
    current rows of ``ranges`` and of the blocks not kept (one statement per part and range),
    and the dirty rows with their generations: all in one read transaction (one snapshot)."""
    joined: dict[int, list[bytes]] = {part: [] for part in parts}
    kept: dict[int, list[bytes]] = {part: [] for part in parts}
    unbuilt: list[tuple[bytes, bytes]] = []
    dirty: list[tuple[bytes, int]] = []
    own = not db.in_transaction
    if own:
        db.execute("BEGIN")
    try:
        found_blocks = _blocks(db, table, blocks, parts)
        for block_range in blocks:
            block = found_blocks.get(block_range, {})
            if all(part in block for part in parts):
                for part in parts:
                    kept[part].append(block[part])
            else:
                unbuilt.append(block_range)
        row_ranges: list[tuple[bytes, bytes | None]] = [*ranges, *unbuilt]
        for start, stop in row_ranges:
            bound, args = _bound(start, stop)
            found = db.execute("SELECT row, generation FROM row_columns_dirty"
                               " WHERE tbl = ? AND row >= ?" + bound + " ORDER BY row",
                               [table, *args]).fetchall()
            dirty += found
            if len(found) <= FEW_DIRTY_ROWS:
                skip = " AND row NOT IN (" + ", ".join("?" * len(found)) + ")" if found else ""
                skip_args = [row for row, _ in found]
            else:
                skip = (" AND NOT EXISTS (SELECT 1 FROM row_columns_dirty AS d"
                        " WHERE d.tbl = c.tbl AND d.row = c.row)")
                skip_args = []
            for part in parts:
                (blob,) = db.execute(
                    "SELECT CAST(group_concat(data, x'') AS BLOB) FROM row_columns AS c"
                    " WHERE tbl = ? AND part = ? AND row >= ?" + bound + skip,
                    [table, part, *args, *skip_args]).fetchone()
                if blob is not None:
                    joined[part].append(blob)
    finally:
        if own:
            db.execute("COMMIT")
    return ColumnsRead(dirty, {part: b"".join(found) for part, found in joined.items()},
                       kept if blocks else {}, unbuilt)


def _blocks(db: sqlite3.Connection, table: str, blocks: Sequence[tuple[bytes, bytes]],
            parts: Sequence[int]) -> dict[tuple[bytes, bytes], dict[int, bytes]]:
    """The kept blocks of ``blocks`` by range and part (of ``parts``): one statement per run
    of adjacent ranges (a read's whole blocks are one run per key range)."""
    runs: list[list[bytes]] = []
    for start, stop in blocks:
        if runs and runs[-1][1] == start:
            runs[-1][1] = stop
        else:
            runs.append([start, stop])
    found: dict[tuple[bytes, bytes], dict[int, bytes]] = {}
    for first, last in runs:
        for start, stop, part, data in db.execute(
                "SELECT b.start, b.stop, d.part, d.data FROM row_column_blocks AS b"
                " JOIN row_column_block_data AS d ON d.tbl = b.tbl AND d.start = b.start"
                " WHERE b.tbl = ? AND b.start >= ? AND b.start < ? AND d.part IN ("
                + ", ".join("?" * len(parts)) + ")", (table, first, last, *parts)):
            found.setdefault((start, stop), {})[part] = data
    return found


def _bound(start: bytes, stop: bytes | None) -> tuple[str, list[object]]:
    if stop is None:
        return "", [start]
    return " AND row < ?", [start, stop]


def put(db: sqlite3.Connection, table: str, rows: Sequence[ColumnsPut]) -> int:
    """Replace the parts of each row still at the generation read, and mark it current (in
    the caller's write transaction); the rows made current."""
    known = [part for (part,) in db.execute(
        "SELECT DISTINCT part FROM row_columns WHERE tbl = ?", (table,))]
    current = 0
    for entry in rows:
        found = db.execute("SELECT generation FROM row_columns_dirty WHERE tbl = ? AND row = ?",
                           (table, entry.row)).fetchone()
        if found is None or found[0] != entry.generation:
            continue  # written since it was read (or current already)
        db.executemany("DELETE FROM row_columns WHERE tbl = ? AND part = ? AND row = ?",
                       [(table, part, entry.row) for part in known])
        db.executemany("INSERT INTO row_columns VALUES (?, ?, ?, ?)",
                       [(table, part, entry.row, data) for part, data in entry.parts])
        db.execute("DELETE FROM row_columns_dirty WHERE tbl = ? AND row = ?",
                   (table, entry.row))
        current += 1
    return current


def put_blocks(db: sqlite3.Connection, table: str, blocks: Sequence[tuple[bytes, bytes]],
               parts: Sequence[int], encode: Callable[[bytes], bytes | None]) -> int:
    """Keep each block range's parts as one block each (in the caller's write transaction),
    where no row of the range is dirty and ``encode`` takes every part; the blocks kept."""
    if not enabled(db, table):
        return 0  # nothing marks its rows dirty yet
    built = 0
    for start, stop in blocks:
        if db.execute("SELECT 1 FROM row_columns_dirty WHERE tbl = ? AND row >= ? AND row < ?"
                      " LIMIT 1", (table, start, stop)).fetchone():
            continue
        data = []
        for part in parts:
            (blob,) = db.execute(
                "SELECT CAST(group_concat(data, x'') AS BLOB) FROM row_columns"
                " WHERE tbl = ? AND part = ? AND row >= ? AND row < ?",
                (table, part, start, stop)).fetchone()
            encoded = encode(blob or b"")
            if encoded is None:
                break
            data.append((table, start, part, encoded))
        else:
            # Never two blocks over one row (another range's, or another block size's).
            for (other,) in db.execute(
                    "SELECT start FROM row_column_blocks WHERE tbl = ? AND start < ?"
                    " AND stop > ? AND NOT (start = ? AND stop = ?)",
                    (table, stop, start, start, stop)).fetchall():
                db.execute("DELETE FROM row_column_block_data WHERE tbl = ? AND start = ?",
                           (table, other))
                db.execute("DELETE FROM row_column_blocks WHERE tbl = ? AND start = ?",
                           (table, other))
            db.execute("INSERT OR REPLACE INTO row_column_blocks VALUES (?, ?, ?)",
                       (table, start, stop))
            db.executemany("INSERT OR REPLACE INTO row_column_block_data VALUES (?, ?, ?, ?)",
                           data)
            built += 1
    return built
