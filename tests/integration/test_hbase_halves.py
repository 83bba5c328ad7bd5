"""A long scan of one range is read the next time as its two halves at once
(``hbase_halves``), on a real HBase: the same rows in key order as one scan, whatever the
batches; a row limit, a first scan or a quick one never split; a reader that leaves early
stops the second half's thread; an error in the second half reaches the reader."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.errors import StorageError
from app.storage import hbase_halves
from app.storage.hbase import HBaseTable
from app.storage.hbase_reply import ReplyRow
from app.storage.hbase_scan import Scanner
from app.tsdb import TSDB
from tests.conftest import backend_config, drop_tables, make_tsdb

ROWS = 300


@pytest.fixture
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HBaseTable]:
    tsdb: TSDB = make_tsdb(backend_config("hbase", tmp_path))
    data = tsdb.data_table()
    assert isinstance(data, HBaseTable)
    data.put_many((key, {b"t:\x00\x00": key, b"t:\x00\x10": b"\x02"}) for key in keys())
    yield data
    drop_tables(tsdb)


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bytes, bytes | None]]:
    """The ``[start, stop)`` of every scanner opened from here on."""
    ranges: list[tuple[bytes, bytes | None]] = []
    init = Scanner.__init__

    def counted(scanner: Scanner, calls: object, start: bytes, stop: bytes | None,
                *args: object) -> None:
        ranges.append((start, stop))
        init(scanner, calls, start, stop, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Scanner, "__init__", counted)
    return ranges


def keys() -> list[bytes]:
    return [b"k" + i.to_bytes(2, "big") for i in range(ROWS)]


def scanned(table: HBaseTable, batch_size: int = 1000) -> list[bytes]:
    rows = list(table.scan(row_start=b"k", row_stop=b"l", batch_size=batch_size))
    assert all(cells == {b"t:\x00\x00": key, b"t:\x00\x10": b"\x02"} for key, cells in rows)
    return [key for key, _ in rows]


def test_a_long_scan_is_read_next_as_two_halves_with_the_same_rows(
        table: HBaseTable, opened: list[tuple[bytes, bytes | None]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hbase_halves, "SPLIT_AFTER_MS", 0.0)  # every scan counts as long
    monkeypatch.setattr(hbase_halves, "AHEAD_BATCHES", 2)  # the second half waits for room
    assert scanned(table, batch_size=7) == keys()  # learns where the middle is
    assert opened == [(b"k", b"l")]
    opened.clear()
    assert scanned(table, batch_size=7) == keys()  # 22 batches a half, 2 ahead at most
    assert opened == [(b"k", keys()[ROWS // 2]), (keys()[ROWS // 2], b"l")]


def test_a_quick_scan_a_limit_or_an_open_end_is_never_split(
        table: HBaseTable, opened: list[tuple[bytes, bytes | None]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hbase_halves, "SPLIT_AFTER_MS", 1e9)
    for _ in range(2):
        assert scanned(table) == keys()  # quicker than SPLIT_AFTER_MS: not even learnt
    monkeypatch.setattr(hbase_halves, "SPLIT_AFTER_MS", 0.0)
    assert scanned(table) == keys()
    assert [key for key, _ in table.scan(row_start=b"k", row_stop=b"l", limit=5)] == keys()[:5]
    for _ in range(2):
        assert [key for key, _ in table.scan(row_start=b"k")] == keys()
    assert opened == [(b"k", b"l")] * 4 + [(b"k", None)] * 2


def test_a_reader_that_leaves_early_stops_the_second_half(
        table: HBaseTable, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hbase_halves, "SPLIT_AFTER_MS", 0.0)
    monkeypatch.setattr(hbase_halves, "AHEAD_BATCHES", 1)
    scanned(table, batch_size=5)
    scan = table.scan(row_start=b"k", row_stop=b"l", batch_size=5)
    assert [next(scan)[0] for _ in range(3)] == keys()[:3]
    assert any(t.name == "pytsd-hbase-half" for t in threading.enumerate())
    scan.close()  # type: ignore[attr-defined]
    assert not any(t.name == "pytsd-hbase-half" for t in threading.enumerate())
    assert scanned(table) == keys()  # the connections are free


def test_an_error_in_the_second_half_reaches_the_reader(
        table: HBaseTable, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hbase_halves, "SPLIT_AFTER_MS", 0.0)
    scanned(table)
    batches = Scanner.batches

    def failing(scanner: Scanner, limit: int | None = None) -> Iterator[list[ReplyRow]]:
        if scanner.start != b"k":
            raise StorageError("HBase failed to scan tsdb (the second half)")
        yield from batches(scanner, limit)

    with monkeypatch.context() as patch, pytest.raises(StorageError, match="the second half"):
        patch.setattr(Scanner, "batches", failing)
        scanned(table)
    assert not any(t.name == "pytsd-hbase-half" for t in threading.enumerate())
