"""Vectorised decoding of OpenTSDB data cells into numpy arrays.

Grammar of the cells decoded (see :mod:`app.storage.codec_cells` for the full one)::

    Single cell   = Qualifier(s|ms) -> Value
    Compacted     = Qualifier(s|ms){2,} -> Value{2,} meta(1)
    Append        = 0x05 0x00 0x00 -> (Qualifier(s|ms) Value)*

How: every data cell is a *segment* of points. Segments whose qualifiers all have one width
(seconds: 2 bytes, ms: 4 bytes) are concatenated, across all rows of a call, into one buffer that
numpy reads as ``>u2`` / ``>u4`` words, so offsets, flags and lengths come out without a
per-point Python loop. Values are read in one gather: for each point, the 8-byte big-endian
window that *ends* at its last byte (the value buffer starts with 8 zero bytes), which is the
value itself for 8-byte values, holds a 4-byte float in its low half, and gives a 1/2/4-byte
integer after a sign-extending shift pair. When all points share one encoding the buffer is
simply viewed as an array.

A segment whose value bytes or qualifier widths disagree with its group falls back to the
per-point path of ``codec_cells``; mixed-resolution columns and append columns take that path
directly (they are rare).

Duplicate timestamps: the greatest :func:`~app.storage.codec_cells.cell_rank` wins (newest write
time when known, then compacted < single < append, then qualifier bytes); within one cell, the
later entry wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from app.storage.codec_cells import (
    APPEND_COLUMN_PREFIX,
    FLAG_FLOAT,
    FLAGS_MASK,
    LENGTH_MASK,
    MS_BYTE_FLAG,
    MS_FLAG_BITS,
    MS_MIXED_COMPACT,
    Cell,
    IllegalDataError,
    cell_kind,
    cell_points,
    fix_single,
)

Int64s = npt.NDArray[np.int64]
UInt8s = npt.NDArray[np.uint8]
Raw = tuple[int, bytes, bytes, int]
"""A cell for the per-point path: (row index, qualifier, stored value, write time)."""

_PAD = bytes(8)
_FLOAT8 = FLAG_FLOAT | 0x7
_FLOAT4 = FLAG_FLOAT | 0x3
_VALID_FLAGS = np.zeros(FLAGS_MASK + 1, dtype=bool)
_VALID_FLAGS[[0x0, 0x1, 0x3, 0x7, _FLOAT4, _FLOAT8]] = True  # RowSeq.extract*Value
_LENGTHS = (np.arange(FLAGS_MASK + 1) & LENGTH_MASK).astype(np.uint8) + 1
_SIGN_SHIFTS = ((64 - 8 * _LENGTHS.astype(np.int64)) % 64).astype(np.uint8)
_SECOND_OFFSETS_MS = np.arange(1 << 12, dtype=np.int64) * 1000
_DTYPES = {0x0: np.dtype("i1"), 0x1: np.dtype(">i2"), 0x3: np.dtype(">i4"),
           0x7: np.dtype(">i8"), _FLOAT4: np.dtype(">f4"), _FLOAT8: np.dtype(">f8")}


@dataclass(eq=False)
class DecodedRow:
    """Data points of one series, strictly ascending in time."""

    ts_ms: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]
    is_int: npt.NDArray[np.bool_]
    has_duplicates: bool = False

    def __len__(self) -> int:
        return int(self.ts_ms.size)


class _Part(NamedTuple):
    """Decoded points of some segments, in segment order."""

    ts_ms: Int64s
    flags: UInt8s
    value_end: Int64s  # end of each point's value in ``values``, not counting the pad
    values: bytes  # _PAD, then the value bytes of every point
    counts: Int64s  # points per segment
    rows: list[int]
    write_ts: list[int]
    quals: list[bytes]


class _Group:
    """Segments whose qualifiers are all ``width`` bytes wide, decoded in one numpy pass."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.dtype = np.dtype(">u2" if width == 2 else ">u4")
        self.quals: list[bytes] = []
        self.vals: list[bytes] = []  # value bytes without the meta byte
        self.origs: list[bytes] = []  # the stored value, for the per-point path
        self.rows: list[int] = []
        self.write_ts: list[int] = []

    def decode(self, row_base_ms: Int64s) -> tuple[_Part | None, list[Raw]]:
        """The decoded part, and the segments refused for the per-point path."""
        if not self.quals:
            return None, []
        words = np.frombuffer(b"".join(self.quals), self.dtype).astype(self.dtype.newbyteorder("="))
        counts = np.fromiter(map(len, self.quals), np.int64, len(self.quals)) // self.width
        flags = (words & FLAGS_MASK).astype(np.uint8)
        value_end = np.cumsum(_LENGTHS[flags], dtype=np.int64)
        bad = self._bad_segments(words, value_end, counts)
        if bad.size:
            refused = [(self.rows[i], self.quals[i], self.origs[i], self.write_ts[i]) for i in bad]
            self._drop(bad)
            return self.decode(row_base_ms)[0], refused
        if self.width == 2:
            ts_ms = _SECOND_OFFSETS_MS[words >> 4]
        else:
            ts_ms = ((words & 0x0FFFFFC0) >> MS_FLAG_BITS).astype(np.int64)
        ts_ms += np.repeat(row_base_ms[np.array(self.rows, dtype=np.int64)], counts)
        values = b"".join(chain((_PAD,), self.vals))
        return _Part(ts_ms, flags, value_end, values, counts, self.rows, self.write_ts,
                     self.quals), []

    def _bad_segments(self, words: npt.NDArray[np.unsignedinteger], value_end: Int64s,
                      counts: Int64s) -> Int64s:
        """Segments whose value bytes do not add up, or that hold a qualifier of the other
        width (a mixed column whose meta byte does not say so)."""
        seg_end = value_end[np.cumsum(counts) - 1]
        seg_bytes = np.diff(seg_end, prepend=0)
        bad = seg_bytes != np.fromiter(map(len, self.vals), np.int64, len(self.vals))
        top = words >> (8 * self.width - 4)
        wrong_width = top == 0xF if self.width == 2 else top != 0xF
        if wrong_width.any():
            starts = np.cumsum(counts) - counts
            bad |= np.add.reduceat(wrong_width, starts, dtype=np.int64) > 0
        return np.flatnonzero(bad)

    def _drop(self, bad: Int64s) -> None:
        keep = np.ones(len(self.quals), dtype=bool)
        keep[bad] = False
        for name in ("quals", "vals", "origs", "rows", "write_ts"):
            items = getattr(self, name)
            setattr(self, name, [item for item, kept in zip(items, keep, strict=True) if kept])


