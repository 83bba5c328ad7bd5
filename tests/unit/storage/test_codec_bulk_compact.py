"""``codec_bulk.compact_single_cells``: the embedded store's merge compacts single data cells
per row into the bytes ``codec_cells.compact_cells`` (OpenTSDB's compaction) writes."""

from __future__ import annotations

import numpy as np

from app.storage.codec_bulk import compact_single_cells, single_cell_mask
from app.storage.codec_cells import compact_cells


def compact(cells: list[tuple[int, bytes, bytes, int]]) -> list[tuple[int, bytes, bytes, int, int]]:
    """``(row id, qualifier, value, write ms)`` cells in arrival order, compacted."""
    out = compact_single_cells(
        np.array([c[0] for c in cells], np.int64), b"".join(c[1] for c in cells),
        np.array([len(c[1]) for c in cells], np.int64), b"".join(c[2] for c in cells),
        np.array([len(c[2]) for c in cells], np.int64), np.array([c[3] for c in cells], np.int64))
    return list(zip(*out))


def test_rows_compacted_in_time_order_with_the_meta_byte() -> None:
    cells = [(0, b"\x00\x10", b"\x02", 5), (1, b"\x00\x00", b"\x09", 5),
             (0, b"\x00\x00", b"\x01", 5),
             (2, b"\x00\x20", b"\x03", 6),  # 2 s, one byte
             (2, b"\xf0\x00\x03\xe7", b"\x00\x00\x00\x00\x00\x01\x00\x00", 7),  # 15 ms, 8 bytes
             (0, b"\x00\x2b", b"\x40\x49\x0f\xdb", 4)]  # 2 s, a 4-byte float
    assert compact(cells) == [
        (0, b"\x00\x00\x00\x10\x00\x2b", b"\x01\x02\x40\x49\x0f\xdb\x00", 5, 3),
        (1, b"\x00\x00", b"\x09", 5, 1),  # one point: its single cell, no meta byte
        (2, b"\xf0\x00\x03\xe7\x00\x20", b"\x00\x00\x00\x00\x00\x01\x00\x00\x03\x01", 7, 2)]


def test_a_timestamp_twice_keeps_the_newest_write_then_the_later_arrival() -> None:
    cells = [(0, b"\x00\x00", b"\x01", 9), (0, b"\x00\x10", b"\x02", 3),
             (0, b"\x00\x10", b"\x03", 3),  # the same cell again, later: wins
             (0, b"\x00\x00", b"\x04", 8)]  # arrived later, but written earlier: loses
    assert compact(cells) == [(0, b"\x00\x00\x00\x10", b"\x01\x03\x00", 9, 2)]


def test_seconds_and_milliseconds_of_one_instant_keep_the_greater_qualifier() -> None:
    # 1 s as seconds and as 1,000 ms: cell_rank among single cells of one write time
    cells = [(0, b"\xf0\x00\xfa\x00", b"\x07", 1), (0, b"\x00\x10", b"\x08", 1),
             (0, b"\x00\x20", b"\x09", 1)]
    assert compact(cells) == [(0, b"\xf0\x00\xfa\x00\x00\x20", b"\x07\x09\x01", 1, 2)]


def test_the_same_bytes_as_compact_cells() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        count = int(rng.integers(1, 12))
        seconds = rng.choice(3600, count, replace=False)
        cells: dict[bytes, bytes] = {}
        for second in seconds.tolist():
            length = int(rng.choice([1, 2, 4, 8]))
            flags = length - 1 | (0x8 if length in (4, 8) and rng.random() < 0.5 else 0)
            if rng.random() < 0.3:  # milliseconds
                qualifier = (0xF0000000 | (second * 1000 + int(rng.integers(1000))) << 6
                             | flags).to_bytes(4, "big")
            else:
                qualifier = (second << 4 | flags).to_bytes(2, "big")
            cells[qualifier] = rng.bytes(length)
        times = {q: int(rng.integers(1, 4)) for q in cells}
        expected = compact_cells(cells.items(), times)
        assert expected is not None
        ((_, qualifier, value, newest, _),) = compact(
            [(0, q, v, times[q]) for q, v in cells.items()])
        assert (qualifier, value) == expected
        assert newest == max(times.values())


def test_only_single_data_cells_are_compacted() -> None:
    qualifiers = [b"\x00\x00", b"\x00\x01", b"\xf0\x00\x00\x07", b"\x00\x10\x00\x20",
                  b"\x01\x00\x00", b"\x05\x00\x00", b"\x00\x0b", b"sum:"]
    values = [b"\x01", b"\x01", b"\x00" * 8, b"\x01\x02\x00", b"{}", b"\x00\x00\x01",
              b"\x00" * 8, b"\x01"]
    mask = single_cell_mask(b"".join(qualifiers), np.array([len(q) for q in qualifiers]),
                            np.array([len(v) for v in values]))
    # a 1-byte value flagged 2 bytes, a compacted column, an annotation, an append, an
    # 8-byte value flagged as a 4-byte float (fix_single's case), a rollup-like qualifier
    assert mask.tolist() == [True, False, True, False, False, False, False, False]
