"""OpenTSDB 2.4's rollup cells (``RollupUtils``): row base times and qualifiers, both ways.

A rollup row has the data table's key layout (salt, metric, base time, tags) with the base
time snapped to the interval's row span (``rowSpan``: ``1h``, ``6h``, ``1d``, ``1n``, ``1y``).
Each cell holds one aggregate of one interval::

    qualifier = aggregator ID (1 byte) + ((offset << 4) | flags) (2 bytes, big-endian)
    value     = the value as a raw data point stores it (flags: length - 1, 0x8 = float)

``offset`` counts intervals from the base time. Older writers (the "Yahoo!" layout that 2.4
still reads) prefix the 2- or 4-byte raw-style qualifier with ``"<agg>:"`` instead. Pure: no
IO, no Flask.
"""

from __future__ import annotations

import calendar
import datetime as dt
import struct
from typing import NamedTuple

import numpy as np

from app.storage.codec import FLAG_BITS, FLAGS_MASK, MS_FLAG_BITS, encode_value

QUALIFIER_DELIMITER = b":"
AGGREGATOR_MASK = 0x7F
# 16 bits minus the 4 flag bits: OpenTSDB's Bytes.fromShort would silently wrap past this.
MAX_QUALIFIER_OFFSET = (1 << (16 - FLAG_BITS)) - 1


class RollupCell(NamedTuple):
    """One decoded rollup cell: which aggregate, when (ms), the value and its kind."""

    aggregator_id: int | None  # None for the prefixed layout (see ``prefix``)
    prefix: str | None  # "sum", "count", ... for ``sum:``-prefixed qualifiers
    ts_ms: int
    value: float
    is_int: bool


def span_seconds(units: str, multiplier: int) -> int:
    """The nominal length of a row span (months count 32 days, years 366, as 2.4 does)."""
    per_unit = {"h": 3600, "d": 86400, "n": 86400 * 32, "y": 86400 * 366}[units]
    return per_unit * multiplier


def rollup_base_time(ts_s: int, units: str, multiplier: int) -> int:
    """``RollupUtils.getRollupBasetime`` for a timestamp in seconds (UTC calendar)."""
    if ts_s < 0:
        raise ValueError(f"Not supporting negative timestamps at this time: {ts_s}")
    if units == "h":
        modulo = 3600 * max(multiplier, 1)
        return ts_s - ts_s % modulo
    day = dt.datetime.fromtimestamp(ts_s, dt.UTC).date()
    if units == "n":
        day = day.replace(day=1)
    elif units == "y":
        day = day.replace(month=1, day=1)
    elif units != "d":
        raise ValueError(f"Unrecognized span: {units}")
    return calendar.timegm(day.timetuple())


def build_rollup_qualifier(ts_s: int, base_s: int, flags: int, aggregator_id: int,
                           interval_s: int, intervals: int = MAX_QUALIFIER_OFFSET + 1) -> bytes:
    """``RollupUtils.buildRollupQualifier``: 3 bytes, aggregator ID then offset and flags;
    ``intervals`` is the interval's count per row (the offset must stay below it)."""
    if not 0 <= aggregator_id <= AGGREGATOR_MASK:
        raise ValueError(f"aggregator ID {aggregator_id} is not within 0..127")
    if not 0 <= flags <= FLAGS_MASK:
        raise ValueError(f"flags {flags:#x} do not fit in {FLAG_BITS} bits")
    offset = (ts_s - base_s) // interval_s
    if offset >= min(intervals, MAX_QUALIFIER_OFFSET + 1) or offset < 0:
        raise ValueError(f"Offset of {offset} was greater than the configured intervals "
                         f"{intervals}")
    return bytes([aggregator_id]) + ((offset << FLAG_BITS) | flags).to_bytes(2, "big")


def encode_aggregate_value(value: int | float, wide_floats: bool) -> tuple[int, bytes]:
    """``(flags, bytes)`` of an aggregate; a float 8 bytes wide with ``wide_floats``."""
    flags, raw = encode_value(value)
    if wide_floats and flags & 0x8 and len(raw) == 4:
        return flags | 0x7, struct.pack(">d", float(value))
    return flags, raw


def rollup_cell(ts_s: int, base_s: int, value: int | float, aggregator_id: int,
                interval_s: int, intervals: int = MAX_QUALIFIER_OFFSET + 1, *,
                wide_floats: bool = False) -> tuple[bytes, bytes]:
    """``(qualifier, value bytes)`` of one aggregate, as ``TSDB.addAggregatePoint`` writes.

    ``wide_floats``: a float takes 8 bytes even when it fits in 4, as 2.4's HTTP
    ``/api/rollup`` stores every float (its ``fitsInFloat ? float : double`` is a double)."""
    flags, raw = encode_aggregate_value(value, wide_floats)
    return build_rollup_qualifier(ts_s, base_s, flags, aggregator_id, interval_s,
                                  intervals), raw


