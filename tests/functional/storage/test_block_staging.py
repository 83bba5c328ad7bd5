"""Blocks of data cells (``put_block``, sqlite_block.py): staged as one row without a Python
object per cell, merged compacted per row (``sqlite_merge.MergeChunk``)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from app.storage import sqlite_write
from app.storage.base import CellBlock
from app.storage.codec import compact_cells
from app.storage.sqlite import SqliteStore, SqliteTable

ROOT = Path(__file__).resolve().parents[3]


def block(rows: list[bytes], cells: list[tuple[int, bytes, bytes]]) -> CellBlock:
    """A block of ``(row index, qualifier, value)`` cells, in this order."""
    return CellBlock.of_cells(rows, [c[0] for c in cells], [c[1] for c in cells],
                              [c[2] for c in cells])


def staged_batches(path: Path) -> list[tuple[int, bool]]:
    """``(cells, is a block)`` of each staged batch, read past the store (no merge)."""
    with sqlite3.connect(path) as db:
        return [(cells, index is not None) for cells, index in db.execute(
            "SELECT cells, cell_index FROM staged_batches ORDER BY seq")]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "s.db"


@pytest.fixture
def table(path: Path) -> SqliteTable:
    store = SqliteStore(path)
    store.create_table("tsdb", {"t": {}})
    return store.table("tsdb")


ROWS = [b"\x00\x00\x01\x65\x53\xf1\x00\x00\x00\x01\x00\x00\x01",
        b"\x00\x00\x01\x65\x53\xff\x10\x00\x00\x01\x00\x00\x02"]
CELLS = [(0, b"\x00\x00", b"\x01"), (1, b"\x00\x11", b"\x00\x02"),
         (0, b"\x00\x1b", b"\x40\x49\x0f\xdb"),
         (1, b"\xf0\x00\x03\xe7", b"\x00\x00\x00\x00\x00\x01\x00\x00")]


def test_a_block_is_staged_as_one_row_and_reads_as_its_cells(path: Path,
                                                            table: SqliteTable) -> None:
    table.put_block(block(ROWS, CELLS))
    assert staged_batches(path) == [(4, True)]
    with sqlite3.connect(path) as db:
        records, _ = sqlite_write.staged_records(db)
    assert [record[1:5] for record in records] == [
        (ROWS[0], "t", b"\x00\x00", b"\x01"), (ROWS[1], "t", b"\x00\x11", b"\x00\x02"),
        (ROWS[0], "t", b"\x00\x1b", b"\x40\x49\x0f\xdb"),
        (ROWS[1], "t", b"\xf0\x00\x03\xe7", b"\x00\x00\x00\x00\x00\x01\x00\x00")]
    # Another connection merges: each row's points as one compacted cell, in time order
    # (15 ms before 1 s), the meta byte last (1: seconds and milliseconds mixed).
    assert list(SqliteStore(path).table("tsdb").scan()) == [
        (ROWS[0], {b"t:\x00\x00\x00\x1b": b"\x01\x40\x49\x0f\xdb\x00"}),
        (ROWS[1], {b"t:\xf0\x00\x03\xe7\x00\x11":
                   b"\x00\x00\x00\x00\x00\x01\x00\x00\x00\x02\x01"})]
    assert staged_batches(path) == []


def test_a_block_stores_the_column_compaction_makes_of_what_put_many_stores(
        tmp_path: Path) -> None:
    tables = []
    for name in ("block", "puts"):
        store = SqliteStore(tmp_path / f"{name}.db")
        store.create_table("tsdb", {"t": {}})
        tables.append(store.table("tsdb"))
    cells = block(ROWS, CELLS)
    tables[0].put_block(cells)
    tables[1].put_many(cells.puts())  # HBase's put: its cells as they were put
    blocks, puts = (list(t.scan()) for t in tables)
    assert [row for row, _ in puts] == [row for row, _ in blocks] == ROWS
    for (_, compacted), (_, singles) in zip(blocks, puts):
        assert len(singles) == 2
        qualifier, value = compact_cells((c[2:], v) for c, v in singles.items())
        assert compacted == {b"t:" + qualifier: value}
    stamps = [[(row, n) for row, n, _ in t.scan_stamps(b"", None, "t")] for t in tables]
    assert stamps == [[(ROWS[0], 1), (ROWS[1], 1)], [(ROWS[0], 2), (ROWS[1], 2)]]


def test_the_later_write_of_a_cell_wins_inside_a_block_and_across_writes(
        table: SqliteTable) -> None:
    table.put_many([(ROWS[0], {b"t:\x00\x00": b"\x07", b"t:\x00\x10": b"\x08"})])
    table.put_block(block(ROWS, [(0, b"\x00\x00", b"\x01"), (0, b"\x00\x00", b"\x02")]))
    table.put_many([(ROWS[0], {b"t:\x00\x10": b"\x09"})])  # a put_many batch after it
    table.put_block(block(ROWS, [(1, b"\x00\x00", b"\x03")]))
    table.put_block(block(ROWS, [(1, b"\x00\x00", b"\x04")]))
    assert list(table.scan()) == [(ROWS[0], {b"t:\x00\x00": b"\x02", b"t:\x00\x10": b"\x09"}),
                                  (ROWS[1], {b"t:\x00\x00": b"\x04"})]


def test_each_cell_of_a_block_keeps_the_time_it_was_staged_at(table: SqliteTable) -> None:
    table.put_block(block(ROWS, [(0, b"\x00\x00", b"\x01")]))
    first = table.row_write_times(ROWS[0])[b"t:\x00\x00"]
    table.put_block(block(ROWS, [(0, b"\x00\x10", b"\x01")]))
    times = table.row_write_times(ROWS[0])
    assert times[b"t:\x00\x00"] == first <= times[b"t:\x00\x10"]
    table.delete(ROWS[0], up_to_ms=first)  # compaction's delete: the later cell stays
    assert table.row(ROWS[0]) == {b"t:\x00\x10": b"\x01"}


def test_a_merge_in_chunks_keeps_the_order_of_blocks_and_batches(
        path: Path, table: SqliteTable, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_write, "MERGE_CHUNK_CELLS", 3)
    for n in range(6):  # alternately a block and a put_many batch rewrite the same cell
        if n % 2:
            table.put_many([(ROWS[0], {b"t:\x00\x00": b"v%d" % n, b"t:\x00\x20": b"x"})])
        else:
            table.put_block(block(ROWS, [(0, b"\x00\x00", b"b%d" % n), (1, b"\x00\x00", b"y")]))
    assert len(staged_batches(path)) == 6
    assert table.row(ROWS[0]) == {b"t:\x00\x00": b"v5", b"t:\x00\x20": b"x"}
    table.put_block(block(ROWS, [(0, b"\x00\x00", b"last")]))
    assert table.row(ROWS[0])[b"t:\x00\x00"] == b"last"


def test_a_block_that_does_not_fit_the_index_goes_through_put_many(
        path: Path, table: SqliteTable) -> None:
    long_row = b"r" * 300
    table.put_block(block([long_row], [(0, b"\x00\x00", b"\x01")]))
    table.put_block(block(ROWS, [(0, b"\x00\x00", b"")]))  # an empty value
    assert staged_batches(path) == [(1, False), (1, False)]
    assert list(table.scan()) == [(ROWS[0], {b"t:\x00\x00": b""}),
                                  (long_row, {b"t:\x00\x00": b"\x01"})]


def test_a_store_an_older_pytsd_staged_batches_in_opens_and_merges_them(path: Path) -> None:
    with sqlite3.connect(path) as db:  # the staging table before blocks: no cell_index
        db.executescript("""
            CREATE TABLE hbase_tables (name TEXT PRIMARY KEY, families TEXT NOT NULL);
            INSERT INTO hbase_tables VALUES ('tsdb', '{"t": {}}');
            CREATE TABLE staged_batches (seq INTEGER PRIMARY KEY, tbl TEXT NOT NULL,
                ts INTEGER NOT NULL, cells INTEGER NOT NULL, data BLOB NOT NULL);
        """)
        cells, blob = sqlite_write.pack_cells([(b"r", {b"t:\x00\x00": b"\x05"})])
        db.execute("INSERT INTO staged_batches (tbl, ts, cells, data) VALUES ('tsdb', 5, ?, ?)",
                   (cells, blob))
    table = SqliteStore(path).table("tsdb")
    assert staged_batches(path) == [(1, False)]  # the column added, the batch kept
    table.put_block(block([b"r"], [(0, b"\x00\x10", b"\x06")]))
    assert table.row(b"r") == {b"t:\x00\x00": b"\x05", b"t:\x00\x10": b"\x06"}
    assert table.row_write_times(b"r")[b"t:\x00\x00"] == 5


def test_a_store_an_older_pytsd_indexed_its_staged_tables_in_opens_and_reads_them(
        path: Path, table: SqliteTable) -> None:
    table.put_block(block([b"r"], [(0, b"\x00\x00", b"\x05")]))
    with sqlite3.connect(path) as db:  # as staged then: the tables an index, not a list
        db.executescript("DELETE FROM staged_tables;"
                         " CREATE INDEX staged_batches_tbl ON staged_batches (tbl);")
    assert SqliteStore(path).table("tsdb").row(b"r") == {b"t:\x00\x00": b"\x05"}
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT name FROM sqlite_master WHERE type = 'index'"
                          " AND tbl_name = 'staged_batches'").fetchall() == []


def test_a_staged_block_adds_one_page_to_the_log(path: Path, table: SqliteTable) -> None:
    """A put's commit writes the staging table's last page and no other: the log's bytes, and
    the disk sync that follows, are those of one page (an index on the staged tables wrote
    a second one)."""
    frame_bytes = table.store.page_size + 24  # a WAL frame: its header, then the page
    wal = Path(f"{path}-wal")
    table.put_block(block(ROWS, CELLS))  # the table's pages exist, the table is listed
    grown = []
    for _ in range(9):
        before = wal.stat().st_size
        table.put_block(block(ROWS, CELLS))
        grown.append(wal.stat().st_size - before)
    assert sorted(grown)[4] == frame_bytes, grown


WRITER = """
import os, signal, sys
import numpy as np
from app.storage.base import CellBlock
from app.storage.codec import compact_cells
from app.storage.sqlite import SqliteStore
table = SqliteStore(sys.argv[1]).table("tsdb")
rows = [b"r%03d" % n for n in range(50)]
for k in range(20):
    table.put_block(CellBlock(rows, np.arange(50), b"\\x00\\x00" * 50, np.full(50, 2),
                              (b"v%02d" % k) * 50, np.full(50, 3)))
print("written", flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no close, no merge, no clean exit
"""


def test_a_writer_killed_after_staging_blocks_loses_nothing(path: Path,
                                                            table: SqliteTable) -> None:
    done = subprocess.run([sys.executable, "-c", WRITER, str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL and done.stdout == "written\n", done.stderr
    assert len(staged_batches(path)) == 20
    rows = list(SqliteStore(path).table("tsdb").scan())
    assert rows == [(b"r%03d" % n, {b"t:\x00\x00": b"v19"}) for n in range(50)]
