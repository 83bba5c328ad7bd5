"""Vectorised decoding of OpenTSDB data cells into numpy arrays.

Grammar of the cells decoded (see :mod:`app.storage.codec_cells` for the full one)::

    Single cell   = Qualifier(s|ms) -> Value
    Compacted     = Qualifier(s|ms){2,} -> Value{2,} meta(1)
    Append        = 0x05 0x00 0x00 -> (Qualifier(s|ms) Value)*

How: every data cell is a *segment* of points. Segments whose qualifiers all have one width
(seconds: 2 bytes, ms: 4 bytes) are concatenated, across all rows of a call, into one buffer that
numpy reads as ``>u2`` / ``>u4`` words, so offsets, flags and lengths come out without a
per-point Python loop. When all points share one encoding, the value buffer is simply viewed
as an array. Otherwise value ends come from a cumulative sum of the lengths, and values from one
gather: for each point, the W-byte big-endian window that *ends* at its last byte (W is the
widest value present; the buffer starts with 8 zero bytes), which is the value itself for a
W-byte value, holds a float32 in its low half, and gives a shorter integer after a
sign-extending pair of shifts.

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
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from app.storage.codec_cells import (
    APPEND_COLUMN_PREFIX,
    FLAG_BITS,
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
    cell_rank,
)
from app.storage.codec_singles import joined_singles

Int64s = npt.NDArray[np.int64]
UInt8s = npt.NDArray[np.uint8]
Raw = tuple[int, bytes, bytes]
"""A cell for the per-point path: (row index, qualifier, stored value)."""

_PAD = bytes(8)
_FLOAT8 = FLAG_FLOAT | 0x7
_FLOAT4 = FLAG_FLOAT | 0x3
# The only valid flags (RowSeq.extract*Value): anything else is corrupt.
_DTYPES: dict[int, np.dtype[Any]] = {
    0x0: np.dtype("i1"), 0x1: np.dtype(">i2"), 0x3: np.dtype(">i4"), 0x7: np.dtype(">i8"),
    _FLOAT4: np.dtype(">f4"), _FLOAT8: np.dtype(">f8"),
}


@dataclass(eq=False, slots=True)
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
    value_end: Int64s | None  # end of each value in ``values`` (pad excluded); None: not needed
    values: bytes  # _PAD, then the value bytes of every point
    counts: Int64s  # points per segment
    rows: list[int]
    quals: list[bytes]


class _Group:
    """Segments whose qualifiers are all ``width`` bytes wide, decoded in one numpy pass."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.dtype = np.dtype(">u2" if width == 2 else ">u4")
        self.quals: list[bytes] = []
        # Value bytes without the meta byte: a memoryview of the stored value (no copy) for a
        # compacted column, the stored value of a single cell.
        self.vals: list[bytes | memoryview] = []
        self.rows: list[int] = []

    def decode(self, row_base_ms: Int64s) -> tuple[_Part | None, list[Raw]]:
        """The decoded part, and the segments refused for the per-point path."""
        if not self.quals:
            return None, []
        words = np.frombuffer(b"".join(self.quals), self.dtype).astype(self.dtype.newbyteorder("="))
        counts = np.fromiter(map(len, self.quals), np.int64, len(self.quals)) // self.width
        flags = (words & FLAGS_MASK).astype(np.uint8)
        value_end = None if _uniform(flags) else _value_end(flags)
        bad = self._bad_segments(words, flags, value_end, counts)
        if bad.size:
            refused = [(self.rows[i], self.quals[i], _stored(self.vals[i])) for i in bad]
            self._drop(bad)
            part, more = self.decode(row_base_ms)
            return part, refused + more
        if self.width == 2:
            offset_ms = np.multiply(words >> FLAG_BITS, 1000, dtype=np.int32)
        else:
            offset_ms = ((words & 0x0FFFFFC0) >> MS_FLAG_BITS).astype(np.int32)
        seg_base_ms = row_base_ms[np.array(self.rows, dtype=np.int64)]
        if counts.min() == counts.max():  # rows of equally many points: broadcast the base
            ts_ms = (offset_ms.reshape(counts.size, -1) + seg_base_ms[:, None]).reshape(-1)
        else:
            ts_ms = np.repeat(seg_base_ms, counts)
            ts_ms += offset_ms
        values = b"".join(chain((_PAD,), self.vals))
        return _Part(ts_ms, flags, value_end, values, counts, self.rows, self.quals), []

    def _bad_segments(self, words: npt.NDArray[np.unsignedinteger], flags: UInt8s,
                      value_end: Int64s | None, counts: Int64s) -> Int64s:
        """Segments whose value bytes do not add up, or that hold a qualifier of the other
        width (a mixed column whose meta byte does not say so)."""
        if value_end is None:
            seg_bytes = counts * ((int(flags[0]) & LENGTH_MASK) + 1)
        else:
            seg_bytes = np.diff(value_end[np.cumsum(counts) - 1], prepend=0)
        bad = seg_bytes != np.fromiter(map(len, self.vals), np.int64, len(self.vals))
        ms_flagged = words >= (0xF000 if self.width == 2 else 0xF0000000)
        wrong_width = ms_flagged if self.width == 2 else ~ms_flagged
        if wrong_width.any():
            starts = np.cumsum(counts) - counts
            bad |= np.add.reduceat(wrong_width, starts, dtype=np.int64) > 0
        return np.flatnonzero(bad)

    def _drop(self, bad: Int64s) -> None:
        keep = np.ones(len(self.quals), dtype=bool)
        keep[bad] = False
        self.quals = [q for q, kept in zip(self.quals, keep, strict=True) if kept]
        self.vals = [v for v, kept in zip(self.vals, keep, strict=True) if kept]
        self.rows = [r for r, kept in zip(self.rows, keep, strict=True) if kept]


