"""Row column blocks (``rollup_blocks``): which parts of a read are whole blocks, and a block
holds exactly the rows it was made of, whatever their form."""

from __future__ import annotations

import numpy as np
import pytest

from app.storage.codec_rollup import HEAD_DTYPE, column_padding
from app.tsdb.read import rollup_blocks, rollup_columns

PREFIX = b"\x00\x00\x01"  # a metric UID, no salt


def _key(base_s: int, tags: bytes = b"\x00\x00\x01\x00\x00\x02") -> bytes:
    return PREFIX + base_s.to_bytes(4, "big") + tags


def _row(key: bytes, cells: list[tuple[int, float, bool]], newest_ms: int) -> bytes:
    """One row column as ``codec_rollup.column_parts`` lays it out, written here by hand:
    head, key, padding, doubles, offsets, integer flags, padding."""
    head = np.array([(len(key), len(cells), 4 * len(cells), newest_ms)], HEAD_DTYPE)
    body = (np.array([v for _, v, _ in cells], "<f8").tobytes()
            + np.array([o for o, _, _ in cells], "<u2").tobytes()
            + bytes([i for _, _, i in cells]))
    return head.tobytes() + key + bytes(column_padding(len(key))) + body + bytes(
        -len(body) % 8)


def test_split_reads_whole_blocks_and_the_ends_row_by_row() -> None:
    day = 86400
    start, stop = _key(3 * day)[:7], _key(13 * day + 3600)[:7]  # days 3 to 13, inclusive
    rows, blocks = rollup_blocks.split([(start, stop)], 3, 4 * day)
    assert blocks == [(_key(4 * day)[:7], _key(8 * day)[:7]),
                      (_key(8 * day)[:7], _key(12 * day)[:7])]
    assert rows == [(start, _key(4 * day)[:7]), (_key(12 * day)[:7], stop)]
    # No whole block inside, an open end, a narrowed range: row by row as asked.
    inside = (_key(5 * day)[:7], _key(7 * day)[:7])
    narrowed = (_key(0), _key(9 * day))
    assert rollup_blocks.split([inside, (start, None), narrowed], 3, 4 * day) == (
        [inside, (start, None), narrowed], [])


def test_full_rows_of_sums_and_counts_round_trip() -> None:
    sums = [(0, 1.5, False), (1, -2.25, False), (2, 1e300, False)]
    counts = [(0, 360.0, True), (1, 7.0, True), (2, 0.0, True)]
    for cells, nbytes in ((sums, 8), (counts, 2)):  # counts as int16
        blob = b"".join(_row(_key(base), cells, 1000 + base) for base in (0, 86400, 172800))
        block = rollup_blocks.encode(blob)
        assert block is not None
        assert len(block) < len(blob)
        # Head, newest and value bytes and key per row, padding; 9 values padded to 8 bytes.
        assert len(block) == 16 + 3 * (8 + 4 + 13) + 5 + -(-9 * nbytes // 8) * 8
        part = rollup_blocks.decode(block)
        assert part is not None and part.width == 3
        assert part.rows == b"".join(_key(base) for base in (0, 86400, 172800))
        assert part.values.tolist() == [[v for _, v, _ in cells]] * 3
        assert part.offsets.tolist() == [[0, 1, 2]] * 3
        assert part.is_int.tolist() == [[i for _, _, i in cells]] * 3
        assert part.newest.tolist() == [1000, 87400, 173800]
        assert part.weight.tolist() == [3 * (13 + 5) + 12] * 3


def test_rows_of_differing_lengths_and_cells_round_trip_flat() -> None:
    rows = [(_key(0), [(3, 2.0, True), (7, 0.5, False)]),
            (_key(0, b"\x00\x00\x01\x00\x00\x02\x00\x00\x03\x00\x00\x04"), [(0, 70000.0, True)]),
            (_key(86400), [(1, 1.0, True), (2, 2.0, True), (23, 3.0, True)])]
    blob = b"".join(_row(key, cells, 5) for key, cells in rows)
    block = rollup_blocks.encode(blob)
    assert block is not None
    part = rollup_blocks.decode(block)
    assert part is not None and part.width == 0
    assert part.rows == b"".join(key for key, _ in rows)
    assert part.row_len.tolist() == [13, 19, 13] and part.cells.tolist() == [2, 1, 3]
    assert part.offsets.tolist() == [3, 7, 0, 1, 2, 23]
    assert part.values.tolist() == [2.0, 0.5, 70000.0, 1.0, 2.0, 3.0]
    assert part.is_int.tolist() == [True, False, True, True, True, True]
    # The same rows read as row columns give the same part.
    plain = rollup_columns.part_of(blob)
    assert plain.rows == part.rows and plain.weight.tolist() == part.weight.tolist()


def test_integer_counts_too_large_for_int16_are_int32_and_not_integral_ones_doubles() -> None:
    for value in (40000.0, 2.0**40):  # four bytes (int32), then eight (a double)
        blob = _row(_key(0), [(0, value, True)], 1)
        block = rollup_blocks.encode(blob)
        assert block is not None
        part = rollup_blocks.decode(block)
        assert part is not None and part.values.tolist() == [[value]]
        assert len(block) == 16 + 8 + 4 + 13 + 7 + 8


def test_full_rows_from_a_block_join_as_from_row_columns() -> None:
    """Two series, two day rows each, three hourly cells per row, keys in time order as
    stored: joined series after series, each in time order (the block's offsets and flags
    broadcast, never gathered)."""
    one, two = b"\x00\x00\x01\x00\x00\x02", b"\x00\x00\x01\x00\x00\x03"
    rows = [(_key(0, one), 1.0), (_key(0, two), 10.0), (_key(86400, one), 2.0),
            (_key(86400, two), 20.0)]
    blob = b"".join(_row(key, [(o, first + o, True) for o in range(3)], 7)
                    for key, first in rows)
    block = rollup_blocks.decode(rollup_blocks.encode(blob) or b"")
    assert block is not None and rollup_columns.alike(block.offsets)
    hours = [0, 3600, 7200]
    for part in (block, rollup_columns.part_of(blob)):
        joined = rollup_columns.joined([part], 3, 3600)
        assert joined.whole.ts_ms.tolist() == [
            1000 * (base + h) for base in (0, 86400, 0, 86400) for h in hours]
        assert joined.whole.values.tolist() == [1.0, 2.0, 3.0, 2.0, 3.0, 4.0,
                                                10.0, 11.0, 12.0, 20.0, 21.0, 22.0]
        assert joined.whole.is_int.all()
        assert joined.spans.tolist() == [[0, 6, 12, 12], [6, 12, 12, 12]]
        assert joined.first_keys == [_key(0, one), _key(0, two)]


def test_an_empty_range_and_a_foreign_blob() -> None:
    assert rollup_blocks.encode(b"") == b""
    assert rollup_blocks.decode(b"") is None
    with pytest.raises(ValueError):
        rollup_blocks.decode(bytes(32))
