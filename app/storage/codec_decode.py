"""Vectorised decoding of OpenTSDB data cells into numpy arrays.

Grammar of the cells decoded (see :mod:`app.storage.codec_cells` for the full one)::

    Single cell   = Qualifier(s|ms) -> Value
    Compacted     = Qualifier(s|ms){2,} -> Value{2,} meta(1)
    Append        = 0x05 0x00 0x00 -> (Qualifier(s|ms) Value)*

How: every data cell is a *segment* of points. Segments whose qualifiers all have one width
(seconds: 2 bytes, ms: 4 bytes) are concatenated, across all rows of a call, into one buffer that
numpy reads as ``>u2`` / ``>u4`` words: offsets, flags and lengths come out without a per-point
Python loop, the value bytes are gathered per length class (or viewed directly when all points
share one encoding). A segment fails over to the per-point path of ``codec_cells`` when its
value length or qualifier widths disagree with that assumption; mixed-resolution columns and
append columns take that path directly (they are rare).

Duplicate timestamps: the greatest :func:`~app.storage.codec_cells.cell_rank` wins (newest write
time when known, then compacted < single < append, then qualifier bytes); within one cell, the
later entry wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from app.storage.codec_cells import (
    COMPACTED,
    FLAG_BITS,
    FLAG_FLOAT,
    FLAGS_MASK,
    LENGTH_MASK,
    MS_BYTE_FLAG,
    MS_FLAG_BITS,
    MS_MIXED_COMPACT,
    SINGLE,
    Cell,
    IllegalDataError,
    cell_kind,
    cell_points,
    fix_single,
)

Int64s = npt.NDArray[np.int64]
UInt8s = npt.NDArray[np.uint8]
Raw = tuple[int, bytes, bytes, int]
"""A cell waiting for the per-point path: (row index, qualifier, value, write time)."""

# dtype of a value by its flags; any other flags are corrupt (RowSeq.extract*Value).
_VALUE_DTYPES = {0x0: np.dtype("i1"), 0x1: np.dtype(">i2"), 0x3: np.dtype(">i4"),
                 0x7: np.dtype(">i8"), FLAG_FLOAT | 0x3: np.dtype(">f4"),
                 FLAG_FLOAT | 0x7: np.dtype(">f8")}


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
    counts: Int64s  # points per segment
    rows: list[int]
    write_ts: list[int]
    quals: list[bytes]
    values: bytes  # value bytes of every point, concatenated


class _Group:
    """Segments whose qualifiers are all ``width`` bytes wide: decoded in one numpy pass."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.dtype = np.dtype(">u2" if width == 2 else ">u4")
        self.quals: list[bytes] = []
        self.vals: list[bytes] = []  # value bytes without the meta byte
        self.origs: list[bytes] = []  # the stored value, for the per-point path
        self.rows: list[int] = []
        self.write_ts: list[int] = []

    def add(self, row: int, q: bytes, v: bytes, orig: bytes, write_ts: int) -> None:
        self.quals.append(q)
        self.vals.append(v)
        self.origs.append(orig)
        self.rows.append(row)
        self.write_ts.append(write_ts)

    def decode(self, row_base_ms: Int64s) -> tuple[_Part | None, list[Raw]]:
        """The decoded part, and the segments refused for the per-point path."""
        if not self.quals:
            return None, []
        words = np.frombuffer(b"".join(self.quals), self.dtype).astype(self.dtype.newbyteorder("="))
        counts = np.fromiter(map(len, self.quals), np.int64, len(self.quals)) // self.width
        flags = (words & FLAGS_MASK).astype(np.uint8)
        bad = self._bad_segments(words, flags, counts)
        if bad.size:
            refused = [(self.rows[i], self.quals[i], self.origs[i], self.write_ts[i]) for i in bad]
            self._drop(bad)
            return self.decode(row_base_ms)[0], refused
        if self.width == 2:
            offset_ms = np.multiply(words >> FLAG_BITS, 1000, dtype=np.int64)
        else:
            offset_ms = ((words & 0x0FFFFFC0) >> MS_FLAG_BITS).astype(np.int64)
        seg_base_ms = row_base_ms[np.array(self.rows, dtype=np.int64)]
        offset_ms += np.repeat(seg_base_ms, counts)
        return _Part(offset_ms, flags, counts, self.rows, self.write_ts, self.quals,
                     b"".join(self.vals)), []

    def _bad_segments(self, words: npt.NDArray[np.unsignedinteger], flags: UInt8s,
                      counts: Int64s) -> Int64s:
        """Segments whose value bytes do not add up, or that hold a qualifier of the other
        width (a mixed column whose meta byte does not say so)."""
        starts = np.cumsum(counts) - counts
        lengths = (flags & LENGTH_MASK) + 1
        sums = np.add.reduceat(lengths, starts, dtype=np.int64)
        bad = sums != np.fromiter(map(len, self.vals), np.int64, len(self.vals))
        top = words >> (8 * self.width - 4)
        wrong_width = top == 0xF if self.width == 2 else top != 0xF
        if wrong_width.any():
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
            kind = cell_kind(q)
            if kind is None:
                continue  # annotations and unknown extended formats are not data points
            wt = 0 if write_ts is None else write_ts.get(q, -1)
            if kind == SINGLE:
                if (q[-1] & LENGTH_MASK) + 1 != len(v):
                    q, v = fix_single(q, v)
                group = self.seconds if len(q) == 2 else self.millis
                group.add(row, q, v, v, wt)
            elif kind == COMPACTED and v and not v[-1] & MS_MIXED_COMPACT:
                if q[0] < MS_BYTE_FLAG:
                    self.seconds.add(row, q, v[:-1], v, wt)
                elif not len(q) & 3:
                    self.millis.add(row, q, v[:-1], v, wt)
                else:
                    self.slow.append((row, q, v, wt))
            else:
                self.slow.append((row, q, v, wt))

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
        values, is_int = _decode_values(part.values, part.flags)
        return _ascending(part, values, is_int)