def _stored(value: bytes | memoryview) -> bytes:
    """The stored value behind a group's value bytes."""
    if isinstance(value, memoryview):
        stored = value.obj
        assert isinstance(stored, bytes)
        return stored
    return value


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
        for q, v in cells:
            self._add_cell(row, q, v)

    def add_rows(self, rows: Iterable[tuple[int, Mapping[bytes, bytes]]], prefix: bytes) -> None:
        """Many rows' cells as stored, ``{prefix + qualifier: value}``; other columns skipped.

        :meth:`add_row` per row, with the common cell (a compacted column of second
        qualifiers, ~360 points) taken without a call or attribute lookup: a cold read
        feeds ~24,000 rows a second through here, so per-row overhead is most of its cost.
        A row not compacted yet (one cell per point) is taken whole when it can be
        (``codec_singles``): a step per cell was most of a fresh read's decode.
        """
        rows = rows if isinstance(rows, list) else list(rows)
        base_ms, seconds = self.row_base_ms, self.seconds
        quals, vals, owners = seconds.quals, seconds.vals, seconds.rows
        skip = len(prefix)
        for (base_time_s, cells), joined in zip(rows, joined_singles(rows, prefix)):
            row = len(base_ms)
            base_ms.append(base_time_s * 1000)
            if joined is not None:  # the row's single cells as one segment
                quals.append(joined[0])
                vals.append(joined[1])
                owners.append(row)
                continue
            for column, v in cells.items():
                if not column.startswith(prefix):
                    continue
                q = column[skip:]
                n = len(q)
                if (n > 2 and not n & 1 and q[0] < MS_BYTE_FLAG and v
                        and not v[-1] & MS_MIXED_COMPACT):
                    quals.append(q)
                    vals.append(memoryview(v)[:-1])
                    owners.append(row)
                else:  # any other cell (singles, ms, appends, notes) as add_row takes it
                    self._add_cell(row, q, v)

    def _add_cell(self, row: int, q: bytes, v: bytes) -> None:
        n = len(q)
        if n & 1 or not n:  # annotations and unknown extended formats are not data
            if n == 3 and q[0] == APPEND_COLUMN_PREFIX:
                self.slow.append((row, q, v))
        elif n == 2 or (n == 4 and q[0] >= MS_BYTE_FLAG):  # a single data point
            if (q[-1] & LENGTH_MASK) + 1 != len(v):  # flags to fix: written before 2.0
                self.slow.append((row, q, v))
                return
            group = self.seconds if n == 2 else self.millis
            group.quals.append(q)
            group.vals.append(v)
            group.rows.append(row)
        elif not v or v[-1] & MS_MIXED_COMPACT or (q[0] >= MS_BYTE_FLAG and n & 3):
            self.slow.append((row, q, v))
        else:  # compacted, and by its first qualifier and meta byte of one resolution
            group = self.seconds if q[0] < MS_BYTE_FLAG else self.millis
            group.quals.append(q)
            group.vals.append(memoryview(v)[:-1])
            group.rows.append(row)

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
        values, is_int = _decode_values(part)
        return _ascending(part, values, is_int, self.write_ts)