class _Batch:
    """Cells of many hour rows of one series, collected for one vectorised decode."""

    def __init__(self, write_ts: Mapping[bytes, int] | None) -> None:
        self.write_ts = write_ts
        self.row_base_ms: list[int] = []
        self.seconds = _Group(2)
        self.millis = _Group(4)
        self.slow: list[Raw] = []

    def add_row(self, base_time_s: int, cells: Iterable[Cell]) -> None:
        row = len(self.row_base_ms)
        self.row_base_ms.append(base_time_s * 1000)
        write_ts = self.write_ts
        for q, v in cells:
            n = len(q)
            wt = 0 if write_ts is None else write_ts.get(q, -1)
            if n & 1 or not n:  # annotations and unknown extended formats are not data
                if n == 3 and q[0] == APPEND_COLUMN_PREFIX:
                    self.slow.append((row, q, v, wt))
            elif n == 2 or (n == 4 and q[0] >= MS_BYTE_FLAG):  # a single data point
                orig = v
                if (q[-1] & LENGTH_MASK) + 1 != len(v):
                    q, v = fix_single(q, v)
                self._add(self.seconds if n == 2 else self.millis, row, q, v, orig, wt)
            elif not v or v[-1] & MS_MIXED_COMPACT or (q[0] >= MS_BYTE_FLAG and n & 3):
                self.slow.append((row, q, v, wt))
            else:  # compacted, and by its first qualifier and meta byte of one resolution
                self._add(self.seconds if q[0] < MS_BYTE_FLAG else self.millis,
                          row, q, v[:-1], v, wt)

    @staticmethod
    def _add(group: _Group, row: int, q: bytes, v: bytes, orig: bytes, wt: int) -> None:
        group.quals.append(q)
        group.vals.append(v)
        group.origs.append(orig)
        group.rows.append(row)
        group.write_ts.append(wt)

    def finish(self) -> DecodedRow:
        row_base_ms = np.array(self.row_base_ms, dtype=np.int64)
        seconds, refused_s = self.seconds.decode(row_base_ms)
        millis, refused_ms = self.millis.decode(row_base_ms)
        slow = _decode_slow(self.slow + refused_s + refused_ms, self.row_base_ms)
        parts = [part for part in (seconds, millis, slow) if part is not None]
        if not parts:
            return DecodedRow(np.empty(0, np.int64), np.empty(0, np.float64),
                              np.empty(0, np.bool_))
        part = parts[0] if len(parts) == 1 else _concat(parts)
        values, is_int = _decode_values(part.values, part.flags, part.value_end)
        return _ascending(part, values, is_int)


