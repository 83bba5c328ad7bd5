"""encode_points and encode_cells (its plain-Python twin for small batches): each point's
single cell, OpenTSDB's bytes (golden values)."""

from __future__ import annotations

import numpy as np
import pytest

from app.storage.codec_bulk import encode_cells, encode_points

T0 = 1356998400  # an hour boundary


@pytest.mark.parametrize(("ts", "value", "wide", "qualifier", "stored"), [
    (T0, 42, False, "0000", "2A"),
    (T0 + 1, -2, False, "0010", "FE"),
    (T0 + 2, 4711, False, "0021", "1267"),
    (T0 + 3, 70000, False, "0033", "00011170"),
    (T0 + 4, 2**40, False, "0047", "0000010000000000"),
    (T0 + 5, 1.5, False, "005B", "3FC00000"),            # telnet: fits a float, 4 bytes
    (T0 + 5, 1.5, True, "005F", "3FF8000000000000"),     # HTTP: always a double
    (T0 + 6, 42.2, False, "006F", "404519999999999A"),   # needs a double either way
    (T0 + 7, 1e300, False, "007F", "7E37E43C8800759C"),  # beyond float range: a double
    (T0 * 1000 + 500, 18, False, "F0007D00", "12"),      # ms: 0xF0000000 | 500 << 6
    (T0 + 3599, 1, False, "E0F0", "01"),       # 3599 << 4
    (T0 + 8, -(2**31), False, "0083", "80000000"),       # the 4-byte bounds
    (T0 + 8, 2**31, False, "0087", "0000000080000000"),
    (T0 + 9, -(2**63), False, "0097", "8000000000000000"),  # the long's bounds
    (T0 + 9, 2**63 - 1, False, "0097", "7FFFFFFFFFFFFFFF"),
    (T0 + 10, -129, False, "00A1", "FF7F"),              # the 1-byte bounds
    (T0 + 10, 127, False, "00A0", "7F"),
    (T0 * 1000 + 3599999, -1.5, True, "FDBB9FCF", "BFF8000000000000"),  # ms: 3599999 << 6 | 0xF
])
def test_single_cells(ts: int, value: int | float, wide: bool, qualifier: str,
                      stored: str) -> None:
    is_float = np.array([isinstance(value, float)])
    ints = np.array([0 if isinstance(value, float) else value], dtype=np.int64)
    bases, qualifiers, values = encode_points(np.array([ts], dtype=np.int64), ints,
                                              np.array([float(value)]), is_float, wide)
    assert bases == [T0]
    assert (qualifiers[0].hex().upper(), values[0].hex().upper()) == (qualifier, stored)
    # the same point through the small-batch encoder
    assert encode_cells([ts], [value], wide) == ([T0], [qualifiers[0]], [values[0]])
    assert (qualifiers[0].hex().upper(), values[0].hex().upper()) == (qualifier, stored)


def test_small_batches_of_mixed_points_keep_input_order() -> None:
    bases, qualifiers, values = encode_cells(
        [T0 + 3600, T0, T0 * 1000 + 1, T0 + 2], [1, 2.5, 3, np.int64(4)], wide_floats=True)
    assert bases == [T0 + 3600, T0, T0, T0]
    assert [q.hex().upper() for q in qualifiers] == ["0000", "000F", "F0000040", "0020"]
    assert [v.hex().upper() for v in values] == ["01", "4004000000000000", "03", "04"]


def test_mixed_batch_keeps_input_order() -> None:
    ts = np.array([T0 + 3600, T0, T0 * 1000 + 1], dtype=np.int64)
    bases, qualifiers, values = encode_points(
        ts, np.array([1, 0, 3], dtype=np.int64), np.array([1.0, 2.5, 3.0]),
        np.array([False, True, False]))
    assert bases == [T0 + 3600, T0, T0]
    assert [q.hex() for q in qualifiers] == ["0000", "000b", "f0000040"]
    assert [v.hex() for v in values] == ["01", "40200000", "03"]
