"""Rollup cells byte for byte: OpenTSDB 2.4's own vectors (``test/rollup/TestRollupUtils``)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.storage.codec_rollup import (
    build_rollup_qualifier,
    column_bytes,
    column_parts,
    decode_modern_rows,
    decode_rollup_cell,
    encode_rollup_cells,
    rollup_base_time,
    rollup_cell,
)

# Thu, 06 Jun 2013 15:00:00 / 15:35:25 / 15:59:59 GMT
TOP, MID, END = 1370530800, 1370532925, 1370534399


@pytest.mark.parametrize(("ts_s", "units", "multiplier", "base_s"), [
    (TOP, "h", 1, TOP), (MID, "h", 1, TOP), (END, "h", 1, TOP),
    (1370520000, "h", 6, 1370520000), (TOP, "h", 6, 1370520000),
    (1370541599, "h", 6, 1370520000),
    (1370520000, "h", 2, 1370520000), (1370523660, "h", 2, 1370520000),
    (1370527199, "h", 2, 1370520000),
    (1370476800, "d", 1, 1370476800), (MID, "d", 1, 1370476800),
    (1370563199, "d", 1, 1370476800),
    (MID, "n", 1, 1370044800),  # 1 Jun 2013
    (MID, "y", 1, 1356998400),  # 1 Jan 2013
])
def test_base_time_matches_opentsdb(ts_s: int, units: str, multiplier: int,
                                    base_s: int) -> None:
    assert rollup_base_time(ts_s, units, multiplier) == base_s


def test_negative_timestamp_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        rollup_base_time(-1, "h", 1)


@pytest.mark.parametrize(("ts_s", "interval_s", "intervals", "expected"), [
    (TOP, 1, 3600, bytes([42, 0x00, 0x07])),
    (MID, 1, 3600, bytes([42, 0x84, 0xD7])),
    (END, 1, 3600, bytes([42, 0xE0, 0xF7])),
    (TOP, 30, 120, bytes([42, 0x00, 0x07])),
    (MID, 30, 120, bytes([42, 0x04, 0x67])),
    (END, 30, 120, bytes([42, 0x07, 0x77])),
])
def test_qualifier_matches_opentsdb(ts_s: int, interval_s: int, intervals: int,
                                    expected: bytes) -> None:
    assert build_rollup_qualifier(ts_s, TOP, 7, 42, interval_s, intervals) == expected


@pytest.mark.parametrize(("interval_s", "intervals"), [(1, 3600), (30, 120)])
def test_qualifier_past_the_row_is_refused(interval_s: int, intervals: int) -> None:
    with pytest.raises(ValueError, match="greater than the configured intervals"):
        build_rollup_qualifier(TOP + 3600, TOP, 7, 42, interval_s, intervals)


def test_cells_encode_values_as_raw_points_do() -> None:
    # sum id 0, 10-minute interval, 15:30 → offset 3 → 0x0030 | flags
    assert rollup_cell(TOP + 1800, TOP, 42, 0, 600, 6) == (b"\x00\x00\x30", b"\x2a")
    assert rollup_cell(TOP + 1800, TOP, 300, 1, 600, 6) == (b"\x01\x00\x31", b"\x01\x2c")
    assert rollup_cell(TOP, TOP, 1.5, 2, 600, 6) == (b"\x02\x00\x0b",
                                                      struct.pack(">f", 1.5))
    assert rollup_cell(TOP, TOP, 0.1, 3, 600, 6) == (b"\x03\x00\x0f",
                                                      struct.pack(">d", 0.1))


def test_wide_floats_are_always_doubles() -> None:
    # 2.4's HTTP /api/rollup: `fitsInFloat ? float : double` is a double, so 1.5 takes 8 bytes
    assert rollup_cell(TOP, TOP, 1.5, 2, 600, 6, wide_floats=True) == (
        b"\x02\x00\x0f", struct.pack(">d", 1.5))
    assert rollup_cell(TOP, TOP, 42, 2, 600, 6, wide_floats=True) == (b"\x02\x00\x00", b"*")


def test_decode_inverts_encode() -> None:
    qualifier, value = rollup_cell(MID, TOP, -7, 5, 60, 60)
    cell = decode_rollup_cell(qualifier, value, TOP, 60)
    assert cell is not None
    assert (cell.aggregator_id, cell.prefix, cell.ts_ms, cell.value, cell.is_int) == \
        (5, None, (TOP + 35 * 60) * 1000, -7.0, True)


def test_decode_reads_the_old_prefixed_layout() -> None:
    # "sum:" + a raw 2-byte qualifier (offset 2 intervals, 8-byte double), as 2.4 still reads.
    cell = decode_rollup_cell(b"sum:\x00\x2f", struct.pack(">d", 2.5), TOP, 600)
    assert cell is not None
    assert (cell.aggregator_id, cell.prefix, cell.ts_ms, cell.value, cell.is_int) == \
        (None, "sum", (TOP + 1200) * 1000, 2.5, False)


@pytest.mark.parametrize("qualifier", [b"\x00\x07", b"\x00\x00\x00\x00\x07", b"x"])
def test_decode_skips_other_qualifiers(qualifier: bytes) -> None:
    assert decode_rollup_cell(qualifier, b"\x01", TOP, 60) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 59), st.one_of(
    st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False))),
    min_size=1, max_size=30))
def test_vectorised_cells_equal_one_by_one(points: list[tuple[int, int | float]]) -> None:
    stamps = np.array([TOP + 60 * minute for minute, _ in points], np.int64)
    as_int = np.array([isinstance(v, int) for _, v in points], bool)
    values = np.array([float(v) for _, v in points], np.float64)
    longs = [v for _, v in points]
    # integers must be exact in a double for the vectorised path (the caller ensures it)
    as_int &= np.abs(values) < 2.0**53
    for wide in (False, True):
        qualifiers, raws = encode_rollup_cells(stamps, np.full(stamps.size, TOP), values,
                                               as_int, 3, 60, 60, wide_floats=wide)
        for i, (qualifier, raw) in enumerate(zip(qualifiers, raws)):
            number = int(longs[i]) if as_int[i] else float(values[i])
            assert (qualifier, raw) == rollup_cell(int(stamps[i]), TOP, number, 3, 60, 60,
                                                   wide_floats=wide)


# --- many rows at once, and their columnar form -------------------------------------------

def test_decode_modern_rows_decodes_every_aggregate_and_flags_rows_that_do_not_add_up() -> None:
    # Row 0: sum (id 0) of the 2nd interval = 5 (a 1-byte long), count (id 1) of it = 2.5
    # (a 4-byte float); row 1: one cell whose flags say 2 bytes but whose value has 1.
    qualifiers = b"\x00\x00\x10" + b"\x01\x00\x1b" + b"\x00\x00\x01"
    values = b"\x05" + b"\x40\x20\x00\x00" + b"\x07"
    cells = decode_modern_rows(qualifiers, values, np.array([2, 1]), np.array([5, 1]))
    assert cells.good.tolist() == [True, False]
    assert cells.row_of.tolist() == [0, 0, 1]
    assert cells.aggregator_id.tolist() == [0, 1, 0]
    assert cells.offset.tolist() == [1, 1, 0]
    assert cells.value[:2].tolist() == [5.0, 2.5] and np.isnan(cells.value[2])
    assert cells.is_int.tolist() == [True, False, True]
    assert cells.width.tolist() == [1, 4, 2]


def test_column_parts_lay_out_head_key_aligned_doubles_offsets_and_flags() -> None:
    qualifiers = b"\x00\x00\x10" + b"\x00\x00\x20" + b"\x01\x00\x1b"
    values = b"\x05" + b"\xff" + b"\x40\x20\x00\x00"
    cells = decode_modern_rows(qualifiers, values, np.array([3]), np.array([6]))
    key = b"KEY"
    parts = dict(column_parts(cells, 0, key, 0x0102030405))
    assert sorted(parts) == [0, 1]
    blob = parts[0]
    # head: key length 3, 2 cells, 2 value bytes, newest write time (little-endian), then the
    # key, 3 zeros to 24 bytes, two doubles, two offsets, two flags, zeros to a multiple of 8.
    assert blob[:18] == bytes([3, 0, 2, 0, 0, 0, 2, 0, 0, 0, 5, 4, 3, 2, 1, 0, 0, 0])
    assert blob[18:24] == b"KEY\x00\x00\x00"
    assert np.frombuffer(blob, "<f8", 2, 24).tolist() == [5.0, -1.0]
    assert np.frombuffer(blob, "<u2", 2, 40).tolist() == [1, 2]
    assert blob[44:46] == b"\x01\x01" and blob[46:] == bytes(2) and len(blob) == 48
    assert len(blob) == column_bytes(len(key), 2) and len(parts[1]) == column_bytes(3, 1)
