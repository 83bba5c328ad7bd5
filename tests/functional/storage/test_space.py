"""The embedded store's disk space: compacted cells packed at rest yet read back byte for byte,
freed pages given back by the file itself, bytes per point reported, older files upgraded."""

from __future__ import annotations

import json
import logging
import sqlite3
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import main
from app.config import load_config
from app.storage import open_store, sqlite_space
from app.storage.base import SPACE_USED, able
from app.storage.sqlite import SqliteStore, SqliteTable
from app.tsdb.compaction import compact_row

ROW = b"\x00\x00\x01\x5f\x5e\x10\x00\x00\x00\x01\x00\x00\x01"


def compacted(points: int) -> tuple[bytes, bytes]:
    """A compacted column of ``points`` 4-byte floats every 10 s, built here by hand:
    qualifier ``offset_s << 4 | 0x0B`` (float, 4 bytes) per point; values, then a 0 byte."""
    qualifier = b"".join(struct.pack(">H", (i * 10) << 4 | 0x0B) for i in range(points))
    value = b"".join(struct.pack(">f", 20.0 + (i % 7) * 0.5) for i in range(points)) + b"\0"
    return qualifier, value


def stored(path: Path, qualifier: bytes) -> tuple[bytes, int | None]:
    """The value and flags as the SQLite file holds them, read past the store."""
    with sqlite3.connect(path) as db:
        found = db.execute("SELECT value, z FROM cells WHERE qualifier = ?",
                           (qualifier,)).fetchone()
    return found[0], found[1]


def stored_cells(path: Path) -> list[tuple[bytes, bytes, int | None]]:
    """Every data cell's stored qualifier, value and flags, read past the store."""
    with sqlite3.connect(path) as db:
        return db.execute("SELECT qualifier, value, z FROM cells WHERE family = 't'"
                          " ORDER BY row, qualifier").fetchall()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "s.db"


@pytest.fixture
def table(path: Path) -> SqliteTable:
    store = SqliteStore(path, pack_cells=True)
    store.create_table("tsdb", {"t": {}})
    return store.table("tsdb")


def test_a_compacted_cell_is_packed_at_rest_and_every_read_returns_its_exact_bytes(
        path: Path, table: SqliteTable) -> None:
    qualifier, value = compacted(360)
    table.put(ROW, {b"t:" + qualifier: value})
    [(key, raw, flags)] = stored_cells(path)
    assert flags == 3 and len(raw) < len(value) // 2  # 1,441 bytes by hand; packed far less
    assert len(key) < 16 and key[:4] == qualifier[:4]  # 720 bytes by hand: a short key
    cell = {b"t:" + qualifier: value}
    assert table.row(ROW) == cell
    assert list(table.scan()) == [(ROW, cell)]
    assert table.rows([ROW]) == [(ROW, cell)]
    [(row, cells, count, _, size)] = table.scan_stamped(b"", None, "t")
    assert (row, cells, count) == (ROW, cell, 1)
    assert size == len(ROW) + 2 + len(qualifier) + len(value)  # weighed as unpacked
    [(_, _, _, sized)] = table.scan_stamps_sized(b"", None, "t")
    assert sized == size
    [(_, _, _, quals, values)] = table.scan_packed(b"", None, "t", [b""])
    assert (quals, values) == (qualifier, value)


def test_a_keyed_column_is_found_deleted_and_recompacted_by_its_qualifier(
        path: Path, table: SqliteTable) -> None:
    qualifier, value = compacted(360)
    column = b"t:" + qualifier
    table.put(ROW, {column: value})
    assert table.row(ROW, [column]) == {column: value}
    assert table.rows([ROW], [column]) == [(ROW, {column: value})]
    assert set(table.row_write_times(ROW)) == {column}
    late = b"t:" + struct.pack(">H", 3595 << 4 | 0x0B)  # a late point at 3,595 s
    table.put(ROW, {late: struct.pack(">f", 1.5)})
    assert compact_row(table, ROW, table.row(ROW)) == 2  # the column and the late point
    [(merged_column, merged)] = table.row(ROW).items()
    assert merged_column == column + late[2:]
    assert merged == value[:-1] + struct.pack(">f", 1.5) + b"\0"
    assert len(stored_cells(path)) == 1  # the old column's key went with the old column
    table.delete(ROW, [merged_column])
    assert table.row(ROW) == {} and stored_cells(path) == []


