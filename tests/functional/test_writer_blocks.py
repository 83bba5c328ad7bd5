"""A batch is written as one block where the store takes blocks (the embedded store's
``put_block``: encoded by numpy from ``VECTOR_MIN_POINTS`` points, point by point below; the
other backends get ``put_many``) and stores OpenTSDB's cells, byte for byte."""

from __future__ import annotations

import pytest

from app.errors import BadRequestError
from app.storage.sqlite import SqliteStore
from app.tsdb import TSDB
from app.tsdb.points import PointBatch
from app.tsdb.writer import VECTOR_MIN_POINTS, PointWriter

T0 = 1356998400  # 2013-01-01 00:00:00 UTC, an hour boundary


def row(base_s: int, host_uid: int) -> bytes:
    return b"\x00\x00\x01" + base_s.to_bytes(4, "big") + b"\x00\x00\x01" + \
        host_uid.to_bytes(3, "big")


def test_a_block_batch_stores_each_points_single_cell(tsdb: TSDB) -> None:
    batch = PointBatch()
    a, b = ("m", "host=a"), ("m", "host=b")
    points = [(a, T0, 1), (a, T0 + 1, 300), (a, T0 + 2, -70000), (a, T0 + 3, 1.5),
              (a, T0 + 4, 2**40), (a, T0 * 1000 + 5500, 7), (a, T0 + 3600, 9),
              (a, T0, 2)]  # the same timestamp again: the later value is stored
    points += [(b, T0 + 10 * i, i % 100) for i in range(VECTOR_MIN_POINTS)]
    for key, timestamp, value in points:
        batch.add(key, "m", (("host", key[1][5:]),), timestamp, value)
    batch.reject(BadRequestError("refused"))  # a bad line: stores nothing
    assert len(batch) > VECTOR_MIN_POINTS
    assert PointWriter(tsdb).write_batch(batch) == len(points)
    if isinstance(tsdb.store, SqliteStore):  # staged as one block, not cell by cell
        assert tsdb.store.connection().execute(
            "SELECT count(*) FROM staged_batches WHERE cell_index IS NOT NULL").fetchone() == (1,)
    expected = {
        row(T0, 1): {b"t:\x00\x00": b"\x02", b"t:\x00\x11": b"\x01\x2c",
                     b"t:\x00\x23": b"\xff\xfe\xee\x90", b"t:\x00\x3b": b"\x3f\xc0\x00\x00",
                     b"t:\x00\x47": b"\x00\x00\x01\x00\x00\x00\x00\x00",
                     b"t:\xf0\x05\x5f\x00": b"\x07"},
        row(T0 + 3600, 1): {b"t:\x00\x00": b"\x09"},
        row(T0, 2): {b"t:" + (160 * i).to_bytes(2, "big"): bytes([i % 100])
                     for i in range(VECTOR_MIN_POINTS)},
    }
    if isinstance(tsdb.store, SqliteStore):
        # The embedded store's merge compacts a block's points per row (sqlite_write
        # MergeChunk): the same points, in time order, as compaction's one column; a row of
        # one point keeps its single cell.
        expected[row(T0, 1)] = {
            b"t:\x00\x00\x00\x11\x00\x23\x00\x3b\x00\x47\xf0\x05\x5f\x00":
                b"\x02\x01\x2c\xff\xfe\xee\x90\x3f\xc0\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00"
                b"\x07\x01"}  # the last byte: seconds and milliseconds mixed
        expected[row(T0, 2)] = {
            b"t:" + b"".join((160 * i).to_bytes(2, "big") for i in range(VECTOR_MIN_POINTS)):
                bytes([i % 100 for i in range(VECTOR_MIN_POINTS)]) + b"\x00"}
    assert dict(tsdb.data_table().scan()) == expected


def test_small_batches_are_blocks_too_and_merge_into_one_column(tsdb: TSDB) -> None:
    # /api/put's usual body is small: point by point encoded, still one staged block, so the
    # merge writes each row's points of every block as one compacted column.
    a, b = ("m", "host=a"), ("m", "host=b")
    for points in ([(a, T0, 1), (a, T0 + 1, 300), (b, T0, 1.5)], [(a, T0 + 2, -70000)]):
        batch = PointBatch()
        for key, timestamp, value in points:
            batch.add(key, "m", (("host", key[1][5:]),), timestamp, value)
        assert PointWriter(tsdb).write_batch(batch) == len(points)
    expected = {
        row(T0, 1): {b"t:\x00\x00": b"\x01", b"t:\x00\x11": b"\x01\x2c",
                     b"t:\x00\x23": b"\xff\xfe\xee\x90"},
        row(T0, 2): {b"t:\x00\x0b": b"\x3f\xc0\x00\x00"},
    }
    if isinstance(tsdb.store, SqliteStore):
        assert tsdb.store.connection().execute(
            "SELECT count(*) FROM staged_batches WHERE cell_index IS NOT NULL").fetchone() == (2,)
        expected[row(T0, 1)] = {b"t:\x00\x00\x00\x11\x00\x23": b"\x01\x01\x2c\xff\xfe\xee\x90\x00"}
    assert dict(tsdb.data_table().scan()) == expected


def test_a_known_rows_key_is_made_once_across_blocks(tsdb: TSDB,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of known series find their hour rows' keys kept from the block before (no
    key made again per block), and a cache that starts over still gives the right rows."""
    writer = PointWriter(tsdb)
    made: list[bytes] = []
    row_for = writer.row_for

    def counted(template: bytes, base_time_s: int) -> bytes:
        made.append(row_for(template, base_time_s))
        return made[-1]

    monkeypatch.setattr(writer, "row_for", counted)

    def block(second: int) -> PointBatch:
        batch = PointBatch()
        for i in range(VECTOR_MIN_POINTS):  # one point of each series: a block
            batch.add(("m", f"host=h{i}"), "m", (("host", f"h{i}"),), T0 + second, i)
        return batch

    assert writer.write_batch(block(0)) == VECTOR_MIN_POINTS
    assert len(made) == VECTOR_MIN_POINTS  # one new row per series
    assert writer.write_batch(block(10)) == VECTOR_MIN_POINTS
    assert len(made) == VECTOR_MIN_POINTS  # the same rows: no key made again
    monkeypatch.setattr("app.tsdb.writer.MAX_TEMPLATES", 10)  # the caches start over
    assert writer.write_batch(block(20)) == VECTOR_MIN_POINTS
    assert len(made) == 2 * VECTOR_MIN_POINTS
    stored = dict(tsdb.data_table().scan())
    # Each series' three points in its row (the host tag's value UIDs are 1.. in the order
    # the series came), as one column where the store's merge compacts them.
    for i in range(VECTOR_MIN_POINTS):
        cells = stored.pop(row(T0, i + 1))
        if isinstance(tsdb.store, SqliteStore):
            assert cells == {b"t:\x00\x00\x00\xa0\x01\x40": bytes([i, i, i, 0])}
        else:
            assert cells == {b"t:\x00\x00": bytes([i]), b"t:\x00\xa0": bytes([i]),
                             b"t:\x01\x40": bytes([i])}
    assert stored == {}
