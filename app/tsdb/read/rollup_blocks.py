"""Rollup row columns in blocks: every series' rows of a few row spans as one blob.

A 30-day read of the 1-hour table for 1,000 series is 30,000 rows of each aggregate: as row
columns (``rollup_columns``) that is 60,000 B-tree entries joined by ``group_concat`` (three
copies of ~18 MB, most of the read's SQLite time). The embedded store also keeps, per part and
block range (``BLOCK_SPANS`` row spans of one metric, all its series), the range's rows as one
blob in this coarser form (``sqlite_columns.put_blocks``: only while every row of the range is
current, dropped the moment one is not). The form:

    head (``BLOCK_HEAD``), newest write time per row (i8), value bytes per row (u4), key
    length per row (u2) and cells per row (u4) unless every row has the same (then in the
    head), the row keys, zeros to 8 bytes; the cells' values as doubles, or as int16 or int32
    when every cell is an integer that fits (an average's counts); their interval offsets
    (u2) unless every row holds 0, 1, ... (full rows: the common case); their integer flags
    (u1) unless all are one way (each array padded to 8 bytes).

A read of a range takes its whole blocks from here and only its ends row by row
(:func:`split`); the parts meet again as one :class:`rollup_columns.Part` (:func:`concat`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.tsdb.read.rollup_columns import (
    COLUMN_PREFIX_BYTES,
    QUALIFIER_BYTES,
    Part,
    alike,
    part_of,
)

BLOCK_SPANS = 4  # row spans per block: a 30-day read of day rows takes ~7 blocks
BLOCK_HEAD = np.dtype([("magic", "<u4"), ("rows", "<u4"), ("row_len", "<u2"),
                       ("width", "<u2"), ("kind", "u1"), ("ints", "u1"), ("dense", "u1"),
                       ("spare", "u1")])
MAGIC = 0x31424352  # b"RCB1"
VALUE_KINDS = (np.dtype("<f8"), np.dtype("<i2"), np.dtype("<i4"))
MIXED, NO_INTS, ALL_INTS = 0, 1, 2
Range = tuple[bytes, bytes | None]


def split(ranges: Sequence[Range], time_at: int, block_s: int
          ) -> tuple[list[Range], list[tuple[bytes, bytes]]]:
    """``ranges`` as the ranges read row by row and the whole blocks (key ranges of
    ``block_s`` seconds, epoch-aligned) inside them. Only a metric's whole ranges (a salt and
    metric, then base times) have blocks; narrowed ones are read row by row."""
    rows: list[Range] = []
    blocks: list[tuple[bytes, bytes]] = []
    for start, stop in ranges:
        if (stop is None or len(start) != time_at + 4 or len(stop) != time_at + 4
                or start[:time_at] != stop[:time_at]):
            rows.append((start, stop))
            continue
        prefix = start[:time_at]
        first_s = int.from_bytes(start[time_at:], "big")
        stop_s = int.from_bytes(stop[time_at:], "big")
        first_block_s = -(-first_s // block_s) * block_s
        end_block_s = stop_s // block_s * block_s
        if end_block_s <= first_block_s:
            rows.append((start, stop))
            continue
        if first_s < first_block_s:
            rows.append((start, prefix + first_block_s.to_bytes(4, "big")))
        blocks += [(prefix + at.to_bytes(4, "big"), prefix + (at + block_s).to_bytes(4, "big"))
                   for at in range(first_block_s, end_block_s, block_s)]
        if end_block_s < stop_s:
            rows.append((prefix + end_block_s.to_bytes(4, "big"), stop))
    return rows, blocks


def encode(blob: bytes) -> bytes | None:
    """Row columns (``rollup_columns.part_of``'s input) as one block."""
    if not blob:
        return b""
    part = part_of(blob)
    rows = part.cells.size
    row_len = int(part.row_len[0]) if (part.row_len == part.row_len[0]).all() else 0
    width = part.width if part.width else (
        int(part.cells[0]) if (part.cells == part.cells[0]).all() else 0)
    values = part.values.reshape(-1)
    is_int = part.is_int.reshape(-1)
    dense = bool((part.offsets.reshape(-1) == _dense_offsets(part.cells)).all())
    ints = ALL_INTS if is_int.all() else NO_INTS if not is_int.any() else MIXED
    kind = 0  # doubles, unless every value is an integer that fits a narrower type
    if ints == ALL_INTS:
        kind = next((k for k in (1, 2) if _fits(values, VALUE_KINDS[k])), 0)
    head = np.zeros(1, BLOCK_HEAD)
    head[0] = (MAGIC, rows, row_len, width, kind, ints, dense, 0)
    value_bytes = part.weight - part.cells * (part.row_len + COLUMN_PREFIX_BYTES
                                              + QUALIFIER_BYTES)
    pieces = [head.tobytes(), part.newest.astype("<i8").tobytes(),
              value_bytes.astype("<u4").tobytes()]
    if not row_len:
        pieces.append(part.row_len.astype("<u2").tobytes())
    if not width:
        pieces.append(part.cells.astype("<u4").tobytes())
    pieces.append(part.rows)
    pieces.append(bytes(-sum(map(len, pieces)) % 8))
    pieces.append(_padded(values.astype(VALUE_KINDS[kind]).tobytes()))
    if not dense:
        pieces.append(_padded(part.offsets.reshape(-1).astype("<u2").tobytes()))
    if ints == MIXED:
        pieces.append(_padded(is_int.astype(np.uint8).tobytes()))
    return b"".join(pieces)


def _dense_offsets(cells: np.ndarray) -> np.ndarray:
    """Each row's cells numbered 0, 1, ... (a full row's offsets)."""
    total = int(cells.sum())
    return np.arange(total) - np.repeat(np.cumsum(cells) - cells, cells)


def _fits(values: np.ndarray, kind: np.dtype) -> bool:
    info = np.iinfo(kind)
    return bool((values >= info.min).all() and (values <= info.max).all()
                and (values == np.round(values)).all())


def _padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 8)