def test_with_packing_off_a_column_is_stored_as_written_and_replaces_its_packed_form(
        path: Path, table: SqliteTable) -> None:
    qualifier, value = compacted(360)
    table.put(ROW, {b"t:" + qualifier: value})  # packing on: keyed and deflated
    plain = SqliteStore(path, pack_cells=False).table("tsdb")
    plain.put(ROW, {b"t:" + qualifier: value})
    assert stored_cells(path) == [(qualifier, value, None)]
    assert plain.row(ROW) == table.row(ROW) == {b"t:" + qualifier: value}


def test_small_cells_and_other_families_stay_as_they_are(path: Path,
                                                         table: SqliteTable) -> None:
    store = table.store
    store.create_table("tsdb-uid", {"id": {}})
    uid = store.table("tsdb-uid")
    text = b"x" * 600  # compresses well, but not a data cell
    uid.put(b"name", {b"id:metrics": text})
    table.put(ROW, {b"t:\x00\x0b": b"\x41\xa0\x00\x00"})
    table.row(ROW)  # merges the staging log
    assert stored(path, b"metrics") == (text, None)
    assert stored(path, b"\x00\x0b") == (b"\x41\xa0\x00\x00", None)


def test_an_append_to_a_packed_cell_appends_to_its_bytes(table: SqliteTable) -> None:
    _, value = compacted(100)
    table.put(ROW, {b"t:\x05\x00\x00": value})
    table.append(ROW, b"t:\x05\x00\x00", b"\x00\x1b\x01")
    assert table.row(ROW) == {b"t:\x05\x00\x00": value + b"\x00\x1b\x01"}