def _decode_slow(raws: list[Raw], row_base_ms: list[int]) -> _Part | None:
    """The per-point path, for mixed-resolution and append columns."""
    ts_ms: list[int] = []
    flags: list[int] = []
    values: list[bytes] = [_PAD]
    counts: list[int] = []
    rows: list[int] = []
    quals: list[bytes] = []
    for row, q, v in raws:
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
        quals.append(q)
    if not counts:
        return None
    return _Part(np.array(ts_ms, dtype=np.int64), np.array(flags, dtype=np.uint8), None,
                 b"".join(values), np.array(counts, dtype=np.int64), rows, quals)


def _concat(parts: list[_Part]) -> _Part:
    return _Part(np.concatenate([p.ts_ms for p in parts]),
                 np.concatenate([p.flags for p in parts]),
                 None,
                 b"".join(chain((_PAD,), (memoryview(p.values)[len(_PAD):] for p in parts))),
                 np.concatenate([p.counts for p in parts]),
                 [row for p in parts for row in p.rows],
                 [q for p in parts for q in p.quals])


def _uniform(flags: UInt8s) -> bool:
    return not bool((flags != flags[0]).any())


def _value_end(flags: UInt8s) -> Int64s:
    return np.cumsum((flags & LENGTH_MASK) + 1, dtype=np.int64)


