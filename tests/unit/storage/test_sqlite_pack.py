"""The embedded store's packing at rest: every packed value and key comes back byte for byte."""

from __future__ import annotations

import math
import random
import struct
import zlib
from collections.abc import Sequence

import pytest

from app.storage.sqlite_pack import (
    DECIMAL,
    PLAIN,
    PLANES,
    Unpacked,
    float_widths,
    pack,
    pack_qualifier,
    unpack,
    unpack_many,
    unpack_qualifier,
    unpack_qualifiers,
    unpacked_length,
)


def floats(values: list[float]) -> bytes:
    """A compacted value of 4-byte floats, by hand: the floats, then OpenTSDB's 0 byte."""
    return b"".join(struct.pack(">f", v) for v in values) + b"\0"


def test_floats_of_two_decimals_pack_as_decimal_integers() -> None:
    value = floats([12.34, 99.99, 0.01, 57.0, 3.5] * 40)
    packed = pack(value, [4] * 200)
    assert packed is not None and packed[:2] == bytes((DECIMAL, 2))
    assert unpacked_length(packed) == 801 and unpack(packed) == value


def test_doubles_and_floats_mixed_as_the_writer_stores_them() -> None:
    # What /api/put stores for 12.34 (a double) and 57 as a float (4 bytes), by hand.
    widths = [8, 4, 8, 8, 4] * 30
    value = b"".join(struct.pack(">d" if w == 8 else ">f", v) for w, v in
                     zip(widths, [12.34, 57.0, 0.07, 99.99, 3.5] * 30)) + b"\0"
    packed = pack(value, widths)
    assert packed is not None and packed[:2] == bytes((DECIMAL, 2))
    assert len(packed) < len(value) // 4 and unpack(packed) == value


@pytest.mark.parametrize("odd", [math.nan, math.inf, 1e-30, 3.0e38])
def test_floats_without_a_short_decimal_fall_back_to_the_other_methods(odd: float) -> None:
    value = floats([1.5] * 99 + [odd])
    packed = pack(value, [4] * 100)
    assert packed is not None and packed[0] in (PLAIN, PLANES)
    assert unpack(packed) == value


def test_longs_pack_as_byte_planes_and_small_or_random_values_stay_raw() -> None:
    longs = b"".join(struct.pack(">q", 1_000_000 + 7 * i) for i in range(100)) + b"\0"
    packed = pack(longs)
    assert packed is not None and unpack(packed) == longs
    assert pack(b"\x01" * 63) is None  # under 64 bytes
    assert pack(bytes(range(256))) is None  # saves nothing


def test_a_steady_column_of_seconds_has_a_short_odd_key() -> None:
    qualifier = b"".join(struct.pack(">H", (i * 10) << 4 | 0x0B) for i in range(360))
    key = pack_qualifier(qualifier)
    # The first two qualifiers, 360 points, one flag (0x0B), offset delta 10 (zigzag 20) x359.
    assert key == bytes.fromhex("000b00ab" "e802" "000b" "14" "e702")  # odd: no padding
    assert unpack_qualifier(key) == qualifier and float_widths(qualifier) == [4] * 360


def test_irregular_and_millisecond_columns() -> None:
    gap = [i * 10 for i in range(50)] + [600 + i * 10 for i in range(50)]  # one gap of 110 s
    qualifier = b"".join(struct.pack(">H", s << 4 | 0x07) for s in gap)
    key = pack_qualifier(qualifier)
    assert key is not None and len(key) % 2 == 1 and unpack_qualifier(key) == qualifier
    assert float_widths(qualifier) is None  # 8-byte longs
    irregular = [0, 7, 9, 30, 31, 600, 601, 3599]  # every difference another: no shorter
    assert pack_qualifier(b"".join(struct.pack(">H", s << 4) for s in irregular)) is None
    ms = b"".join(struct.pack(">I", 0xF0000000 | (i * 10) << 6 | 0x0B) for i in range(8))
    assert pack_qualifier(ms) is None and float_widths(ms) is None
    assert pack_qualifier(qualifier[:14]) is None  # 7 points: too short to bother


def test_a_column_of_random_two_decimal_values_packs_near_its_information() -> None:
    # The bench's gauge: 360 values of two decimals in [0, 100), each a double unless a
    # 4-byte float holds it exactly (as the writer stores them). Their information is
    # 360 x log2(10,001) bits = 598 bytes; deflate of the whole column at zlib's default
    # memory level took 772 bytes, blocks of 512 symbols (one per byte plane) take ~730.
    draw = random.Random(7)
    numbers = [draw.randrange(10_000) / 100 for _ in range(360)]
    widths = [4 if struct.unpack(">f", struct.pack(">f", v))[0] == v else 8 for v in numbers]
    value = b"".join(struct.pack(">d" if w == 8 else ">f", v)
                     for w, v in zip(widths, numbers)) + b"\0"
    packed = pack(value, widths)
    assert packed is not None and packed[:2] == bytes((DECIMAL, 2))
    assert 598 < len(packed) < 750 and unpack(packed) == value
    assert 4 in widths and 8 in widths  # both widths gathered back