class _Reader:
    """Arrays one after the other in a block, each starting where the last ended."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, BLOCK_HEAD.itemsize

    def take(self, dtype: str | np.dtype, count: int, align: bool = False) -> np.ndarray:
        array = np.frombuffer(self.data, dtype, count, self.at)
        self.at += array.nbytes + (-array.nbytes % 8 if align else 0)
        return array


def decode(data: bytes) -> Part | None:
    """A block as a :class:`Part` (None: a range with no rows): matrices, views of ``data``
    where the form allows, when every row has one cell count; else flat."""
    if not data:
        return None
    if len(data) < BLOCK_HEAD.itemsize:
        raise ValueError("a row column block shorter than its head")
    head = np.frombuffer(data, BLOCK_HEAD, 1)[0]
    if int(head["magic"]) != MAGIC:
        raise ValueError("not a row column block")
    rows, row_len, width = int(head["rows"]), int(head["row_len"]), int(head["width"])
    read = _Reader(data)
    newest = read.take("<i8", rows).astype(np.int64)
    value_bytes = read.take("<u4", rows).astype(np.int64)
    lengths = (np.full(rows, row_len, np.int64) if row_len
               else read.take("<u2", rows).astype(np.int64))
    cells = np.full(rows, width, np.int64) if width else read.take("<u4", rows).astype(np.int64)
    keys_bytes = int(lengths.sum())
    keys = data[read.at:read.at + keys_bytes]
    read.at += keys_bytes + -(read.at + keys_bytes) % 8
    total = int(cells.sum())
    kind = VALUE_KINDS[int(head["kind"])]
    values = read.take(kind, total, align=True)
    if kind != VALUE_KINDS[0]:
        values = values.astype(np.float64)
    dense, ints = bool(head["dense"]), int(head["ints"])
    offsets = None if dense else read.take("<u2", total, align=True).astype(np.int64)
    is_int = read.take(np.dtype(np.bool_), total, align=True) if ints == MIXED else None
    weight = cells * (lengths + COLUMN_PREFIX_BYTES + QUALIFIER_BYTES) + value_bytes
    if width:  # matrices; what every row has alike, one row seen many times
        shape = (rows, width)
        return Part(keys, lengths, cells, weight, newest,
                    np.broadcast_to(np.arange(width), shape) if offsets is None
                    else offsets.reshape(shape), values.reshape(shape),
                    np.broadcast_to(np.array(ints == ALL_INTS), shape) if is_int is None
                    else is_int.reshape(shape), width)
    return Part(keys, lengths, cells, weight, newest,
                _dense_offsets(cells) if offsets is None else offsets, values,
                np.full(total, ints == ALL_INTS) if is_int is None else is_int)


def _joined(matrices: list[np.ndarray]) -> np.ndarray:
    """Matrices one under the other; still one row seen again when each is that row."""
    first = matrices[0]
    # Rows read row by row are a matrix of their own, alike too when full (the ends).
    if all(m.shape[0] and np.array_equal(m[0], first[0])
           and (alike(m) or bool((m == m[0]).all())) for m in matrices):
        return np.broadcast_to(first[0], (sum(m.shape[0] for m in matrices), first.shape[1]))
    return np.concatenate(matrices)


def concat(parts: Sequence[Part]) -> Part:
    """Parts one after the other as one (matrices while every part has one cell count)."""
    if len(parts) == 1:
        return parts[0]
    keys = b"".join(p.rows for p in parts)
    row_len, cells, weight, newest = (np.concatenate([getattr(p, name) for p in parts])
                                      for name in ("row_len", "cells", "weight", "newest"))
    widths = {p.width for p in parts}
    if len(widths) == 1 and 0 not in widths:
        return Part(keys, row_len, cells, weight, newest, _joined([p.offsets for p in parts]),
                    np.concatenate([p.values for p in parts]),
                    _joined([p.is_int for p in parts]), widths.pop())
    return Part(keys, row_len, cells, weight, newest,
                np.concatenate([p.offsets.reshape(-1).astype(np.int64) for p in parts]),
                np.concatenate([p.values.reshape(-1) for p in parts]),
                np.concatenate([p.is_int.reshape(-1) for p in parts]))
