"""A range read before, whose read took a while, is read again in two halves at once
(``hbase_scan.Halves``): the same rows in the same order, through Thrift and natively, two
scanners opened (at the range's start and at the row that halved the last read); a second
half grown past what may be held is streamed after the rows held; a read that was quick, or a
look at the first rows, stays one scanner; a look at the first row of a range (the hour
cache's) asks for one row, and opens no second scanner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.config import load_config
from app.storage import hbase_scan
from app.storage.hbase_scan import Scanner
from app.tsdb import TSDB
from app.tsdb.read.cached import first_row
from tests.conftest import backend_config, drop_tables, hbase_zk_quorum, make_tsdb

ROWS = [(b"k%03d" % i, {b"t:\x00\x00": bytes([i]), b"t:\x00\x10": b"\x01\x02"})
        for i in range(40)]
START, STOP = b"k", b"l"


@pytest.fixture(params=["thrift", "native"])
def tsdb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TSDB]:
    config = backend_config("hbase", tmp_path)
    writer = make_tsdb(config)
    writer.data_table().put_many(ROWS)
    reader = TSDB(load_config({**config, "tsd.storage.hbase.scan_rpc": request.param,
                               "tsd.storage.hbase.zk_quorum": hbase_zk_quorum()}, environ={}))
    hbase_scan.HALVES = hbase_scan.Halves()
    yield reader
    reader.close()
    drop_tables(writer)


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Where each scanner opened (the real calls, noted)."""
    starts: list[bytes] = []
    real = Scanner._open

    def noted(self: Scanner, start: bytes) -> int:
        starts.append(start)
        return real(self, start)
    monkeypatch.setattr(Scanner, "_open", noted)
    return starts


def read(tsdb: TSDB, limit: int | None = None) -> list[tuple[bytes, Any]]:
    scanned = tsdb.data_table().scan(row_start=START, row_stop=STOP, limit=limit)
    return [(key, dict(cells)) for key, cells in scanned]


def test_a_range_read_again_is_read_in_halves(tsdb: TSDB, opened: list[bytes],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hbase_scan, "HALVES_MIN_MS", 0.0)  # every read worth halving
    assert read(tsdb) == ROWS
    assert opened == [START]
    opened.clear()
    assert read(tsdb) == ROWS
    assert sorted(opened) == [START, ROWS[20][0]]  # at once: in either order
    opened.clear()
    assert read(tsdb, limit=3) == ROWS[:3]  # a look at the first rows: one scanner
    assert opened == [START]


def test_a_quick_read_forgets_its_halves(tsdb: TSDB, opened: list[bytes],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hbase_scan, "HALVES_MIN_MS", 0.0)
    read(tsdb)
    monkeypatch.setattr(hbase_scan, "HALVES_MIN_MS", 60_000.0)
    assert read(tsdb) == ROWS  # halved, but quick: not again
    opened.clear()
    assert read(tsdb) == ROWS
    assert opened == [START]


def test_a_second_half_beyond_what_is_held_streams_the_rest(
        tsdb: TSDB, opened: list[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hbase_scan, "HALVES_MIN_MS", 0.0)
    read(tsdb)
    monkeypatch.setattr(hbase_scan, "HALVES_MAX_CELLS", 10)  # 5 rows of 2 cells
    opened.clear()
    assert read(tsdb) == ROWS
    assert sorted(opened) == [START, ROWS[20][0], ROWS[24][0] + b"\x00"]
    opened.clear()
    assert read(tsdb) == ROWS  # too large to halve: one scanner again
    assert opened == [START]


def test_a_look_at_the_first_row_opens_no_second_half(tsdb: TSDB, opened: list[bytes],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hbase_scan, "HALVES_MIN_MS", 0.0)
    read(tsdb)
    opened.clear()
    found = first_row(tsdb.data_table(), [(START, STOP)])
    assert found is not None and found[0] == ROWS[0][0]
    assert opened == [START]


def test_a_look_at_the_first_row_asks_for_one_row(tsdb: TSDB,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The hour cache's look at a range's first row asks the region servers for one row,
    not a scanner's first batch (100 compacted rows cost the region server about what a
    full read of them does: their deleted cells are walked)."""
    asked: list[int] = []
    real = Scanner._next

    def noted(self: Scanner, scanner_id: int, count: int, resume: bytes) -> Any:
        asked.append(count)
        return real(self, scanner_id, count, resume)
    monkeypatch.setattr(Scanner, "_next", noted)
    found = first_row(tsdb.data_table(), [(START, STOP)])
    assert found is not None and found[0] == ROWS[0][0]
    assert found[1][0] == 2  # its cells
    assert asked == [1]