def _decode_slow(raws: list[Raw], row_base_ms: list[int]) -> _Part | None:
    """The per-point path, for mixed-resolution and append columns."""
    ts_ms: list[int] = []
    flags: list[int] = []
    values: list[bytes] = [_PAD]
    counts, rows, write_ts, quals = [], [], [], []
    for row, q, v, wt in raws:
        kind = cell_kind(q)
        points = cell_points(kind, q, v) if kind is not None else []
        if not points:
            continue
        base_ms = row_base_ms[row]
        ts_ms.extend(base_ms + offset_ms for offset_ms, _, _ in points)
        flags.extend(pq[-1] & FLAGS_MASK for _, pq, _ in points)
        values.extend(pv for _, _, pv in points)
        counts.append(len(points))
        rows.append(row)
        write_ts.append(wt)
        quals.append(q)
    if not counts:
        return None
    flag_array = np.array(flags, dtype=np.uint8)
    return _Part(np.array(ts_ms, dtype=np.int64), flag_array,
                 np.cumsum(_LENGTHS[flag_array], dtype=np.int64), b"".join(values),
                 np.array(counts, dtype=np.int64), rows, write_ts, quals)


def _concat(parts: list[_Part]) -> _Part:
    shifts = np.cumsum([0] + [len(p.values) - len(_PAD) for p in parts[:-1]])
    return _Part(np.concatenate([p.ts_ms for p in parts]),
                 np.concatenate([p.flags for p in parts]),
                 np.concatenate([p.value_end + shift for p, shift in zip(parts, shifts)]),
                 b"".join(chain((_PAD,), (memoryview(p.values)[len(_PAD):] for p in parts))),
                 np.concatenate([p.counts for p in parts]),
                 [row for p in parts for row in p.rows],
                 [wt for p in parts for wt in p.write_ts],
                 [q for p in parts for q in p.quals])


