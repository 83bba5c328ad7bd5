"""A row's cells kept joined as read (``PackedCells``): a dict whose entries are made only
when read as one, and what a read learns from the joined bytes without them (its size,
whether a column is a note's)."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from app.storage.codec import RowKeyLayout
from app.storage.packed_cells import PackedCells
from app.tsdb.read.decode import has_notes, row_annotations, stored_bytes

CELLS = {b"t:\x00\x10": b"\x05", b"t:\x00\x27": b"\x00\x07", b"t:\x01\x00\x00": b"{}"}


def packed(numpy_ends: bool = True) -> PackedCells:
    """``CELLS`` as a reply carries them: joined, with where each ends."""
    column_ends, value_ends = [4, 8, 13], [1, 3, 5]
    if numpy_ends:
        return PackedCells(b"t:\x00\x10t:\x00\x27t:\x01\x00\x00", np.array(column_ends),
                           b"\x05\x00\x07{}", np.array(value_ends))
    return PackedCells(b"t:\x00\x10t:\x00\x27t:\x01\x00\x00", column_ends,
                       b"\x05\x00\x07{}", value_ends)


@pytest.mark.parametrize("numpy_ends", [True, False])
def test_the_dict_is_the_cells_and_is_made_on_first_use(numpy_ends: bool) -> None:
    cells = packed(numpy_ends)
    assert len(cells) == 3 and cells and not cells.filled  # the count needs no entries
    assert cells.value_sizes.tolist() == [1, 2, 2]
    assert cells.stored_bytes(10) == 3 * 10 + 13 + 5 and not cells.filled
    assert cells.has_odd_column() and not cells.filled
    assert cells == CELLS and cells.filled
    assert list(cells.items()) == list(CELLS.items())  # in the order read
    for use in (lambda c: CELLS == c, lambda c: dict(c) == CELLS, lambda c: {**c} == CELLS,
                lambda c: list(c) == list(CELLS), lambda c: c[b"t:\x00\x27"] == b"\x00\x07",
                lambda c: b"t:\x00\x10" in c, lambda c: c.get(b"t:\x00\x10") == b"\x05",
                lambda c: list(c.values()) == list(CELLS.values()),
                lambda c: sorted(c.items()) == sorted(CELLS.items()),
                lambda c: not c != CELLS, lambda c: (c | {}) == CELLS,
                lambda c: repr(c) == repr(CELLS)):
        assert use(packed(numpy_ends))
    assert packed(numpy_ends) == packed(not numpy_ends)  # neither filled before
    for copied in (copy.copy(packed()), copy.deepcopy(packed()),
                   pickle.loads(pickle.dumps(packed())), packed().copy()):
        assert type(copied) is dict and copied == CELLS
    empty = PackedCells(b"", [], b"", [])
    assert len(empty) == 0 and not empty and empty == {} and not empty.has_odd_column()


def test_a_note_is_an_odd_column_anywhere() -> None:
    def row(widths: list[int]) -> PackedCells:
        ends = np.cumsum(widths)
        return PackedCells(b"c" * int(ends[-1]), ends, b"", np.zeros(len(widths), np.int64))
    assert not row([4] * 50).has_odd_column()  # single points
    assert not row([4, 8, 4]).has_odd_column()  # a compacted column among them
    assert row([4, 4, 5, 4]).has_odd_column()  # a note's 3-byte qualifier
    assert row([4] * 20 + [7]).has_odd_column()  # a 5-byte one, last
    assert row([5]).has_odd_column()


def test_the_reads_bookkeeping_is_the_same_from_joined_bytes() -> None:
    key = b"\x00\x00\x01" + bytes(4) + b"\x00\x00\x01\x00\x00\x02"
    for cells in (packed(), packed(numpy_ends=False), dict(CELLS)):
        # Per cell the 13-byte key, and the 13 bytes of columns and 5 of values.
        assert stored_bytes(key, cells) == 3 * 13 + 13 + 5
        assert has_notes(cells)
    two = {b"t:\x00\x10": b"\x05", b"t:\x00\x27": b"\x00\x07"}
    assert not has_notes(PackedCells(b"t:\x00\x10t:\x00\x27", [4, 8], b"\x05\x00\x07", [1, 3]))
    assert not has_notes(two)
    assert row_annotations(RowKeyLayout(), key, PackedCells(
        b"t:\x00\x10t:\x00\x27", [4, 8], b"\x05\x00\x07", [1, 3])) == []
