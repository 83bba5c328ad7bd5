"""The hour columns' blob (``app/storage/hour_blob.py``): every layout gives back the very
points, bit for bit, row keys, weights and stamps it was made from."""

from __future__ import annotations

import numpy as np
import pytest

from app.storage import hour_blob
from app.storage.hour_blob import (
    FLAG_ALL_INTS,
    FLAG_FLOAT32,
    FLAG_NO_INTS,
    FLAG_REGULAR,
    FLAG_SCALED,
    FLAG_SECONDS,
    FLAG_ZLIB,
)

BASE_S = 1370476800
KEYS = [b"\x00\x00\x01" + BASE_S.to_bytes(4, "big") + b"\x00\x00\x01\x00\x00\x02",
        b"\x00\x00\x01" + BASE_S.to_bytes(4, "big") + b"\x00\x00\x01\x00\x00\x03\x00\x00\x04"]


def _flags(blob: bytes) -> int:
    return int(np.frombuffer(blob, hour_blob.HEAD_DTYPE, 1)[0]["flags"])


def _round_trip(offsets_ms: list[list[int]], values: list[list[float]],
                is_int: list[list[bool]], compress: bool = False) -> int:
    points = np.array([len(row) for row in offsets_ms], np.int64)
    ts_ms = np.array([BASE_S * 1000 + o for row in offsets_ms for o in row], np.int64)
    flat_values = np.array([v for row in values for v in row], np.float64)
    flat_ints = np.array([i for row in is_int for i in row], np.bool_)
    blob = hour_blob.encode(BASE_S, KEYS, points, [111, 222], [(3, 1700), (1, 1800)], ts_ms,
                            flat_values, flat_ints, compress=compress)
    assert blob is not None
    rows = hour_blob.decode(blob)
    assert rows.key_list() == KEYS and rows.base_s == BASE_S
    assert rows.points.tolist() == points.tolist()
    assert rows.stored_bytes.tolist() == [111, 222]
    assert rows.cells.tolist() == [3, 1] and rows.newest_ms.tolist() == [1700, 1800]
    assert rows.ts_ms.tolist() == ts_ms.tolist()
    assert rows.values.view(np.uint64).tolist() == flat_values.view(np.uint64).tolist()
    assert rows.is_int.tolist() == flat_ints.tolist()
    return _flags(blob)


def test_evenly_spaced_decimals_are_two_byte_integers_and_a_step() -> None:
    flags = _round_trip([[0, 10_000, 20_000], [5_000, 15_000]],
                        [[12.34, 0.01, 99.99], [-3.5, 1e-6]], [[False] * 3, [False] * 2])
    assert flags == FLAG_REGULAR | FLAG_SCALED | FLAG_NO_INTS


def test_integers_uneven_seconds() -> None:
    flags = _round_trip([[0, 10_000, 11_000], [3_599_000]], [[1, -7, 40_000], [2**31 - 1]],
                        [[True] * 3, [True]])
    assert flags == FLAG_SECONDS | FLAG_SCALED | FLAG_ALL_INTS


def test_milliseconds_four_byte_floats_and_mixed_kinds() -> None:
    assert _round_trip([[1, 2, 999], [3_599_999]], [[2**-20, 3 * 2**-21, -(2**-22)], [2**-23]],
                       [[False] * 3, [False]]) == FLAG_FLOAT32 | FLAG_NO_INTS
    # An integer beside a double that no decimal scale gives back: doubles and flags.
    assert _round_trip([[0, 1_000, 3_000], [2_000]], [[2**60, 0.1 + 0.2, 1.0], [float("nan")]],
                       [[True, False, True], [False]]) == FLAG_SECONDS


def test_values_beyond_a_float32_or_a_scale_are_doubles() -> None:
    assert _round_trip([[0, 10_000], [0]], [[1e200, 3e150], [-1e300]],
                       [[False] * 2, [False]]) == FLAG_REGULAR | FLAG_NO_INTS


def test_deflated() -> None:
    flags = _round_trip([[0, 10_000], [0]], [[1.5, 2.5], [3.5]], [[False] * 2, [False]],
                        compress=True)
    assert flags & FLAG_ZLIB


def test_what_does_not_fit_has_no_blob_and_a_bad_blob_is_refused() -> None:
    outside = np.array([(BASE_S - 1) * 1000], np.int64)  # before the base time
    assert hour_blob.encode(BASE_S, KEYS[:1], np.array([1]), [1], [(1, 1)], outside,
                            np.ones(1), np.zeros(1, np.bool_)) is None
    with pytest.raises(ValueError):
        hour_blob.decode(b"\x02" + bytes(40))  # another version
    with pytest.raises(ValueError):
        hour_blob.decode(b"\x01")
