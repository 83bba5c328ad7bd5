"""Rows not compacted yet (one cell per point) joined into one segment each, all rows of a
decode checked in one numpy pass.

A row of single second-resolution points only decodes exactly as a compacted column of the
same points: its qualifiers joined and its values joined. ``codec_decode`` takes such a row as
one segment instead of a step per cell, which was most of a fresh read's decode; checking the
rows one by one was still ~20 µs a row (a dozen numpy calls), most of a read of the current
hour of many series (one row each), so every candidate row of a call is checked at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import accumulate

import numpy as np

from app.storage.codec_cells import FLAG_BITS, LENGTH_MASK, MS_BYTE_FLAG
from app.storage.packed_cells import PackedCells

# Rows of at least this many cells are tried as single points in bulk.
SINGLES_ROW_CELLS = 8

Joined = tuple[bytes, bytes]
"""A row's qualifiers (2 bytes each, without the column prefix) and values, joined."""


def joined_singles(rows: Sequence[tuple[int, Mapping[bytes, bytes]]],
                   prefix: bytes) -> list[Joined | None]:
    """For each row ``(base_time_s, {prefix + qualifier: value})``, its qualifiers and values
    joined when it holds single second-resolution points only, else None (taken cell by cell).

    Checked so that the segment decodes exactly as its cells one by one would: every column
    is ``prefix`` + a 2-byte qualifier without the ms flag, every value as long as its flags
    say (else a cell written before 2.0 to fix, per cell), offsets strictly ascending (no
    duplicate timestamp, whose winner is decided per cell)."""
    out: list[Joined | None] = [None] * len(rows)
    width = len(prefix) + 2
    if width & 1:  # read as 2-byte words below; no store's data prefix is of odd length
        return out
    picked: list[int] = []
    counts: list[int] = []
    columns: list[bytes] = []
    values: list[bytes] = []
    ends: list[Sequence[int] | np.ndarray] = []
    for j, (_, cells) in enumerate(rows):
        count = len(cells)
        if count < SINGLES_ROW_CELLS:
            continue
        packed = cells if isinstance(cells, PackedCells) else None  # joined as read (HBase)
        joined = b"".join(cells) if packed is None else packed.joined_columns
        if len(joined) != count * width or not joined.startswith(prefix):
            continue
        picked.append(j)
        counts.append(count)
        columns.append(joined)
        if packed is not None:
            values.append(packed.joined_values)
            ends.append(packed.value_ends)
        else:
            values.append(b"".join(cells.values()))
            ends.append(list(accumulate(map(len, cells.values()))))
    if not picked:
        return out
    # Each column as 2-byte words: the prefix's, then the qualifier.
    grid = np.frombuffer(b"".join(columns), ">u2").reshape(-1, width // 2)
    cells_per_row = np.array(counts, np.int64)
    starts = np.cumsum(cells_per_row) - cells_per_row
    bad = _bad_cells(grid, prefix, _lengths(ends, values, cells_per_row), starts)
    bad_rows = np.logical_or.reduceat(bad, starts)
    quals = grid[:, -1].tobytes()
    for i, (j, start) in enumerate(zip(picked, starts.tolist())):
        if not bad_rows[i]:
            out[j] = (quals[2 * start:2 * (start + counts[i])], values[i])
    return out


def _lengths(ends: list[Sequence[int] | np.ndarray], values: list[bytes],
             counts: np.ndarray) -> np.ndarray:
    """Each value's length, across rows: the rows' value ends made one run of ends (each
    row's moved on by the bytes of the rows before it), then their differences."""
    totals = np.fromiter(map(len, values), np.int64, len(values))
    moved = np.concatenate(ends).astype(np.int64) + np.repeat(np.cumsum(totals) - totals, counts)
    return np.diff(moved, prepend=0)


def _bad_cells(grid: np.ndarray, prefix: bytes, lengths: np.ndarray,
               starts: np.ndarray) -> np.ndarray:
    """Per cell, whether it keeps its row from being one segment: another column prefix,
    an ms qualifier, a value not as long as its flags say, an offset not after the one
    before it in its row."""
    words = grid[:, -1]
    bad = (grid[:, :-1] != np.frombuffer(prefix, ">u2")).any(axis=1)
    bad |= words >= MS_BYTE_FLAG << 8
    bad |= (words & LENGTH_MASK) + 1 != lengths
    offsets = words >> FLAG_BITS
    not_after = np.zeros(words.size, dtype=bool)
    not_after[1:] = offsets[1:] <= offsets[:-1]
    not_after[starts] = False  # a row's first cell comes after no cell of its row
    return bad | not_after