def _decode_values(part: _Part) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Values as float64 (a float32 widens exactly, as Java's ``(double) f``) and is_int."""
    flags, buf = part.flags, part.values
    first = int(flags[0])
    if _uniform(flags):  # one encoding for all: the buffer is a plain array
        values = np.frombuffer(buf, _value_dtype(first), offset=len(_PAD)).astype(np.float64)
        return values, np.full(flags.size, not first & FLAG_FLOAT)
    _check_flags(flags)
    value_end = part.value_end if part.value_end is not None else _value_end(flags)
    width = int((flags & LENGTH_MASK).max()) + 1  # 2, 4 or 8: the widest value
    bits = _windows(buf, value_end, width)
    is_int = flags < FLAG_FLOAT
    if np.count_nonzero(is_int) * 2 >= flags.size:  # mostly integers
        values = _sign_extend(bits, flags, width).astype(np.float64)
        floats = np.flatnonzero(~is_int)
    else:  # mostly floats, so width is 4 (float32 only) or 8
        ints = np.flatnonzero(is_int)
        small = _sign_extend(bits[ints], flags[ints], width)
        if width == 8:
            values = bits.view(np.float64)  # right for the 8-byte floats, in place
            floats = np.flatnonzero(flags == _FLOAT4)
        else:
            with np.errstate(invalid="ignore"):  # a signalling NaN widens quietly, as in Java
                values = bits.view(np.float32).astype(np.float64)
            floats = np.empty(0, dtype=np.int64)
        values[ints] = small
    if floats.size:
        values[floats] = _float_bits(bits[floats], flags[floats])
    return values, is_int


def _value_dtype(flags: int) -> np.dtype[Any]:
    dtype = _DTYPES.get(flags)
    if dtype is None:
        kind = "Floating point" if flags & FLAG_FLOAT else "Integer"
        raise IllegalDataError(f"{kind} value not on 8/4/2/1 bytes (flags={flags:#x})")
    return dtype


def _check_flags(flags: UInt8s) -> None:
    """Integers take 1, 2, 4 or 8 bytes and floats 4 or 8 (``RowSeq.extract*Value``)."""
    length_bits = flags & LENGTH_MASK
    invalid = (length_bits & (length_bits + 1)) != 0  # not 0, 1, 3 or 7
    invalid |= (flags >= FLAG_FLOAT) & (length_bits < 0x3)
    if invalid.any():
        _value_dtype(int(flags[np.argmax(invalid)]))


def _windows(buf: bytes, value_end: Int64s, width: int) -> npt.NDArray[np.signedinteger]:
    """For each value, the ``width`` bytes ending where it ends, as a native signed integer."""
    windows = np.ndarray(shape=(len(buf) - 7,), dtype=np.dtype(f">i{width}"), buffer=buf,
                         offset=len(_PAD) - width, strides=(1,))
    bits = windows[value_end]
    if not bits.dtype.isnative:  # swap in place rather than allocate a converted copy
        bits = bits.byteswap(inplace=True).view(bits.dtype.newbyteorder())
    return bits


def _sign_extend(bits: npt.NDArray[np.signedinteger], flags: UInt8s,
                 width: int) -> npt.NDArray[np.signedinteger]:
    """The low 1, 2, 4 or 8 bytes of each ``width``-byte window as a signed integer."""
    shifts = ((width - 1) - (flags & LENGTH_MASK)) << 3  # 8 * (width - length)
    out = np.left_shift(bits, shifts)
    return np.right_shift(out, shifts, out=out)


def _float_bits(bits: npt.NDArray[np.signedinteger], flags: UInt8s) -> npt.NDArray[np.float64]:
    """Windows of float32 (low half) or float64 values as float64, widening exactly."""
    if bits.dtype.itemsize == 4:
        with np.errstate(invalid="ignore"):
            return bits.view(np.float32).astype(np.float64)
    single = (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    with np.errstate(invalid="ignore"):  # a signalling NaN widens quietly, as in Java
        return np.where(flags == _FLOAT4, single, bits.view(np.float64))


def _ascending(part: _Part, values: npt.NDArray[np.float64], is_int: npt.NDArray[np.bool_],
               write_ts: Mapping[bytes, int] | None) -> DecodedRow:
    """Sort by time and keep one point per timestamp, the winner of its duplicates."""
    ts = part.ts_ms
    if ts.size < 2 or bool((ts[1:] > ts[:-1]).all()):
        return DecodedRow(ts, values, is_int)
    order = np.argsort(ts, kind="stable")
    ordered_ts = ts[order]
    dup = ordered_ts[1:] == ordered_ts[:-1]
    has_duplicates = bool(dup.any())
    if has_duplicates:
        order = _winners(part, order, dup, write_ts)
    return DecodedRow(ts[order], values[order], is_int[order], has_duplicates)


def _winners(part: _Part, order: Int64s, dup: npt.NDArray[np.bool_],
             write_ts: Mapping[bytes, int] | None) -> Int64s:
    """Indexes, ascending in time, of the one point kept per timestamp."""
    ts = part.ts_ms
    seg_of_point = np.repeat(np.arange(part.counts.size), part.counts)
    rows = np.array(part.rows, dtype=np.int64)
    clashing = np.concatenate([order[1:][dup], order[:-1][dup]])
    # Rank only the cells of rows that have duplicates: a Python sort, but a small one.
    segs = np.flatnonzero(np.isin(rows, rows[seg_of_point[clashing]])).tolist()
    segs.sort(key=lambda i: (part.rows[i], _rank(part.quals[i], write_ts)))
    rank = np.zeros(part.counts.size, dtype=np.int64)
    rank[segs] = np.arange(1, len(segs) + 1)
    order = np.lexsort((np.arange(ts.size), rank[seg_of_point], ts))
    ordered_ts = ts[order]
    last = np.ones(ts.size, dtype=bool)
    last[:-1] = ordered_ts[1:] != ordered_ts[:-1]
    return order[last]


def _rank(q: bytes, write_ts: Mapping[bytes, int] | None) -> tuple[int, int, bytes]:
    kind = cell_kind(q)
    assert kind is not None  # only data cells become segments
    return cell_rank(q, kind, write_ts)


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


def decode_stored_rows(rows: Iterable[tuple[int, Mapping[bytes, bytes]]],
                       prefix: bytes) -> DecodedRow:
    """:func:`decode_rows` over rows as storage returns them, ``(base_time_s, {prefix +
    qualifier: value})``, reading only the columns of ``prefix`` (the data family, ``t:``)."""
    batch = _Batch(None)
    batch.add_rows(rows, prefix)
    return batch.finish()
