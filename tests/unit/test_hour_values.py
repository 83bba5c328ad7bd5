"""A cell's value made from its hour's blob (``app/storage/hour_values.py``): the very bytes
OpenTSDB wrote, for every value kind and width, second and millisecond qualifiers; None where
the blob does not hold them; a marker no older reader inflates."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from app.storage import hour_blob, hour_values, sqlite_pack

BASE_S = 1370476800
ROW = b"\x00\x00\x01" + BASE_S.to_bytes(4, "big") + b"\x00\x00\x01\x00\x00\x01"


def _blob(points: list[tuple[int, float, bool]]) -> bytes:
    """A blob of one row whose points are ``(offset ms, value, is an integer)``."""
    ts_ms = np.array([BASE_S * 1000 + at for at, _, _ in points], np.int64)
    made = hour_blob.encode(BASE_S, [ROW], np.array([len(points)]), [100], [(1, 5)], ts_ms,
                            np.array([v for _, v, _ in points], np.float64),
                            np.array([i for _, _, i in points], np.bool_))
    assert made is not None
    return made


def _second(offset_s: int, flags: int) -> bytes:
    return (offset_s << 4 | flags).to_bytes(2, "big")


def _ms(offset_ms: int, flags: int) -> bytes:
    return (0xF0000000 | offset_ms << 6 | flags).to_bytes(4, "big")


# (qualifier flags, the value's bytes as OpenTSDB writes them, the value, an integer)
KINDS = [(0x0, struct.pack(">b", -7), -7, True), (0x1, struct.pack(">h", 300), 300, True),
         (0x3, struct.pack(">i", -70_000), -70_000, True),
         (0x7, struct.pack(">q", 2**52 - 1), 2**52 - 1, True),
         (0xB, struct.pack(">f", 12.34), struct.unpack(">f", struct.pack(">f", 12.34))[0], False),
         (0xF, struct.pack(">d", 0.1 + 1e-9), 0.1 + 1e-9, False)]


def test_every_kind_and_width_comes_back_byte_for_byte() -> None:
    qualifier = b"".join(_second(k * 10, flags) for k, (flags, _, _, _) in enumerate(KINDS))
    value = b"".join(raw for _, raw, _, _ in KINDS) + b"\x00"  # a compacted column's last byte
    blob = _blob([(k * 10_000, v, i) for k, (_, _, v, i) in enumerate(KINDS)])
    made = hour_values.value(blob, ROW, qualifier, b"\x00")
    assert made == value
    stored = hour_values.marker(len(value), b"\x00")
    assert hour_values.cell_value(blob, ROW, qualifier, stored) == value
    # A cell of some of the row's points (a late single cell beside a compacted one).
    assert hour_values.value(blob, ROW, _second(20, 0x3), b"") == KINDS[2][1]


def test_millisecond_and_mixed_qualifiers() -> None:
    blob = _blob([(1_500, 2.5, False), (2_000, 3, True)])
    qualifier = _ms(1_500, 0xF) + _second(2, 0x0)
    assert hour_values.value(blob, ROW, qualifier, b"\x01") == (
        struct.pack(">d", 2.5) + b"\x03\x01")


@pytest.mark.parametrize("qualifier", [
    _second(10, 0x0),  # no point at that time
    _second(0, 0x0),  # a float named an integer
    _second(0, 0x5),  # a 6-byte integer: no OpenTSDB width
    _second(20, 0x1),  # 70,000 named a 2-byte integer
    b"\x00",  # odd: a note's
])
def test_what_the_blob_does_not_hold_is_none(qualifier: bytes) -> None:
    blob = _blob([(0, 2.5, False), (20_000, 70_000, True)])
    assert hour_values.value(blob, ROW, qualifier, b"") is None
    assert hour_values.value(blob, ROW[:-1] + b"\x02", _second(0, 0xF), b"") is None
    with pytest.raises(ValueError):
        hour_values.cell_value(blob, ROW, qualifier, hour_values.marker(8, b""))


def test_a_missing_blob_or_a_wrong_length_raises() -> None:
    blob = _blob([(0, 2.5, False)])
    with pytest.raises(ValueError):
        hour_values.cell_value(None, ROW, _second(0, 0xF), hour_values.marker(8, b""))
    with pytest.raises(ValueError):
        hour_values.cell_value(blob, ROW, _second(0, 0xF), hour_values.marker(9, b""))


@pytest.mark.parametrize("tail", [b"", b"\x00", b"\x01\x00"])
def test_an_older_reader_fails_on_a_marker_instead_of_reading_it(tail: bytes) -> None:
    stored = hour_values.marker(360 * 4 + 1, tail)
    with pytest.raises(Exception):  # noqa: B017  # zlib's error, or unknown packing
        sqlite_pack.unpack(stored)
    with pytest.raises(Exception):  # noqa: B017
        sqlite_pack.unpack_many([stored])
    assert sqlite_pack.unpacked_length(stored) == 360 * 4 + 1  # its length, as before


def test_one_row_decoded_alone_is_what_the_whole_blob_gives() -> None:
    """``hour_blob.BlobRows`` against ``decode``, over the blob layouts: regular or not,
    seconds or milliseconds, scaled, 4- or 8-byte floats, integers or a mix."""
    rng = np.random.default_rng(3)
    keys = [ROW[:-1] + bytes([k]) for k in range(5)]
    counts = np.array([4, 0, 3, 6, 2])
    for ts_step, values in [(10_000, np.round(rng.uniform(0, 100, 15), 2)),
                            (1_500, rng.uniform(-1e6, 1e6, 15)),
                            (7_000, np.float32(rng.uniform(0, 9, 15)).astype(np.float64)),
                            (10_000, rng.integers(-2**40, 2**40, 15).astype(np.float64))]:
        regular = np.concatenate([BASE_S * 1000 + np.arange(n) * ts_step + k
                                for k, n in enumerate(counts)]).astype(np.int64)
        irregular = regular + np.concatenate([np.arange(n) ** 2 for n in counts]) * (ts_step % 7)
        for ts_ms, is_int in [(regular, np.zeros(15, np.bool_)),
                              (regular, values == np.round(values)),
                              (irregular, values == np.round(values))]:
            blob = hour_blob.encode(BASE_S, keys, counts, [1] * 5, [(1, 1)] * 5, ts_ms,
                                    values, is_int)
            assert blob is not None
            whole = hour_blob.decode(blob)
            starts = np.cumsum(counts) - counts
            for key, start, n in zip(keys, starts, counts):
                found = hour_blob.BlobRows(blob).row(key)
                assert found is not None
                assert (found[0] == whole.ts_ms[start:start + n] - BASE_S * 1000).all()
                assert found[1].tobytes() == whole.values[start:start + n].tobytes()
                assert (found[2] == whole.is_int[start:start + n]).all()
            assert hour_blob.BlobRows(blob).row(b"absent") is None
