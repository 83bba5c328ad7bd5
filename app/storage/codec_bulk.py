"""Vectorised encoding of one series' points into OpenTSDB cells, for bulk imports.

Produces exactly the bytes the point-by-point encoder and compaction produce (see
:mod:`app.storage.codec`): per hour row one compacted column (qualifiers and values
concatenated in time order, meta byte 0x00) or, for a lone point, a single cell. Only
second-resolution timestamps take this path; millisecond ones return None and the caller
falls back to the general encoder.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app.storage.codec_cells import FLAG_BITS, FLAG_FLOAT, MAX_TIMESPAN

Cells = list[tuple[int, bytes, bytes]]


def _int_lengths(ints: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Smallest of 1, 2, 4, 8 bytes holding each value (``TSDB.addPoint``)."""
    lengths = np.full(ints.shape, 8, dtype=np.int64)
    lengths[(ints >= -(2**31)) & (ints < 2**31)] = 4
    lengths[(ints >= -(2**15)) & (ints < 2**15)] = 2
    lengths[(ints >= -128) & (ints < 128)] = 1
    return lengths


def _value_matrix(ints: npt.NDArray[np.int64], floats: npt.NDArray[np.float64],
                  is_float: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.uint8],
                                                           npt.NDArray[np.int64],
                                                           npt.NDArray[np.int64]]:
    """Each value right-aligned in 8 big-endian bytes, with its length and flags."""
    n = ints.size
    as_f32 = floats.astype(np.float32)
    fits = is_float & (as_f32.astype(np.float64) == floats)
    matrix = np.where(is_float[:, None], floats.astype(">f8").view(np.uint8).reshape(n, 8),
                      ints.astype(">i8").view(np.uint8).reshape(n, 8))
    matrix[fits, 4:] = as_f32[fits].astype(">f4").view(np.uint8).reshape(-1, 4)
    lengths: npt.NDArray[np.int64] = np.where(is_float, np.where(fits, 4, 8), _int_lengths(ints))
    flags: npt.NDArray[np.int64] = (lengths - 1) | np.where(is_float, FLAG_FLOAT, 0)
    return matrix.astype(np.uint8, copy=False), lengths, flags


def encode_series(ts: npt.NDArray[np.int64], ints: npt.NDArray[np.int64],
                  floats: npt.NDArray[np.float64],
                  is_float: npt.NDArray[np.bool_]) -> Cells | None:
    """``[(base_time_s, qualifier, value), ...]`` per hour row, or None for ms timestamps.

    Point i's value is ``floats[i]`` when ``is_float[i]`` else ``ints[i]``. A timestamp given
    twice keeps its last value (last write wins).
    """
    if ts.size == 0:
        return []
    if np.any(ts >= 2**32):  # SECOND_MASK: any millisecond timestamp
        return None
    order = np.argsort(ts, kind="stable")
    ts = ts[order]
    keep = np.append(ts[1:] != ts[:-1], True)
    order, ts = order[keep], ts[keep]
    matrix, lengths, flags = _value_matrix(ints[order], floats[order], is_float[order])
    base = ts - ts % MAX_TIMESPAN
    qualifiers = (((ts - base) << FLAG_BITS) | flags).astype(">u2").tobytes()
    values = matrix[np.arange(8) >= (8 - lengths)[:, None]].tobytes()
    value_end = np.cumsum(lengths)
    starts = np.flatnonzero(np.append(True, base[1:] != base[:-1]))
    ends = np.append(starts[1:], ts.size)
    cells: Cells = []
    for start, end in zip(starts.tolist(), ends.tolist()):
        v_start = int(value_end[start - 1]) if start else 0
        value = values[v_start:int(value_end[end - 1])]
        qualifier = qualifiers[2 * start:2 * end]
        cells.append((int(base[start]), qualifier, value if end - start == 1 else value + b"\0"))
    return cells
