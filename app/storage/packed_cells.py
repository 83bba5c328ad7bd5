"""A stored row's cells as a dict that keeps them joined, as a reply carried them, and makes
its entries only when something reads it as a dict.

The HBase backend reads a row's columns and values as two joined byte strings
(``hbase_reply``, ``hbase_native.cellblock``); the decoder's bulk path for a row not
compacted yet wants exactly those (``codec_singles.joined_singles``), and a read's
bookkeeping only its size (:meth:`PackedCells.stored_bytes`) and whether a column is odd
(:meth:`PackedCells.has_odd_column`: a note). Splitting a row of one cell per point into a
key and a value object per cell, and a dict entry for each, was most of the client's CPU of a
fresh read (~0.8 µs a cell), and that read never looks at them. So the dict is filled from
the joined bytes on first use of any dict method (``len`` excepted: the cell count is known).
Everything else sees a plain ``dict`` (rows are never modified after a read); a copy or
pickle of one is a plain ``dict``. A row's columns are distinct (a scan reads one version of
each), so its ``len`` is its cell count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

Ends = list[int] | npt.NDArray[np.int64]  # where each cell ends in a row's joined bytes


def split(joined: bytes, ends: Ends) -> list[bytes]:
    """``joined`` cut at ``ends`` (where each piece ends)."""
    if isinstance(ends, np.ndarray):
        ends = ends.tolist()
    if not ends:
        return []
    # Slices made in C (map), not a Python step per cell.
    return list(map(joined.__getitem__, map(slice, [0, *ends[:-1]], ends)))


def sizes(ends: Ends) -> npt.NDArray[np.int64]:
    """Each piece's length, from where each ends."""
    at = np.asarray(ends, np.int64)
    return np.concatenate([at[:1], at[1:] - at[:-1]])


class PackedCells(dict[bytes, bytes]):
    """``{column: value}`` in HBase's column order, also kept as ``joined_columns`` (the
    columns joined, in that order) with ``column_ends`` (where each ends), and
    ``joined_values`` with ``value_ends``; the dict's entries are made on first use."""

    __slots__ = ("joined_columns", "column_ends", "joined_values", "value_ends", "count",
                 "filled")

    def __init__(self, joined_columns: bytes, column_ends: Ends, joined_values: bytes,
                 value_ends: Ends) -> None:
        super().__init__()
        self.joined_columns = joined_columns
        self.column_ends = column_ends
        self.joined_values = joined_values
        self.value_ends = value_ends
        self.count = len(column_ends)
        self.filled = False

    def fill(self) -> None:
        """The dict's entries, from the joined bytes (once)."""
        if not self.filled:
            # Marked filled only once it is (a row read by two threads: both fill it, alike).
            dict.update(self, zip(split(self.joined_columns, self.column_ends),
                                  split(self.joined_values, self.value_ends), strict=True))
            self.filled = True

    @property
    def value_sizes(self) -> npt.NDArray[np.int64]:
        """Each value's length, in column order."""
        return sizes(self.value_ends)

    def stored_bytes(self, key_bytes: int) -> int:
        """What the cells weigh as HBase stores them (``decode.stored_bytes``): per cell the
        row key, column and value."""
        return key_bytes * self.count + len(self.joined_columns) + len(self.joined_values)

    def has_odd_column(self) -> bool:
        """Whether a column is of odd length (a note's qualifier is 3 or 5 bytes): whether
        an end is odd (the ends before the first odd column are all even)."""
        ends = self.column_ends
        if isinstance(ends, np.ndarray):
            return bool((ends & 1).any())
        return any(end & 1 for end in ends)

    def __len__(self) -> int:
        return dict.__len__(self) if self.filled else self.count

    def __eq__(self, other: object) -> bool:
        self.fill()
        if isinstance(other, PackedCells):
            other.fill()
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # as dict's

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (dict(self.items()),)

    def copy(self) -> dict[bytes, bytes]:
        return dict(self.items())


def _filling(name: str) -> Callable[..., Any]:
    """``dict``'s method ``name``, on the entries filled first."""
    method = getattr(dict, name)

    def call(self: PackedCells, *args: Any, **kwargs: Any) -> Any:
        self.fill()
        return method(self, *args, **kwargs)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = method.__doc__
    return call


# Every other dict method that reads or changes the entries.
for _name in ("__iter__", "__reversed__", "__getitem__", "__contains__", "__repr__",
              "__or__", "__ror__", "__ior__", "__setitem__", "__delitem__", "get", "keys",
              "values", "items", "setdefault", "pop", "popitem", "update", "clear"):
    setattr(PackedCells, _name, _filling(_name))