def test_compaction_gives_the_freed_pages_back_to_the_file_system(
        path: Path, table: SqliteTable, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_space, "KEEP_FREE_PAGES", 4)  # a small file keeps 5% only
    rows = [ROW[:-1] + bytes((n,)) for n in range(60)]
    for row in rows:  # single-point cells, as /api/put writes them
        table.put_many([(row, {b"t:" + struct.pack(">H", (i * 10) << 4 | 0x0B):
                               struct.pack(">f", float(i)) for i in range(360)})])
    table.row(rows[0])  # merges the staging log
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
    pages_before = table.space_used().pages
    for row in rows:
        compact_row(table, row, table.row(row))
    used = table.space_used()
    assert used.free_pages < 2 * max(4, used.pages // 20)  # released past twice the reserve
    assert used.pages < pages_before / 2  # 21,600 cells became 60
    assert used.points == 60 * 360
    assert len(table.row(rows[7])) == 1


def test_points_counted_as_stored(table: SqliteTable) -> None:
    qualifier, value = compacted(5)
    table.put(ROW, {b"t:" + qualifier: value,
                    b"t:\x01\x00\x00": b'{"description":"a note"}',  # annotation: no point
                    b"t:\x00\x0b": b"\x41\xa0\x00\x00",  # one point at 0 s (a duplicate)
                    b"t:\xf0\x00\x02\x80": b"\x01",  # one point at 10 ms
                    b"t:\x00\x1b\xf0\x00\x02\x80": b"\x41\xa0\x00\x00\x01\x00"})  # 2 mixed
    assert table.space_used().points == 5 + 1 + 1 + 2
    declared = able(table, SPACE_USED)
    assert declared is not None and declared.space_used().points == 9


OLD_SCHEMA = """
CREATE TABLE hbase_tables (name TEXT PRIMARY KEY, families TEXT NOT NULL);
CREATE TABLE cells (
    tbl TEXT NOT NULL, row BLOB NOT NULL, family TEXT NOT NULL, qualifier BLOB NOT NULL,
    value BLOB NOT NULL, ts INTEGER NOT NULL,
    PRIMARY KEY (tbl, row, family, qualifier)
) WITHOUT ROWID;
CREATE INDEX cells_stamp ON cells (tbl, row, family, ts);
"""


def test_a_store_written_by_the_previous_layout_opens_reads_and_vacuums(
        path: Path, caplog: pytest.LogCaptureFixture) -> None:
    qualifier, value = compacted(360)
    with sqlite3.connect(path) as db:  # what pytsd wrote before this layout: no z, no vacuum
        db.executescript(OLD_SCHEMA)
        db.execute("INSERT INTO hbase_tables VALUES ('tsdb', '{\"t\": {}}')")
        db.execute("INSERT INTO cells VALUES ('tsdb', ?, 't', ?, ?, 1)", (ROW, qualifier, value))
        db.execute("INSERT INTO cells VALUES ('tsdb', ?, 't', x'0007', x'2a', 2)", (ROW,))
    expected = {b"t:" + qualifier: value, b"t:\x00\x07": b"\x2a"}
    with caplog.at_level(logging.WARNING):
        table = SqliteStore(path, pack_cells=True).table("tsdb")
    assert "pytsd vacuum" in caplog.text
    assert table.row(ROW) == expected
    assert table.space_used().points == 361 and not table.space_used().auto_vacuum
    table.put(ROW, {b"t:" + qualifier: value})  # rewritten by the new layout: packed
    assert [flags for _, _, flags in stored_cells(path)] == [None, 3]  # one cell each
    table.store.close()

    env = {"TSD_STORAGE": f"sqlite:///{path}", "TSD_CONFIG": ""}
    result = CliRunner().invoke(main, ["vacuum"], env=env, catch_exceptions=False)
    assert result.exit_code == 0 and "freed pages are now given back" in result.output
    reopened = SqliteStore(path).table("tsdb")
    assert reopened.row(ROW) == expected and reopened.space_used().auto_vacuum
    cells = CliRunner().invoke(main, ["cells", "tsdb"], env=env, catch_exceptions=False)
    assert [json.loads(line)["value"] for line in cells.output.splitlines()] == [
        "2a", value.hex()]  # qualifier order: 0007 before 000b...
    space = CliRunner().invoke(main, ["space"], env=env, catch_exceptions=False)
    assert "361 data points" in space.output and "bytes per point" in space.output


def test_packing_is_the_default_and_a_store_reads_every_form_whatever_its_setting(
        path: Path) -> None:
    """A store written unpacked (an older pytsd's default) opened with today's default reads
    its cells byte for byte and packs what it writes from then on; opened unpacked again, it
    reads the packed cells the same."""
    def opened(**settings: object) -> SqliteTable:
        store = open_store(load_config({"tsd.storage": f"sqlite:///{path}", **settings}, {}))
        assert isinstance(store, SqliteStore)
        store.create_table("tsdb", {"t": {}})
        return store.table("tsdb")

    later = ROW[:3] + (0x5F5E1000 + 3600).to_bytes(4, "big") + ROW[7:]
    qualifier, value = compacted(360)
    cells = {b"t:" + qualifier: value}
    plain = opened(**{"tsd.storage.sqlite.pack_cells": False})
    plain.put(ROW, cells)
    plain.store.close()
    assert [flags for _, _, flags in stored_cells(path)] == [None]

    default = opened()
    assert default.row(ROW) == cells
    default.put(later, cells)
    assert [flags for _, _, flags in stored_cells(path)] == [None, 3]  # the new one packed
    assert list(default.scan()) == [(ROW, cells), (later, cells)]
    default.store.close()

    again = opened(**{"tsd.storage.sqlite.pack_cells": False})
    assert list(again.scan()) == [(ROW, cells), (later, cells)]
    [(_, _, _, quals, values)] = again.scan_packed(later, None, "t", [b""])
    assert (quals, values) == (qualifier, value)
    again.store.close()


def test_a_store_built_without_saying_packs_as_a_configured_server_does(path: Path) -> None:
    store = SqliteStore(path)  # the setting's default: packed (docs/configuration.md)
    store.create_table("tsdb", {"t": {}})
    qualifier, value = compacted(360)
    store.table("tsdb").put(ROW, {b"t:" + qualifier: value})
    [(key, raw, flags)] = stored_cells(path)
    assert flags == 3 and len(raw) < len(value) // 2 and len(key) < 16


def test_a_scan_unpacks_its_batches_packed_and_plain_cells_alike(
        path: Path, table: SqliteTable) -> None:
    # Rows of packed columns of several lengths beside cells too small to pack, read in
    # batches of 2 SQL rows (each batch's packed cells are unpacked together).
    expected = {}
    for number, points in enumerate([360, 100, 9, 240]):
        row = ROW[:-1] + bytes([number])
        qualifier, value = compacted(points)
        cells = {b"t:" + qualifier: value, b"t:\xe1\x0b": struct.pack(">f", 1.5 + number)}
        table.put(row, cells)
        expected[row] = cells
    # 9 points: a short key, the value too small to deflate; the single cells left alone.
    assert [found for _, _, found in stored_cells(path)] == [3, None, 3, None, 2, None, 3, None]
    assert list(table.scan(batch_size=2)) == list(expected.items())
    stamped = [(row, cells) for row, cells, _, _, _ in table.scan_stamped(b"", None, "t")]
    assert stamped == list(expected.items())
    keys = [(row, sorted(cells)) for row, cells in table.scan(keys_only=True, batch_size=3)]
    assert keys == [(row, sorted(cells)) for row, cells in expected.items()]