def _decode_slow(raws: list[Raw], row_base_ms: list[int]) -> _Part | None:
    """The per-point path, for mixed-resolution and append columns."""
    ts_ms: list[int] = []
    flags: list[int] = []
    values: list[bytes] = []
    counts, rows, write_ts, quals = [], [], [], []
    for row, q, v, wt in raws:
        kind = cell_kind(q)
        assert kind is not None
        points = cell_points(kind, q, v)
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
    return _Part(np.array(ts_ms, dtype=np.int64), np.array(flags, dtype=np.uint8),
                 np.array(counts, dtype=np.int64), rows, write_ts, quals, b"".join(values))


def _concat(parts: list[_Part]) -> _Part:
    return _Part(np.concatenate([p.ts_ms for p in parts]),
                 np.concatenate([p.flags for p in parts]),
                 np.concatenate([p.counts for p in parts]),
                 [row for p in parts for row in p.rows],
                 [wt for p in parts for wt in p.write_ts],
                 [q for p in parts for q in p.quals],
                 b"".join(p.values for p in parts))


def _value_dtype(flags: int) -> np.dtype[np.generic]:
    dtype = _VALUE_DTYPES.get(flags)
    if dtype is None:
        kind = "Floating point" if flags & FLAG_FLOAT else "Integer"
        raise IllegalDataError(f"{kind} value not on 8/4/2/1 bytes (flags={flags:#x})")
    return dtype


def _decode_values(buf: bytes, flags: UInt8s) -> tuple[npt.NDArray[np.float64],
                                                     npt.NDArray[np.bool_]]:
    """Values as float64 (a float32 widens exactly, as Java's ``(double) f``) and is_int."""
    first = int(flags[0])
    if (flags == first).all():  # one encoding for all: the buffer is a plain array
        values = np.frombuffer(buf, _value_dtype(first)).astype(np.float64)
        return values, np.full(flags.size, not first & FLAG_FLOAT)
    lengths = (flags & LENGTH_MASK) + 1
    offsets = np.cumsum(lengths, dtype=np.int64)
    offsets -= lengths
    raw = np.frombuffer(buf, np.uint8)
    values = np.empty(flags.size, np.float64)
    for code in np.flatnonzero(np.bincount(flags, minlength=FLAGS_MASK + 1)):
        dtype = _value_dtype(int(code))
        where = np.flatnonzero(flags == code)
        start = offsets[where]
        if dtype.itemsize == 1:
            values[where] = raw[start].view(dtype)
        else:
            values[where] = raw[start[:, None] + np.arange(dtype.itemsize)].view(dtype)[:, 0]
    return values, (flags & FLAG_FLOAT) == 0


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
