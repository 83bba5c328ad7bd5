"""A merge's columns packed together: the very bytes of packing each one by itself."""

from __future__ import annotations

import random
import struct

from app.storage.sqlite_pack import (
    DECIMAL,
    float_widths,
    pack,
    pack_columns,
    pack_qualifier,
    pack_qualifiers,
    unpack,
    unpack_qualifier,
)

FLOAT4, FLOAT8, LONG8 = 0x0B, 0x0F, 0x07


def column(rng: random.Random, points: int, kind: str) -> tuple[bytes, bytes]:
    """A compacted column (qualifier, value) of ``points`` points 10 s apart, of one kind."""
    flags = {"four": [FLOAT4] * points, "long": [LONG8] * points,
             "mixed": [rng.choice([FLOAT4, FLOAT8]) for _ in range(points)]}.get(
        kind, [FLOAT4] * points)
    qualifier = b"".join(struct.pack(">H", (10 * i) << 4 | flag) for i, flag in enumerate(flags))
    value = b""
    for flag in flags:
        if kind == "odd":
            number = rng.random() * 1000  # no short decimal: byte planes
        elif kind == "wild":
            number = rng.choice([3e9, 1e-7, float("inf"), float("nan"), -0.0, 12.5])
        else:
            number = round(rng.uniform(-1000, 1000), rng.choice([0, 1, 2, 3]))
        value += struct.pack(">q", int(number)) if flag == LONG8 else struct.pack(
            ">f" if flag == FLOAT4 else ">d", number)
    return qualifier, value + b"\0"


def test_columns_packed_together_are_the_bytes_of_each_packed_alone() -> None:
    rng = random.Random(26)
    columns = [column(rng, rng.choice([8, 12, 16, 25, 360]),
                      rng.choice(["four", "four", "odd", "wild", "mixed", "long"]))
               for _ in range(600)]
    qualifiers, values = [c[0] for c in columns], [c[1] for c in columns]
    packed = pack_columns(qualifiers, values)
    assert packed == [pack(value, float_widths(qualifier))
                      for qualifier, value in zip(qualifiers, values)]
    assert all(unpack(found) == value for found, value in zip(packed, values) if found)
    decimal = [found for found in packed if found and found[0] == DECIMAL]
    assert len(decimal) > 100  # the path of many columns at once was taken


def test_a_collectors_columns_of_one_hour_share_their_short_keys() -> None:
    rng = random.Random(27)
    steady = column(rng, 25, "four")[0]
    others = [column(rng, n, kind)[0] for n, kind in [(7, "four"), (40, "mixed"), (12, "long")]]
    qualifiers = [steady] * 50 + others + [steady]
    keys = pack_qualifiers(qualifiers)
    assert keys == [pack_qualifier(qualifier) for qualifier in qualifiers]
    assert keys[0] is not None and unpack_qualifier(keys[0]) == steady and keys[50] is None
