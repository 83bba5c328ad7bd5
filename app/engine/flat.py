"""Many series in one set of flat arrays, so each pipeline stage is a handful of numpy calls.

Series ``i`` owns the slice ``offsets[i]:offsets[i + 1]`` of every array. Within a series the
timestamps are strictly ascending. ``longs`` carries the exact 64-bit value of integer points
(OpenTSDB's long arithmetic needs it beyond 2**53); ``is_float`` marks points that are doubles.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from app.engine.model import BoolArray, Float64Array, Int64Array, Series


@dataclass
class FlatSeries:
    ts_ms: Int64Array
    values: Float64Array
    longs: Int64Array
    is_float: BoolArray
    offsets: Int64Array

    @property
    def n_series(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> Int64Array:
        return np.diff(self.offsets)

    def series_ids(self) -> Int64Array:
        """The owning series of every point."""
        return np.repeat(np.arange(self.n_series, dtype=np.int64), self.lengths)

    def take(self, rows: Sequence[int] | Int64Array) -> FlatSeries:
        """The sub-collection of the given series, in the given order."""
        rows = np.asarray(rows, dtype=np.int64)
        starts, lengths = self.offsets[rows], self.lengths[rows]
        index = ranges_to_index(starts, lengths)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        return FlatSeries(self.ts_ms[index], self.values[index], self.longs[index],
                          self.is_float[index], offsets)

    def with_mask(self, keep: BoolArray) -> FlatSeries:
        """Drop the points where ``keep`` is False; every series stays (possibly empty)."""
        kept_before = np.concatenate(([0], np.cumsum(keep))).astype(np.int64)
        return FlatSeries(self.ts_ms[keep], self.values[keep], self.longs[keep],
                          self.is_float[keep], kept_before[self.offsets])


def ranges_to_index(starts: Int64Array, lengths: Int64Array) -> Int64Array:
    """Concatenate ``arange(start, start + length)`` for every pair, without a Python loop."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    nonempty = lengths > 0
    starts, lengths = starts[nonempty], lengths[nonempty]
    steps = np.ones(total, dtype=np.int64)
    heads = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    steps[0] = starts[0]
    steps[heads[1:]] = starts[1:] - (starts[:-1] + lengths[:-1] - 1)
    return np.cumsum(steps)


def longs_of(series: Series) -> Int64Array:
    """Exact 64-bit values of the integer points (0 elsewhere)."""
    if series.long_values is not None:
        return np.asarray(series.long_values, dtype=np.int64)
    # Exact for |v| < 2**53, which is every value a double can hold without loss.
    return np.where(series.is_int, series.values, 0.0).astype(np.int64)


def _data_address_reader() -> Callable[[npt.NDArray[Any]], int]:
    """How to read an array's data pointer. ``__array_interface__`` builds a dict per call
    (~0.9 us; three per series in ``flatten`` were ~10 % of a warm rollup read); on CPython
    the pointer is the field right after the object header (numpy's ``PyArrayObject_fields``),
    read directly when a probe array shows it there, else through the interface."""
    probe = np.zeros(4)[1:]
    header = object.__basicsize__
    read = ctypes.c_void_p.from_address
    if read(id(probe) + header).value == probe.__array_interface__["data"][0]:
        return lambda array: int(read(id(array) + header).value or 0)
    return lambda array: int(array.__array_interface__["data"][0])


data_address = _data_address_reader()
"""The address of an ndarray's first element."""


def adjacent(arrays: Sequence[npt.NDArray[Any]]) -> npt.NDArray[Any] | None:
    """One read-only view over ``arrays`` when they lie one after the other in one buffer
    (the series of one decode pass, or of one cached block), else None: then concatenating
    them would only copy what is already in place."""
    if not all(isinstance(array, np.ndarray) and array.ndim == 1 for array in arrays):
        return None
    # numpy may place an empty slice anywhere; it adds nothing
    filled = [array for array in arrays if array.size]
    if not filled or filled[0].base is None:
        return None
    first = filled[0]
    base, dtype = first.base, first.dtype
    address = data_address(first)
    for array in filled:
        if (array.base is not base or array.dtype != dtype or not array.flags.c_contiguous
                or data_address(array) != address):
            return None
        address += array.nbytes
    total = sum(array.size for array in filled)
    return np.lib.stride_tricks.as_strided(first, shape=(total,), writeable=False)


