"""Cells of OpenTSDB 2.4's ``t`` family: constants, parsing, fixups and compaction.

Grammar (big-endian; the row key and value encodings are in :mod:`app.storage.codec`)::

    Qualifier(s)  = offset_s(12 bits) flags(4 bits)                                   ; 2 bytes
    Qualifier(ms) = 0xF(4 bits) offset_ms(22 bits) unused(2 bits) flags(4 bits)       ; 4 bytes
    flags         = is_float(1 bit) value_length_minus_1(3 bits)
    Single cell   = Qualifier(s|ms) -> Value
    Compacted     = Qualifier(s|ms){2,} in time order -> Value{2,} meta(1)
    meta          = MS_MIXED_COMPACT (0x01) if s and ms qualifiers are mixed, else 0x00
    Append        = 0x05 0x00 0x00 -> (Qualifier(s|ms) Value)* in write order
    Annotation    = 0x01 offset_s(2) | 0x01 offset_ms(4) -> JSON     ; odd length: never data

This is the slow, per-point path (``Internal.extractDataPoints``, ``CompactionQueue``,
``AppendDataPoints``); :mod:`app.storage.codec_decode` decodes whole rows with numpy.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from app.errors import StorageError

# Constants named as in OpenTSDB's Const.java, AppendDataPoints.java and Annotation.java.
TIMESTAMP_BYTES = 4
FLAG_BITS = 4
MS_FLAG_BITS = 6
FLAG_FLOAT = 0x8
LENGTH_MASK = 0x7
FLAGS_MASK = FLAG_FLOAT | LENGTH_MASK
MS_BYTE_FLAG = 0xF0
MS_FLAG = 0xF0000000
MS_MIXED_COMPACT = 0x01
SECOND_MASK = 0xFFFFFFFF00000000
MAX_TIMESPAN = 3600
# Data cells live in the ``t`` family: a column is this prefix and the cell's qualifier.
DATA_PREFIX = b"t:"
APPEND_COLUMN_PREFIX = 0x05
APPEND_QUALIFIER = b"\x05\x00\x00"
ANNOTATION_PREFIX = 0x01

# Cell kinds, numbered by duplicate priority without write times: compacted < single < append.
COMPACTED, SINGLE, APPEND = 0, 1, 2

Cell = tuple[bytes, bytes]
Point = tuple[int, bytes, bytes]
"""One data point of a cell: (offset_ms from the row base time, qualifier, value)."""


class IllegalDataError(StorageError):
    """A stored cell cannot be decoded (OpenTSDB's ``IllegalDataException``)."""


def cell_kind(q: bytes) -> int | None:
    """COMPACTED, SINGLE or APPEND, or None for annotations and unknown extended formats."""
    n = len(q)
    if n & 1:
        return APPEND if n == 3 and q[0] == APPEND_COLUMN_PREFIX else None
    if n == 2 or (n == 4 and q[0] >= MS_BYTE_FLAG):
        return SINGLE
    return COMPACTED if n else None


def fix_single(q: bytes, v: bytes) -> tuple[bytes, bytes]:
    """``Internal.fixFloatingPointValue`` then ``fixQualifierFlags`` on a single cell.

    Old TSDs wrote floats as 4 leading zero bytes + float32 flagged as 4 bytes; and the
    length flags of an old single cell cannot be trusted, the value's real length can.
    """
    last = q[-1]
    if len(q) == 2 and last & FLAG_FLOAT and last & LENGTH_MASK == 0x3 and len(v) == 8:
        if any(v[:4]):
            raise IllegalDataError(f"Corrupted floating point value: {v.hex().upper()} "
                                   f"flags={last & FLAGS_MASK:#x} -- first 4 bytes are "
                                   "expected to be zeros.")
        v = v[4:]
    if not 1 <= len(v) <= 8:
        raise IllegalDataError(f"single cell {q.hex().upper()} has a {len(v)}-byte value")
    fixed = (last & ~LENGTH_MASK) | (len(v) - 1)
    return (q if fixed == last else q[:-1] + bytes((fixed,))), v


def iter_qualifiers(q: bytes) -> Iterator[tuple[int, int, int]]:
    """``(width, offset_ms, flags)`` of each 2- or 4-byte qualifier, in order."""
    i, n = 0, len(q)
    while i < n:
        if q[i] >= MS_BYTE_FLAG:
            if i + 4 > n:
                raise IllegalDataError(f"truncated millisecond qualifier in {q.hex().upper()}")
            word = int.from_bytes(q[i:i + 4], "big")
            yield 4, (word & 0x0FFFFFC0) >> MS_FLAG_BITS, word & FLAGS_MASK
            i += 4
        else:
            if i + 2 > n:
                raise IllegalDataError(f"truncated qualifier in {q.hex().upper()}")
            word = (q[i] << 8) | q[i + 1]
            yield 2, (word >> FLAG_BITS) * 1000, word & FLAGS_MASK
            i += 2


def cell_points(kind: int, q: bytes, v: bytes) -> list[Point]:
    """The data points of one cell, in stored order, fixups applied."""
    if kind == SINGLE:
        q, v = fix_single(q, v)
        ((_, offset_ms, _),) = iter_qualifiers(q)
        return [(offset_ms, q, v)]
    if kind == APPEND:
        return _append_points(v)
    points: list[Point] = []
    pos = i = 0
    for width, offset_ms, flags in iter_qualifiers(q):
        length = (flags & LENGTH_MASK) + 1
        points.append((offset_ms, q[i:i + width], v[pos:pos + length]))
        pos += length
        i += width
    # The last byte is meta data; a column without it is accepted too (Java would refuse it).
    if pos not in (len(v) - 1, len(v)):
        raise IllegalDataError(f"Corrupted value: couldn't break down into individual values "
                               f"(consumed {pos} bytes, but was expecting to consume "
                               f"{len(v) - 1}): qualifier={q.hex().upper()}")
    return points


def _append_points(v: bytes) -> list[Point]:
    """``AppendDataPoints.parseKeyValue``: qualifier, value, qualifier, value, ..."""
    points: list[Point] = []
    i, n = 0, len(v)
    while i < n:
        width, offset_ms, flags = next(iter_qualifiers(v[i:i + 4]))
        start = i + width
        end = start + (flags & LENGTH_MASK) + 1
        if end > n:
            raise IllegalDataError(f"Corrupted value: couldn't break down into individual "
                                   f"values (consumed {end} bytes, but was expecting to "
                                   f"consume {n}) in append column {v.hex().upper()}")
        points.append((offset_ms, v[i:start], v[start:end]))
        i = end
    return points


def cell_rank(q: bytes, kind: int, write_ts: Mapping[bytes, int] | None) -> tuple[int, int, bytes]:
    """Sort key of a cell among its row's cells: the greatest wins a duplicate timestamp.

    Newest write time first (``CompactionQueue`` keeps the newest cell), then the kind, then
    the qualifier bytes. Inside one cell the later entry wins, as in ``AppendDataPoints``;
    Java's compaction would keep the earlier one of a compacted column, but OpenTSDB never
    writes such a column, so one rule for both kinds is simpler.
    """
    return (write_ts.get(q, -1) if write_ts is not None else 0), kind, q


def compact_cells(cells: Iterable[Cell],
                  write_ts: Mapping[bytes, int] | None = None) -> tuple[bytes, bytes] | None:
    """Merge a row's data cells into the one column ``CompactionQueue`` writes.

    Qualifiers are concatenated in time order, values likewise plus the meta byte (only when
    there is more than one point, as in Java). Duplicates resolve as in :func:`decode_row`.
    Annotations and unknown qualifiers are left out: the caller keeps them. None: no data.
    """
    columns = []
    for q, v in cells:
        kind = cell_kind(q)
        if kind is not None:
            columns.append((cell_rank(q, kind, write_ts), cell_points(kind, q, v)))
    columns.sort(key=lambda column: column[0])
    merged: dict[int, tuple[bytes, bytes]] = {}
    for _, points in columns:
        for offset_ms, pq, pv in points:
            merged[offset_ms] = (pq, pv)  # later cells and later entries win
    if not merged:
        return None
    ordered = [merged[offset_ms] for offset_ms in sorted(merged)]
    if len(ordered) == 1:
        return ordered[0]
    widths = {len(pq) for pq, _ in ordered}
    meta = MS_MIXED_COMPACT if len(widths) > 1 else 0
    return (b"".join(pq for pq, _ in ordered),
            b"".join(pv for _, pv in ordered) + bytes((meta,)))
