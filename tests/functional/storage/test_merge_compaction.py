"""The embedded store's merge writes a row's staged block points as one compacted cell
(``sqlite_merge.MergeChunk``): what a reader, compaction and fsck make of rows holding several
such cells, points sent again across merges, and a store an older pytsd wrote."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.lineproto.session import TelnetSession
from app.storage import codec, sqlite_write
from app.storage.base import CellBlock
from app.storage.sqlite import SqliteStore, SqliteTable
from app.tsdb import TSDB
from app.tsdb.compaction import compact_table
from app.tsdb.fsck import FsckOptions, fsck
from tests.conftest import app_over, make_tsdb

HOUR_S = 3600
BASE_S = (int(time.time()) // HOUR_S - 5) * HOUR_S  # a closed hour, well before now
QUERY = f"/api/query?start={BASE_S}&end={BASE_S + HOUR_S - 1}&m=sum:merge.m{{host=a}}"


def put(client: FlaskClient, points: list[tuple[int, int]]) -> None:
    body = [{"metric": "merge.m", "timestamp": ts, "value": v, "tags": {"host": "a"}}
            for ts, v in points]
    response = client.post("/api/put", data=json.dumps(body))
    assert response.status_code == 204, response.get_data(as_text=True)


def dps(client: FlaskClient) -> dict[str, Any]:
    response = client.get(QUERY)
    assert response.status_code == 200, response.get_data(as_text=True)
    (series,) = response.get_json()
    return dict(series["dps"])


def data_cells(tsdb: TSDB) -> list[dict[bytes, bytes]]:
    return [cells for _, cells in tsdb.data_table().scan()]


@pytest.mark.parametrize("cache_bytes", [256 << 20, 0], ids=["cache", "no-cache"])
def test_a_point_sent_again_after_its_merge_reads_as_the_newest_write(
        tsd_config: dict[str, Any], settled: None, cache_bytes: int) -> None:
    tsdb = make_tsdb({**tsd_config, "tsd.query.cache.max_bytes": cache_bytes})
    client = app_over(tsdb).test_client()
    session = TelnetSession(app_over(tsdb), "127.0.0.1:5555")
    expected = {BASE_S + 10 * i: i for i in range(200)}
    put(client, list(expected.items()))  # 200 points: one block, one compacted cell
    assert dps(client) == {str(ts): v for ts, v in expected.items()}  # a read merges
    sent = {BASE_S + 10 * i: 1000 + i for i in range(150)}  # /api/put again, 150 points
    put(client, list(sent.items()))
    expected.update(sent)
    assert dps(client) == {str(ts): v for ts, v in expected.items()}
    lines = {BASE_S + 10 * i: 2000 + i for i in range(50, 180)}  # the line protocol, 130
    reply, _ = session.handle_lines([f"put merge.m {ts} {v} host=a".encode()
                                     for ts, v in lines.items()])
    assert reply == b""
    expected.update(lines)
    assert dps(client) == {str(ts): v for ts, v in expected.items()}
    put(client, [(BASE_S + 1990, -1)])  # one point: a single cell
    expected[BASE_S + 1990] = -1
    assert dps(client) == {str(ts): v for ts, v in expected.items()}
    if isinstance(tsdb.store, SqliteStore):  # three compacted cells and a single one
        (cells,) = data_cells(tsdb)
        assert sorted(len(q) for q in cells) == [2 + 2, 2 * 130 + 2, 2 * 150 + 2, 2 * 200 + 2]
        # a value too many per timestamp: 0-49 s x10 one, 50-149 two, 150-179 one, 199 one
        assert fsck(tsdb, FsckOptions()).duplicates == 50 + 2 * 100 + 30 + 1
    compact_table(tsdb.data_table(), tsdb.layout, now_s=2**31)
    assert dps(client) == {str(ts): v for ts, v in expected.items()}
    (cells,) = data_cells(tsdb)
    assert len(cells) == 1  # one column of the newest values
    assert fsck(tsdb, FsckOptions()).errors == 0
    tsdb.close()


def block(rows: list[bytes], cells: list[tuple[int, bytes, bytes]]) -> CellBlock:
    """A block of ``(row index, qualifier, value)`` cells, in this order."""
    return CellBlock.of_cells(rows, [c[0] for c in cells], [c[1] for c in cells],
                              [c[2] for c in cells])


ROW = b"\x00\x00\x01\x65\x53\xf1\x00\x00\x00\x01\x00\x00\x01"
ROW2 = b"\x00\x00\x01\x65\x53\xf1\x00\x00\x00\x01\x00\x00\x02"
BASE_ROW_S = 0x6553F100


@pytest.fixture
def table(tmp_path: Path) -> SqliteTable:
    store = SqliteStore(tmp_path / "s.db")
    store.create_table("tsdb", {"t": {}})
    return store.table("tsdb")


def points(table: SqliteTable) -> list[tuple[int, float]]:
    """The row's points as the read path decodes them (the newest write wins)."""
    cells = [(c[2:], v) for c, v in table.row(ROW).items()]
    times = {c[2:]: t for c, t in table.row_write_times(ROW).items()}
    decoded = codec.decode_row(BASE_ROW_S, cells, times)
    return list(zip((decoded.ts_ms // 1000 - BASE_ROW_S).tolist(), decoded.values.tolist()))


def test_a_merge_in_the_millisecond_of_the_cells_it_would_outrank_leaves_them_single(
        table: SqliteTable, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_write.time, "time_ns", lambda: 1_700_000_000_000_000_000)
    table.put_block(block([ROW], [(0, b"\x00\x00", b"\x01"), (0, b"\x00\x10", b"\x02")]))
    assert table.row(ROW) == {b"t:\x00\x00\x00\x10": b"\x01\x02\x00"}
    # Again in the same millisecond: a compacted cell would tie with the first one, and
    # cell_rank would then choose by qualifier bytes, not by order; single cells outrank it.
    table.put_block(block([ROW], [(0, b"\x00\x00", b"\x09"), (0, b"\x00\x20", b"\x03")]))
    assert table.row(ROW) == {b"t:\x00\x00\x00\x10": b"\x01\x02\x00", b"t:\x00\x00": b"\x09",
                              b"t:\x00\x20": b"\x03"}
    assert points(table) == [(0, 9), (1, 2), (2, 3)]


def test_a_merge_later_than_every_cell_compacts_and_outranks_them(
        table: SqliteTable) -> None:
    table.put_many([(ROW, {b"t:\x00\x00": b"\x01", b"t:\x00\x10": b"\x02"})])  # as put
    assert table.row(ROW) == {b"t:\x00\x00": b"\x01", b"t:\x00\x10": b"\x02"}
    time.sleep(0.002)
    table.put_block(block([ROW], [(0, b"\x00\x10", b"\x07"), (0, b"\x00\x20", b"\x03")]))
    assert table.row(ROW) == {b"t:\x00\x00": b"\x01", b"t:\x00\x10": b"\x02",
                              b"t:\x00\x10\x00\x20": b"\x07\x03\x00"}
    assert points(table) == [(0, 1), (1, 7), (2, 3)]


def test_block_cells_of_a_row_put_many_wrote_in_the_same_merge_stay_single(
        table: SqliteTable) -> None:
    table.put_block(block([ROW], [(0, b"\x00\x00", b"\x01"), (0, b"\x00\x10", b"\x02")]))
    table.put_many([(ROW, {b"t:\x00\x10": b"\x05"})])  # staged after the block: it wins
    assert table.row(ROW) == {b"t:\x00\x00": b"\x01", b"t:\x00\x10": b"\x05"}


def test_a_store_an_older_pytsd_wrote_reads_and_merges(tmp_path: Path) -> None:
    """Single cells in ``cells``, a block and a batch staged, no ``cell_marks``: what the
    embedded store held before merges compacted."""
    path = tmp_path / "old.db"
    store = SqliteStore(path)
    store.create_table("tsdb", {"t": {}})
    old = store.table("tsdb")
    old.put_block(block([ROW], [(0, b"\x00\x30", b"\x06"), (0, b"\x00\x40", b"\x08")]))
    old.put_many([(ROW2, {b"t:\x00\x50": b"\x0a"})])
    store.close()
    with sqlite3.connect(path) as db:  # the older layout: a SQL row per point, no marks
        db.execute("DROP TABLE cell_marks")
        db.executemany("INSERT INTO cells (tbl, row, family, qualifier, value, ts)"
                       " VALUES ('tsdb', ?, 't', ?, ?, 1000)",
                       [(ROW, b"\x00\x00", b"\x01"), (ROW, b"\x00\x10", b"\x02"),
                        (ROW, b"\x00\x30", b"\x04")])
    table = SqliteStore(path).table("tsdb")
    assert table.row(ROW) == {
        b"t:\x00\x00": b"\x01", b"t:\x00\x10": b"\x02", b"t:\x00\x30": b"\x04",
        b"t:\x00\x30\x00\x40": b"\x06\x08\x00"}
    assert points(table) == [(0, 1), (1, 2), (3, 6), (4, 8)]  # the block's 3 s is newer
    assert table.row(ROW2) == {b"t:\x00\x50": b"\x0a"}


def test_fsck_last_write_wins_keeps_the_point_sent_again(tsd_config: dict[str, Any]) -> None:
    tsdb = make_tsdb(tsd_config)
    client = app_over(tsdb).test_client()
    put(client, [(BASE_S + 10 * i, i) for i in range(130)])
    dps(client)
    time.sleep(0.002)  # HBase keeps one version of a cell written twice in one millisecond
    put(client, [(BASE_S + 10 * i, -i) for i in range(100, 230)])
    report = fsck(tsdb, FsckOptions(fix=True, resolve_duplicates=True, last_write_wins=True))
    # The embedded store: 30 points in two compacted cells. HBase: a cell written again
    # replaces the older (versions), except 128 s, whose -128 fits a byte and 128 does not.
    assert report.duplicates == report.duplicates_fixed == (
        30 if isinstance(tsdb.store, SqliteStore) else 1)
    assert dps(client) == {str(BASE_S + 10 * i): i if i < 100 else -i for i in range(230)}
    assert fsck(tsdb, FsckOptions()).errors == 0
    tsdb.close()


def test_a_compacted_cell_replaces_its_packed_form_with_packing_off(tmp_path: Path) -> None:
    path = tmp_path / "packed.db"
    ten = [(0, (10 * i << 4).to_bytes(2, "big"), bytes([i])) for i in range(10)]
    packing = SqliteStore(path, pack_cells=True)
    packing.create_table("tsdb", {"t": {}})
    packing.table("tsdb").put_block(block([ROW], ten))
    column = b"t:" + b"".join(q for _, q, _ in ten)
    assert packing.table("tsdb").row(ROW) == {column: bytes(range(10)) + b"\x00"}
    with sqlite3.connect(path) as db:  # kept as its short key (20 qualifier bytes)
        assert db.execute("SELECT length(qualifier), z FROM cells").fetchall() == [(9, 2)]
    packing.close()
    plain = SqliteStore(path, pack_cells=False).table("tsdb")
    plain.put_block(block([ROW], [(0, q, bytes([7])) for _, q, _ in ten]))
    assert plain.row(ROW) == {column: b"\x07" * 10 + b"\x00"}  # one form: the new one
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT length(qualifier), z FROM cells").fetchall() == [(20, None)]