def follows(before: Series, after: Series) -> bool:
    """Whether ``after``'s timestamps start where ``before``'s end, in one buffer: what
    :func:`adjacent` tells of the two, without making the view (a step per series)."""
    first, then = before.ts_ms, after.ts_ms
    if not all(isinstance(array, np.ndarray) and array.ndim == 1 for array in (first, then)):
        return False
    if not first.size or not then.size:
        filled = first if first.size else then
        return filled.size > 0 and filled.base is not None and filled.flags.c_contiguous
    return (first.base is not None and then.base is first.base and first.dtype == then.dtype
            and first.flags.c_contiguous and then.flags.c_contiguous
            and data_address(first) + first.nbytes == data_address(then))


def _joined(arrays: Sequence[npt.NDArray[Any]], dtype: type) -> npt.NDArray[Any]:
    view = adjacent(arrays)
    if view is not None and view.dtype == dtype:
        return view
    return np.concatenate([np.asarray(a, dtype=dtype) for a in arrays])


def flatten(series: Sequence[Series], start_ms: int, end_ms: int, *,
            doubles: bool = False) -> FlatSeries:
    """Concatenate ``series`` (views, not copies, of arrays already in place one after the
    other), keeping only points with ``start_ms <= ts < end_ms``. ``doubles``: every point
    is a double (downsampled series, ``app.engine.staged``): their flags are not read."""
    lengths = np.array([len(s.ts_ms) for s in series], dtype=np.int64)
    total = int(lengths.sum())
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    if total == 0:
        return FlatSeries(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64),
                          np.zeros(0, dtype=bool), offsets)
    if doubles:
        is_float = constant(True, np.bool_, total)
        longs = constant(0, np.int64, total)
    else:
        is_int = _joined([s.is_int for s in series], np.bool_)
        if is_int.any():
            longs = np.concatenate([longs_of(s) for s in series])
        else:
            # Read-only zeros that take no memory: only integer points need their longs.
            longs = np.broadcast_to(np.zeros(1, dtype=np.int64), (total,))
        is_float = ~is_int
    flat = FlatSeries(
        ts_ms=_joined([s.ts_ms for s in series], np.int64),
        values=_joined([s.values for s in series], np.float64),
        longs=longs,
        is_float=is_float,
        offsets=offsets,
    )
    # Every point inside, seen at each series' ends (its points are in time order).
    filled = lengths > 0
    ts_ms = flat.ts_ms
    if (bool((ts_ms[offsets[:-1][filled]] >= start_ms).all())
            and bool((ts_ms[offsets[1:][filled] - 1] < end_ms).all())):
        return flat
    return flat.with_mask((flat.ts_ms >= start_ms) & (flat.ts_ms < end_ms))


def constant(value: Any, dtype: type, size: int) -> npt.NDArray[Any]:
    """``size`` copies of ``value`` as a read-only view of one element (no memory per point)."""
    return np.broadcast_to(np.array(value, dtype=dtype), (size,))


def constant_value(array: npt.NDArray[Any]) -> Any | None:
    """The one value of an array made by :func:`constant`, else None."""
    if array.ndim == 1 and array.size and array.strides == (0,):
        return array[0]
    return None


def concatenated(arrays: Sequence[npt.NDArray[Any]]) -> npt.NDArray[Any]:
    """``np.concatenate``, except that views of one same value stay one view."""
    values = {constant_value(a) if a.size else None for a in arrays if a.size}
    if len(values) == 1 and None not in values:
        return constant(values.pop(), arrays[0].dtype.type, sum(a.size for a in arrays))
    return np.concatenate(arrays)


def concat(pieces: Sequence[FlatSeries]) -> FlatSeries:
    """One collection holding the series of ``pieces`` in order."""
    if len(pieces) == 1:
        return pieces[0]
    lengths = np.concatenate([p.lengths for p in pieces])
    return FlatSeries(np.concatenate([p.ts_ms for p in pieces]),
                      np.concatenate([p.values for p in pieces]),
                      concatenated([p.longs for p in pieces]),
                      concatenated([p.is_float for p in pieces]),
                      np.concatenate(([0], np.cumsum(lengths))).astype(np.int64))


def count_inside(series: Series, start_ms: int, end_ms: int) -> int:
    """Points of one series with ``start_ms <= ts < end_ms``."""
    ts_ms = np.asarray(series.ts_ms)
    if len(ts_ms) and ts_ms[0] >= start_ms and ts_ms[-1] < end_ms:  # most often: all of it
        return len(ts_ms)
    return int(ts_ms.searchsorted(end_ms) - ts_ms.searchsorted(start_ms))