def _value(flags: int, raw: bytes) -> tuple[float, bool]:
    length = (flags & 0x7) + 1
    if flags & 0x8:
        if length == 4:
            return float(struct.unpack(">f", raw[-4:])[0]), False
        if length == 8:
            return float(struct.unpack(">d", raw[-8:])[0]), False
        raise ValueError(f"bad float length {length}")
    # Values longer than the flags say (old fixed 8-byte floats) keep their last bytes.
    return float(int.from_bytes(raw[-length:], "big", signed=True)), True


def decode_rollup_cell(qualifier: bytes, value: bytes, base_s: int,
                       interval_s: int) -> RollupCell | None:
    """One cell of a rollup row; None for a qualifier that is neither layout."""
    colon = qualifier.find(QUALIFIER_DELIMITER)
    if len(qualifier) == 3:
        aggregator_id, prefix, rest = qualifier[0] & AGGREGATOR_MASK, None, qualifier[1:]
    elif colon > 0 and len(qualifier) - colon - 1 in (2, 4):
        aggregator_id, rest = None, qualifier[colon + 1:]
        prefix = qualifier[:colon].decode("ascii", errors="replace").lower()
    else:
        return None
    word = int.from_bytes(rest, "big")
    if len(rest) == 4 and rest[0] & 0xF0 == 0xF0:
        offset = ((word & 0x0FFFFFC0) >> MS_FLAG_BITS) // 1000
        flags = word & FLAGS_MASK
    elif len(rest) == 2:
        offset, flags = word >> FLAG_BITS, word & FLAGS_MASK
    else:
        return None
    if not value:
        return None
    try:
        number, is_int = _value(flags, value)
    except ValueError:
        return None
    return RollupCell(aggregator_id, prefix, (base_s + offset * interval_s) * 1000, number,
                      is_int)


def encode_rollup_cells(ts_s: np.ndarray, base_s: np.ndarray, values: np.ndarray,
                        as_int: np.ndarray, aggregator_id: int, interval_s: int,
                        intervals: int, *, wide_floats: bool = False
                        ) -> tuple[list[bytes], list[bytes]]:
    """:func:`rollup_cell` for many aggregates at once: ``(qualifiers, values)``.

    Integers (``as_int``) take the smallest of 1, 2, 4 or 8 bytes; doubles 8 bytes with
    ``wide_floats``, else 4 when the float32 round trip is exact, as
    :func:`app.storage.codec.encode_value` decides.
    """
    count = int(ts_s.size)
    offset = (ts_s - base_s) // interval_s
    if count and (offset.min() < 0 or offset.max() >= min(intervals, MAX_QUALIFIER_OFFSET + 1)):
        raise ValueError(f"Offset out of range for {intervals} intervals")
    longs = np.where(as_int, values, 0).astype(np.int64)
    int_width = np.select([(longs >= -128) & (longs < 128),
                           (longs >= -(2**15)) & (longs < 2**15),
                           (longs >= -(2**31)) & (longs < 2**31)], [1, 2, 4], 8)
    with np.errstate(over="ignore", invalid="ignore"):
        singles = values.astype(np.float32)
        fits = (singles.astype(np.float64) == values) & np.isfinite(singles) & (not wide_floats)
    width = np.where(as_int, int_width, np.where(fits, 4, 8))
    flags = np.where(as_int, width - 1, np.where(fits, 0xB, 0xF))
    word = (offset << FLAG_BITS) | flags
    qualifiers = np.empty((count, 3), np.uint8)
    qualifiers[:, 0] = aggregator_id
    qualifiers[:, 1] = word >> 8
    qualifiers[:, 2] = word & 0xFF
    packed = np.where(as_int[:, None], longs.astype(">i8").view(np.uint8).reshape(count, 8),
                      values.astype(">f8").view(np.uint8).reshape(count, 8))
    single = np.zeros((count, 8), np.uint8)
    single[:, 4:] = singles.astype(">f4").view(np.uint8).reshape(count, 4)
    packed = np.where((~as_int & fits)[:, None], single, packed)
    qualifier_buf, value_buf = qualifiers.tobytes(), packed.tobytes()
    ends = np.arange(8, 8 * count + 1, 8)
    starts = ends - width
    return ([qualifier_buf[i:i + 3] for i in range(0, 3 * count, 3)],
            [value_buf[s:e] for s, e in zip(starts.tolist(), ends.tolist())])


# --- many rows at once, and their columnar form -------------------------------------------
# A rollup row's cells of one aggregate as columns (what the embedded store keeps beside the
# cells: app/storage/sqlite_columns.py), one blob: a head (the row key's length, the cell count,
# the stored value bytes, for the query byte limit, and the newest write time of the row's
# cells, the hour cache's stamp of it), the row key, zeros to a multiple of 8
# bytes, then each cell's value as a double (``<f8``), interval offset (``<u2``) and whether it
# was an integer (``u1``), and zeros to a multiple of 8 again (the doubles of joined blobs stay
# aligned: numpy moves unaligned ones byte by byte).
# Rows of one metric's series mostly have keys of one length and cells of one count: a range's
# blobs joined are then a matrix, one row per blob (app/tsdb/read/rollup_columns.py).

