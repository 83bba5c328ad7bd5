"""Vectorised encoding of points into OpenTSDB cells.

Produces exactly the bytes the point-by-point encoder and compaction produce (see
:mod:`app.storage.codec`). :func:`encode_points` gives every point its single cell (the
write path: ``/api/put`` and the line protocol); :func:`encode_series` gives one series'
points one compacted column per hour row (bulk imports; second timestamps only).
:func:`encode_cells` is :func:`encode_points` for small batches, in plain Python: below a
hundred points or so numpy's fixed cost per call is the larger (50 points: 78 µs through
numpy, 19 µs here).
"""

from __future__ import annotations

from collections.abc import Sequence
from struct import Struct
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from app.storage.codec import encode_value
from app.storage.codec_cells import (
    FLAG_BITS,
    FLAG_FLOAT,
    MAX_TIMESPAN,
    MS_FLAG,
    MS_FLAG_BITS,
    MS_MIXED_COMPACT,
)

Cells = list[tuple[int, bytes, bytes]]
SECONDS_LIMIT = 2**32  # SECOND_MASK: a timestamp at or above it is in milliseconds
_DOUBLE = Struct(">d")
WIDE_FLOAT_FLAGS = FLAG_FLOAT | 0x7  # an 8-byte double


def _int_lengths(ints: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Smallest of 1, 2, 4, 8 bytes holding each value (``TSDB.addPoint``)."""
    lengths = np.full(ints.shape, 8, dtype=np.int64)
    lengths[(ints >= -(2**31)) & (ints < 2**31)] = 4
    lengths[(ints >= -(2**15)) & (ints < 2**15)] = 2
    lengths[(ints >= -128) & (ints < 128)] = 1
    return lengths


def _value_matrix(ints: npt.NDArray[np.int64], floats: npt.NDArray[np.float64],
                  is_float: npt.NDArray[np.bool_], wide_floats: bool = False
                  ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Each value right-aligned in 8 big-endian bytes, with its length and flags.

    :param wide_floats: every float on 8 bytes (``addPoint(double)``, as OpenTSDB's HTTP put
        does); otherwise 4 bytes where ``(float) d == d`` (the telnet put and the importer).
    """
    n = ints.size
    with np.errstate(over="ignore"):  # a double beyond float range becomes inf: not a fit
        as_f32 = floats.astype(np.float32)
    fits = is_float & (as_f32.astype(np.float64) == floats) & (not wide_floats)
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


class CellColumns(NamedTuple):
    """Each point's single cell in columnar form: its row's base time, its qualifier and value
    bytes (each concatenated in point order) and their lengths."""

    base_times_s: npt.NDArray[np.int64]
    qualifiers: bytes
    qualifier_lengths: npt.NDArray[np.int64]
    values: bytes
    value_lengths: npt.NDArray[np.int64]


def encode_columns(ts: npt.NDArray[np.int64], ints: npt.NDArray[np.int64],
                   floats: npt.NDArray[np.float64], is_float: npt.NDArray[np.bool_],
                   wide_floats: bool = False) -> CellColumns:
    """Each point's single cell, columnar (:class:`CellColumns`), with no step per point.

    Timestamps are positive seconds or milliseconds (OpenTSDB's SECOND_MASK rule); point i's
    value is ``floats[i]`` when ``is_float[i]`` else ``ints[i]`` (see :func:`_value_matrix`).
    """
    is_ms = ts >= SECONDS_LIMIT
    seconds = np.where(is_ms, ts // 1000, ts)
    base = seconds - seconds % MAX_TIMESPAN
    matrix, lengths, flags = _value_matrix(ints, floats, is_float, wide_floats)
    qualifier = np.where(is_ms, MS_FLAG | ((ts - base * 1000) << MS_FLAG_BITS) | flags,
                         ((ts - base) << FLAG_BITS) | flags)
    q_lengths: npt.NDArray[np.int64] = np.where(is_ms, 4, 2)
    q_matrix = qualifier.astype(">u4").view(np.uint8).reshape(-1, 4)
    q_bytes = q_matrix[np.arange(4) >= (4 - q_lengths)[:, None]].tobytes()
    v_bytes = matrix[np.arange(8) >= (8 - lengths)[:, None]].tobytes()
    return CellColumns(base, q_bytes, q_lengths, v_bytes, lengths)


def encode_points(ts: npt.NDArray[np.int64], ints: npt.NDArray[np.int64],
                  floats: npt.NDArray[np.float64], is_float: npt.NDArray[np.bool_],
                  wide_floats: bool = False) -> tuple[list[int], list[bytes], list[bytes]]:
    """Each point's single cell: ``(base_times_s, qualifiers, values)``, one entry per point
    (:func:`encode_columns` cut into one ``bytes`` per field)."""
    if ts.size == 0:
        return [], [], []
    columns = encode_columns(ts, ints, floats, is_float, wide_floats)
    return (columns.base_times_s.tolist(),
            _cut(columns.qualifiers, columns.qualifier_lengths),
            _cut(columns.values, columns.value_lengths))


def _cut(joined: bytes, lengths: npt.NDArray[np.int64]) -> list[bytes]:
    ends = np.cumsum(lengths).tolist()
    return [joined[start:end] for start, end in zip([0, *ends[:-1]], ends)]


def encode_cells(timestamps: Sequence[int], values: Sequence[int | float],
                 wide_floats: bool = False) -> tuple[list[int], list[bytes], list[bytes]]:
    """:func:`encode_points` without numpy, for small batches: each point's
    ``(base_time_s, qualifier, value_bytes)`` as ``codec.point_cell`` gives it, one list each.

    Timestamps are positive seconds or milliseconds; values ints within a signed long or
    finite floats (``wide_floats``: every float on 8 bytes, as OpenTSDB's HTTP put writes
    them). The common point (seconds, a Python int or float) is encoded inline; anything
    else goes through ``codec.encode_value``.
    """
    bases: list[int] = []
    qualifiers: list[bytes] = []
    raws: list[bytes] = []
    pack_double = _DOUBLE.pack
    for ts, value in zip(timestamps, values):
        if type(value) is int and -0x8000_0000 <= value < 0x8000_0000:
            if -0x80 <= value < 0x80:
                flags, raw = 0, value.to_bytes(1, "big", signed=True)
            elif -0x8000 <= value < 0x8000:
                flags, raw = 1, value.to_bytes(2, "big", signed=True)
            else:
                flags, raw = 3, value.to_bytes(4, "big", signed=True)
        elif wide_floats and type(value) is float:
            flags, raw = WIDE_FLOAT_FLAGS, pack_double(value)
        else:  # 8-byte integers, narrow floats, numpy scalars: the reference encoder
            flags, raw = encode_value(value)
        if ts < SECONDS_LIMIT:
            base = ts - ts % MAX_TIMESPAN
            qualifiers.append((((ts - base) << FLAG_BITS) | flags).to_bytes(2, "big"))
        else:
            seconds = ts // 1000
            base = seconds - seconds % MAX_TIMESPAN
            qualifiers.append((MS_FLAG | ((ts - base * 1000) << MS_FLAG_BITS) | flags)
                              .to_bytes(4, "big"))
        bases.append(base)
        raws.append(raw)
    return bases, qualifiers, raws


class CompactedCells(NamedTuple):
    """Cells of many rows compacted per row (:func:`compact_single_cells`): one output cell
    per row, in row order (by row id)."""

    row_ids: list[int]
    qualifiers: list[bytes]
    values: list[bytes]
    newest_ms: list[int]  # the greatest write time among the row's input cells
    points: list[int]


def single_cell_mask(qualifiers: bytes, q_lengths: npt.NDArray[np.int64],
                     v_lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """Which cells are single data points a compacted column may hold as they are: a 2-byte
    qualifier, or a 4-byte one of milliseconds, whose length flags give the value's length
    (a cell that needs ``fix_single``'s fixups, an annotation, an append, a rollup or
    histogram cell is none)."""
    q_ends = np.cumsum(q_lengths)
    raw = np.frombuffer(qualifiers + b"\0", np.uint8)  # an empty qualifier reads a 0
    first, last = raw[q_ends - q_lengths], raw[np.maximum(q_ends - 1, 0)]
    shaped = (q_lengths == 2) | ((q_lengths == 4) & (first >= 0xF0))
    mask: npt.NDArray[np.bool_] = shaped & (v_lengths == (last & 0x7).astype(np.int64) + 1)
    return mask


def compact_single_cells(row_ids: npt.NDArray[np.int64], qualifiers: bytes,
                         q_lengths: npt.NDArray[np.int64], values: bytes,
                         v_lengths: npt.NDArray[np.int64],
                         write_ms: npt.NDArray[np.int64]) -> CompactedCells:
    """Single data cells (:func:`single_cell_mask`; qualifiers and values back to back, in
    arrival order) compacted per row as ``codec_cells.compact_cells`` compacts a row: points
    in time order, the qualifiers concatenated, the values concatenated and the meta byte
    (``MS_MIXED_COMPACT`` when seconds and milliseconds mix, else 0) when there are two
    points or more; a row of one point keeps its single cell as it is. Of two cells at one
    time the one with the newest write time wins, then the greater qualifier (the reader's
    ``cell_rank`` among single cells), then the later arrival (a cell written twice).

    The same bytes as ``compact_cells`` without a Python step per point: the embedded store's
    staging merge calls it for tens of thousands of cells, where the per-point path costs
    microseconds a point (``tests/unit/storage/test_codec_bulk_compact.py`` checks both
    agree)."""
    count = row_ids.size
    if count == 0:
        return CompactedCells([], [], [], [], [])
    q_starts = np.cumsum(q_lengths) - q_lengths
    raw = np.frombuffer(qualifiers + b"\0\0", np.uint8).astype(np.int64)
    word2 = raw[q_starts] << 8 | raw[q_starts + 1]
    word4 = word2 << 16 | raw[q_starts + 2] << 8 | raw[q_starts + 3]
    is_ms = q_lengths == 4
    offset_ms = np.where(is_ms, (word4 & 0x0FFFFFC0) >> MS_FLAG_BITS, (word2 >> FLAG_BITS) * 1000)
    q_rank = np.where(is_ms, word4, word2 << 16)  # the qualifiers' byte order, as one integer
    order = np.lexsort((np.arange(count), q_rank, write_ms, offset_ms, row_ids))
    rows, offsets = row_ids[order], offset_ms[order]
    last = np.append((rows[1:] != rows[:-1]) | (offsets[1:] != offsets[:-1]), True)
    keep = order[last]  # the winner of each (row, time), by row then time
    kept_rows = row_ids[keep]
    starts = np.flatnonzero(np.append(True, kept_rows[1:] != kept_rows[:-1]))
    ends = np.append(starts[1:], keep.size)
    q_joined = gather(qualifiers, q_starts[keep], q_lengths[keep])
    v_starts = np.cumsum(v_lengths) - v_lengths
    v_joined = gather(values, v_starts[keep], v_lengths[keep])
    q_ends = np.cumsum(q_lengths[keep]).tolist()
    v_ends = np.cumsum(v_lengths[keep]).tolist()
    mixed = (np.maximum.reduceat(q_lengths[keep], starts)
             != np.minimum.reduceat(q_lengths[keep], starts)).tolist()
    # Every input cell counts towards its row's write time, a losing duplicate too.
    by_row = np.argsort(row_ids, kind="stable")
    row_starts = np.flatnonzero(np.append(True, np.diff(row_ids[by_row]) != 0))
    newest = np.maximum.reduceat(write_ms[by_row], row_starts).tolist()
    out_q, out_v = [], []
    for start, end, is_mixed in zip(starts.tolist(), ends.tolist(), mixed):
        q_from = q_ends[start - 1] if start else 0
        v_from = v_ends[start - 1] if start else 0
        out_q.append(q_joined[q_from:q_ends[end - 1]])
        value = v_joined[v_from:v_ends[end - 1]]
        meta = bytes((MS_MIXED_COMPACT if is_mixed else 0,))
        out_v.append(value if end - start == 1 else value + meta)
    return CompactedCells(kept_rows[starts].tolist(), out_q, out_v, newest,
                          (ends - starts).tolist())


def gather(joined: bytes, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
            ) -> bytes:
    """The segments ``joined[start:start + length]`` back to back, by one fancy index."""
    if not lengths.size:
        return b""
    ends = np.cumsum(lengths)
    index = np.repeat(starts - (ends - lengths), lengths) + np.arange(int(ends[-1]))
    return np.frombuffer(joined, np.uint8)[index].tobytes()