def qualifiers(seconds: list[int], flags: list[int]) -> bytes:
    return b"".join(struct.pack(">H", s << 4 | f) for s, f in zip(seconds, flags))


def test_a_scans_cells_unpacked_together_come_back_byte_for_byte() -> None:
    # What a scan's batch holds: columns of every packing, in any order, each its own
    # count of points and decimals; unpacked in one pass, each must be the value packed.
    draw = random.Random(3)
    numbers = [draw.randrange(100_000) / 1000 for _ in range(300)]
    mixed = [4 if struct.unpack(">f", struct.pack(">f", v))[0] == v else 8 for v in numbers]
    columns = [
        (floats([12.34, 99.99, 0.01, 57.0, 3.5] * 40), [4] * 200),  # 4-byte floats, 2 decimals
        (b"".join(struct.pack(">d" if w == 8 else ">f", v) for w, v in zip(mixed, numbers))
         + b"\0", mixed),  # mixed widths, 3 decimals
        (b"".join(struct.pack(">d", v) for v in [0.5, 7.25] * 20) + b"\0", [8] * 40),
        (floats([1.5] * 99 + [math.nan]), [4] * 100),  # not decimal: deflated as it is
        (b"".join(struct.pack(">q", 1_000_000 + 7 * i) for i in range(100)) + b"\0", None),
        (floats([-2.5, 0.0, -0.125] * 30), [4] * 90),
    ]
    values = [value for value, _ in columns]
    packed = [pack(value, widths) for value, widths in columns]
    plain = b"OpenTSDB " * 20  # method 1 by hand: the header (documented), then deflate
    values.append(plain)
    packed.append(bytes((PLAIN, 0)) + len(plain).to_bytes(4, "little") + zlib.compress(plain))
    assert all(one is not None for one in packed)
    assert sorted({one[0] for one in packed if one}) == [PLAIN, PLANES, DECIMAL]
    order = [5, 1, 0, 6, 4, 2, 3, 1]  # a column twice, the kinds interleaved
    assert unpack_many([packed[at] for at in order if packed[at]]) == [values[at] for at in order]
    assert unpack_many([]) == []


def test_a_scans_short_keys_unpacked_together_come_back_byte_for_byte() -> None:
    steady = qualifiers([i * 10 for i in range(360)], [0x0B] * 360)  # one run, one flag
    gap = qualifiers([i * 10 for i in range(50)] + [600 + i * 10 for i in range(50)],
                     [0x07] * 100)  # two runs
    two = qualifiers([5 + i * 10 for i in range(37)], [0x0F, 0x0B, 0x0F] * 12 + [0x0B])
    nibbles = qualifiers([i * 60 for i in range(21)],
                         [0x00, 0x01, 0x03, 0x07, 0x0B, 0x0F, 0x01] * 3)
    back = qualifiers([3000 - i * 7 for i in range(40)], [0x0B] * 40)  # falling offsets
    given = [steady, gap, two, nibbles, back]
    keys = [pack_qualifier(qualifier) for qualifier in given]
    assert all(key is not None and len(key) % 2 == 1 for key in keys)
    order = [3, 0, 2, 1, 4, 0]
    assert unpack_qualifiers([keys[at] for at in order if keys[at]]) == [given[at] for at in order]
    assert unpack_qualifiers([key for key in keys[:2] if key]) == given[:2]  # one kind of flags
    assert unpack_qualifiers([key for key in keys[2:3] if key]) == given[2:3]
    assert unpack_qualifiers([]) == []


def test_values_unpacked_lately_are_found_by_their_packed_bytes_and_forgotten_when_full() -> None:
    value = floats([12.34, 99.99, 0.01, 57.0, 3.5] * 40)  # 801 bytes
    other = floats([1.25] * 100)
    packed, packed_other = pack(value, [4] * 200), pack(other, [4] * 100)
    assert packed is not None and packed_other is not None
    asked: list[int] = []

    def unpack_counted(items: Sequence[bytes]) -> list[bytes]:
        asked.append(len(items))
        return unpack_many(items)

    # Packed and unpacked: 39 + 801 and 26 + 401 bytes; room for one of them, not both.
    unpacked = Unpacked(unpack_counted, max_bytes=1000)
    assert unpacked([packed, packed]) == [value, value] and asked == [1]  # once each
    assert unpacked([packed]) == [value] and asked == [1]  # found: not unpacked again
    assert unpacked([packed_other, packed]) == [other, value] and asked == [1, 1]
    assert unpacked([packed]) == [value] and asked == [1, 1, 1]  # full: it started over