HEAD_DTYPE = np.dtype([("row_len", "<u2"), ("cells", "<u4"), ("value_bytes", "<u4"),
                       ("newest_ms", "<i8")])
MODERN_QUALIFIER_BYTES = 3


class RollupCells(NamedTuple):
    """The cells of many rows in the modern layout, decoded (one entry per cell, rows one
    after the other, each row's cells in qualifier order), and which rows add up."""

    row_of: np.ndarray  # the cell's row (index into the rows given)
    aggregator_id: np.ndarray
    offset: np.ndarray  # intervals from the row's base time
    value: np.ndarray  # float64; NaN for a malformed value
    is_int: np.ndarray
    width: np.ndarray  # the value's stored bytes
    good: np.ndarray  # per row: its values add up to its cells' widths


def decode_modern_rows(qualifiers: bytes, values: bytes, cells: np.ndarray,
                       value_lengths: np.ndarray) -> RollupCells:
    """Rows of 3-byte qualifiers (``cells`` per row, qualifiers and values of all rows joined,
    ``value_lengths`` the value bytes per row) decoded in one vectorised pass."""
    quals = np.frombuffer(qualifiers, np.uint8).reshape(-1, MODERN_QUALIFIER_BYTES)
    vals = np.frombuffer(values, np.uint8)
    row_of = np.repeat(np.arange(cells.size), cells)
    word = (quals[:, 1].astype(np.int64) << 8) | quals[:, 2]
    flags = word & FLAGS_MASK
    width = (flags & 0x7) + 1
    ends = np.cumsum(width)
    row_first = np.cumsum(cells) - cells
    nonempty = cells > 0
    good = np.zeros(cells.size, bool)
    first, last = row_first[nonempty], (row_first + cells - 1)[nonempty]
    good[nonempty] = ends[last] - (ends[first] - width[first]) == value_lengths[nonempty]
    v_start = np.cumsum(value_lengths) - value_lengths
    # A cell's first byte: its row's first value byte plus the widths before it in the row.
    before = np.zeros(cells.size, np.int64)
    before[nonempty] = ends[first] - width[first]
    at = v_start[row_of] + (ends - width) - before[row_of]
    take = good[row_of] if row_of.size else np.zeros(0, bool)
    return RollupCells(row_of, (quals[:, 0] & AGGREGATOR_MASK).astype(np.int64),
                       word >> FLAG_BITS, values_of(vals, at, width, flags, take),
                       (flags & 0x8) == 0, width, good)


def values_of(buf: np.ndarray, at: np.ndarray, size: np.ndarray, flags: np.ndarray,
              mask: np.ndarray) -> np.ndarray:
    """Values as raw points store them: the last ``(flags & 7) + 1`` bytes, big-endian,
    a float when ``flags & 8``; NaN where the cell is malformed (or not in ``mask``)."""
    out = np.full(at.size, np.nan)
    width = (flags & 0x7) + 1
    for is_float, length, dtype in ((False, 1, "i1"), (False, 2, ">i2"), (False, 4, ">i4"),
                                    (False, 8, ">i8"), (True, 4, ">f4"), (True, 8, ">f8")):
        pick = mask & (width == length) & (((flags & 0x8) != 0) == is_float)
        pick &= size >= length
        if not pick.any():
            continue
        start = at[pick] + size[pick] - length
        raw = buf[start[:, None] + np.arange(length)]
        out[pick] = np.ascontiguousarray(raw).view(dtype).ravel().astype(np.float64)
    return out


def column_parts(cells: RollupCells, row: int, key: bytes,
                 newest_ms: int) -> list[tuple[int, bytes]]:
    """One row's columns per aggregate: ``(aggregator id, blob)``."""
    lo, hi = np.searchsorted(cells.row_of, [row, row + 1])
    ids = cells.aggregator_id[lo:hi]
    out = []
    for aggregator_id in np.unique(ids).tolist():
        pick = np.flatnonzero(ids == aggregator_id) + lo
        head = np.array([(len(key), pick.size, int(cells.width[pick].sum()), newest_ms)],
                        HEAD_DTYPE)
        out.append((aggregator_id, b"".join((
            head.tobytes(), key, bytes(column_padding(len(key))),
            cells.value[pick].astype("<f8").tobytes(),
            cells.offset[pick].astype("<u2").tobytes(),
            cells.is_int[pick].astype(np.uint8).tobytes(),
            bytes(-(COLUMN_CELL_BYTES * pick.size) % 8)))))
    return out


COLUMN_CELL_BYTES = 8 + 2 + 1  # value, offset, integer flag


def column_padding(key_length: int) -> int:
    """Zeros after a row column's head and key, so its doubles start 8-byte aligned."""
    return -(HEAD_DTYPE.itemsize + key_length) % 8


def column_bytes(key_length: int, cells: int) -> int:
    """The length of a row column of ``cells`` cells under a key of ``key_length`` bytes."""
    cell_bytes = COLUMN_CELL_BYTES * cells
    return (HEAD_DTYPE.itemsize + key_length + column_padding(key_length) + cell_bytes
            + -cell_bytes % 8)
