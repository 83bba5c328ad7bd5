"""``flatten`` takes series lying one after the other in one buffer as views, not copies."""

from __future__ import annotations

import numpy as np

from app.engine.flat import adjacent, data_address, flatten, follows
from app.engine.model import Series


def series_of(ts: np.ndarray, values: np.ndarray, is_int: np.ndarray) -> Series:
    return Series(tsuid="", tags={}, ts_ms=ts, values=values, is_int=is_int)


def test_adjacent_slices_become_one_view() -> None:
    block = np.arange(10, dtype=np.int64)
    view = adjacent([block[0:3], block[3:3], block[3:7]])
    assert view is not None and view.tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert np.shares_memory(view, block) and not view.flags.writeable


def test_gaps_other_buffers_and_lists_are_not_adjacent() -> None:
    block = np.arange(10, dtype=np.int64)
    assert adjacent([block[0:3], block[4:6]]) is None  # a gap
    assert adjacent([block[3:6], block[0:3]]) is None  # out of order
    assert adjacent([block[0:3], np.arange(3, 6)]) is None  # another buffer
    assert adjacent([np.arange(3)]) is None  # owns its data: nothing to share
    assert adjacent([[1, 2]]) is None  # type: ignore[list-item]


def test_flatten_shares_adjacent_series_and_copies_others() -> None:
    ts = np.arange(0, 60_000, 10_000, dtype=np.int64)
    values = np.arange(6, dtype=np.float64) / 2
    is_int = np.zeros(6, dtype=bool)
    a = series_of(ts[:4], values[:4], is_int[:4])
    b = series_of(ts[4:], values[4:], is_int[4:])
    assert follows(a, b) and not follows(b, a)
    flat = flatten([a, b], 0, 60_000)
    assert np.shares_memory(flat.ts_ms, ts) and np.shares_memory(flat.values, values)
    assert flat.ts_ms.tolist() == ts.tolist() and flat.offsets.tolist() == [0, 4, 6]
    assert flat.longs.tolist() == [0] * 6
    swapped = flatten([b, a], 0, 60_000)  # not adjacent in that order: a copy
    assert not np.shares_memory(swapped.ts_ms, ts)
    assert swapped.ts_ms.tolist() == ts[4:].tolist() + ts[:4].tolist()


def test_empty_slices_anywhere_add_nothing() -> None:
    block = np.arange(10, dtype=np.int64)
    view = adjacent([block[7:7], block[2:4], block[0:0], block[4:5]])
    assert view is not None and view.tolist() == [2, 3, 4]
    assert adjacent([block[0:0]]) is None


def test_follows_tells_what_adjacent_tells_of_two_series() -> None:
    block = np.arange(12, dtype=np.int64)
    other = np.arange(12, dtype=np.int32)
    arrays = [block[0:3], block[3:6], block[4:6], block[6:6], block[0:0], block[::2][:2],
              np.arange(3), other[3:6], other[0:3], [1, 2], block.reshape(3, 4)[0]]
    pairs = [(a, b) for a in arrays for b in arrays]
    for a, b in pairs:
        expected = adjacent([a, b]) is not None  # type: ignore[list-item]
        assert follows(series_of(a, a, a), series_of(b, b, b)) == expected, (a, b)  # type: ignore[arg-type]
    assert follows(series_of(block[0:3], block, block), series_of(block[3:6], block, block))


def test_data_address_is_where_the_array_starts() -> None:
    block = np.arange(100, dtype=np.float64)
    views = (block, block[7:20], block[::3], block[99:], np.zeros(0), block.reshape(10, 10)[3])
    for array in views:
        assert data_address(array) == array.__array_interface__["data"][0]
    assert data_address(block[8:]) - data_address(block[7:]) == 8