def _decode_values(buf: bytes, flags: UInt8s, value_end: Int64s
                   ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Values as float64 (a float32 widens exactly, as Java's ``(double) f``) and is_int."""
    census = np.bincount(flags, minlength=FLAGS_MASK + 1)
    invalid = np.flatnonzero(census & ~_VALID_FLAGS)
    if invalid.size:
        kind = "Floating point" if invalid[0] & FLAG_FLOAT else "Integer"
        raise IllegalDataError(f"{kind} value not on 8/4/2/1 bytes (flags={invalid[0]:#x})")
    dominant = int(census.argmax())
    if census[dominant] == flags.size:  # one encoding for all: the buffer is a plain array
        values = np.frombuffer(buf, _DTYPES[dominant], offset=len(_PAD)).astype(np.float64)
        return values, np.full(flags.size, not dominant & FLAG_FLOAT)
    windows = np.ndarray(shape=(len(buf) - 7,), dtype=">i8", buffer=buf, strides=(1,))
    bits = windows[value_end].astype(np.int64)  # the 8 bytes ending where each value ends
    is_int = flags < FLAG_FLOAT
    if census[FLAG_FLOAT:].sum() * 2 < flags.size:
        values = _sign_extend(bits, flags).astype(np.float64)
        floats = np.flatnonzero(~is_int)
    else:
        values = bits.copy().view(np.float64)
        floats = np.flatnonzero(flags == _FLOAT4)
        ints = np.flatnonzero(is_int)
        values[ints] = _sign_extend(bits[ints], flags[ints])
    if floats.size:
        values[floats] = _float_bits(bits[floats], flags[floats])
    return values, is_int


def _sign_extend(bits: Int64s, flags: UInt8s) -> Int64s:
    """The low 1/2/4/8 bytes of each window as a signed integer."""
    shifts = _SIGN_SHIFTS[flags]
    return np.right_shift(np.left_shift(bits, shifts), shifts)


def _float_bits(bits: Int64s, flags: UInt8s) -> npt.NDArray[np.float64]:
    """Windows of float32 (low half) or float64 values as float64, widening exactly."""
    single = (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    with np.errstate(invalid="ignore"):  # a signalling NaN widens quietly, as in Java
        return np.where(flags == _FLOAT4, single, bits.view(np.float64))


def _ascending(part: _Part, values: npt.NDArray[np.float64],
               is_int: npt.NDArray[np.bool_]) -> DecodedRow:
    """Sort by time and keep one point per timestamp, the winner of its duplicates."""
    ts = part.ts_ms
    if ts.size < 2 or bool((ts[1:] > ts[:-1]).all()):
        return DecodedRow(ts, values, is_int)
    order = np.argsort(ts, kind="stable")
    ordered_ts = ts[order]
    dup = ordered_ts[1:] == ordered_ts[:-1]
    has_duplicates = bool(dup.any())
    if has_duplicates:
        order = _winners(part, order, dup)
    return DecodedRow(ts[order], values[order], is_int[order], has_duplicates)


def _winners(part: _Part, order: Int64s, dup: npt.NDArray[np.bool_]) -> Int64s:
    """Indexes, ascending in time, of the one point kept per timestamp."""
    ts = part.ts_ms
    seg_of_point = np.repeat(np.arange(part.counts.size), part.counts)
    rows = np.array(part.rows, dtype=np.int64)
    clashing = np.concatenate([order[1:][dup], order[:-1][dup]])
    # Rank only the cells of rows that have duplicates: a Python sort, but a small one.
    segs = np.flatnonzero(np.isin(rows, rows[seg_of_point[clashing]])).tolist()
    segs.sort(key=lambda i: (part.rows[i], part.write_ts[i], cell_kind(part.quals[i]),
                             part.quals[i]))
    rank = np.zeros(part.counts.size, dtype=np.int64)
    rank[segs] = np.arange(1, len(segs) + 1)
    order = np.lexsort((np.arange(ts.size), rank[seg_of_point], ts))
    ordered_ts = ts[order]
    last = np.ones(ts.size, dtype=bool)
    last[:-1] = ordered_ts[1:] != ordered_ts[:-1]
    return order[last]


def decode_row(base_time_s: int, cells: Iterable[Cell],
               write_ts: Mapping[bytes, int] | None = None) -> DecodedRow:
    """Decode the ``t`` cells (family stripped, any order, any kind) of one hour row.

    Annotations and unknown qualifiers are skipped. ``write_ts`` maps a qualifier to its cell's
    write time, so the newest cell wins a duplicate; without it compacted < single < append,
    and between two cells of a kind the one later in qualifier byte order wins.
    """
    batch = _Batch(write_ts)
    batch.add_row(base_time_s, cells)
    return batch.finish()


def decode_rows(rows: Iterable[tuple[int, Iterable[Cell]]]) -> DecodedRow:
    """Decode many ``(base_time_s, cells)`` hour rows of one series in one vectorised pass."""
    batch = _Batch(None)
    for base_time_s, cells in rows:
        batch.add_row(base_time_s, cells)
    return batch.finish()
