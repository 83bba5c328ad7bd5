"""Rollup rows from the columns the embedded store keeps beside them, joined per series.

``SqliteTable.scan_columns`` returns a key range's rows of one aggregate as four joined
arrays (``app.storage.codec_rollup``'s columnar form: heads, offsets, doubles, integer flags)
plus their keys; here they become what ``RollupReader`` combines: one block holding every
series' value cells, then every series' count cells (series after series, each in time
order), and one span per series, without a Python step per cell and only a few per row
(the row keys, to number the series).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.engine.flat import ranges_to_index
from app.storage.codec_decode import DecodedRow
from app.storage.codec_rollup import HEAD_DTYPE

Blobs = tuple[bytes, bytes, bytes, bytes, bytes]
"""One aggregate's rows joined: ``(heads, row keys, offsets, vals, ints)``."""
COLUMN_PREFIX_BYTES = 2  # "t:" in a stored cell's weight
QUALIFIER_BYTES = 3


@dataclass(frozen=True, slots=True)
class Part:
    """One aggregate's rows read from columns."""

    keys: list[bytes]
    cells: np.ndarray  # per row
    weight: np.ndarray  # per row: stored bytes of its cells, as the raw reader weighs them
    offsets: np.ndarray  # per cell: intervals from its row's base time
    values: np.ndarray
    is_int: np.ndarray


@dataclass(frozen=True, slots=True)
class Joined:
    """Every series of a read: its first row key, its spans in ``whole`` (value cells, then
    count cells), its stored rows and bytes."""

    whole: DecodedRow
    first_keys: list[bytes]
    spans: np.ndarray  # (series, 4)
    rows: np.ndarray
    stored_bytes: np.ndarray


def part_of(blobs: Blobs) -> Part:
    """One aggregate's joined blobs as arrays."""
    heads, rows, offsets, vals, ints = blobs
    head = np.frombuffer(heads, HEAD_DTYPE)
    row_len = head["row_len"].astype(np.int64)
    cells = head["cells"].astype(np.int64)
    ends = np.cumsum(row_len).tolist()
    keys = [rows[a:b] for a, b in zip([0, *ends[:-1]], ends)]
    weight = cells * (row_len + COLUMN_PREFIX_BYTES + QUALIFIER_BYTES) + head["value_bytes"]
    return Part(keys, cells, weight, np.frombuffer(offsets, "<u2").astype(np.int64),
                np.frombuffer(vals, "<f8"), np.frombuffer(ints, np.bool_))


def joined(parts: list[Part | None], time_at: int, interval_s: int) -> Joined:
    """The value part (and an average's count part) joined per series. ``time_at``: where
    a row key's 4-byte base time starts (the key without it names the series)."""
    present = [p for p in parts if p is not None]
    keys = [key for p in present for key in p.keys]
    series_of, firsts = _series(keys, time_at)
    base_s = np.array([int.from_bytes(key[time_at:time_at + 4], "big") for key in keys],
                      np.int64)
    count = len(firsts)
    sizes = np.zeros((2, count), np.int64)
    stored = np.zeros(count, np.int64)
    ts_parts, value_parts, int_parts = [], [], []
    at = 0
    row_ids = []
    for slot, part in enumerate(parts):
        if part is None:
            continue
        rows = len(part.keys)
        sid, base = series_of[at:at + rows], base_s[at:at + rows]
        at += rows
        order = np.lexsort((base, sid))  # series after series, each in time order
        starts = np.cumsum(part.cells) - part.cells
        gather = ranges_to_index(starts[order], part.cells[order])
        cell_base = np.repeat(base[order], part.cells[order])
        ts_parts.append((cell_base + part.offsets[gather] * interval_s) * 1000)
        value_parts.append(part.values[gather])
        int_parts.append(part.is_int[gather])
        sizes[slot] = np.bincount(sid, weights=part.cells, minlength=count).astype(np.int64)
        stored += np.bincount(sid, weights=part.weight, minlength=count).astype(np.int64)
        row_ids.append(sid << 32 | base)
    whole = DecodedRow(_cat(ts_parts, np.int64), _cat(value_parts, np.float64),
                       _cat(int_parts, np.bool_))
    ends = np.cumsum(sizes, axis=1)
    total_values = int(ends[0, -1]) if count else 0
    spans = np.stack([ends[0] - sizes[0], ends[0], total_values + ends[1] - sizes[1],
                      total_values + ends[1]], axis=1)
    distinct = np.unique(np.concatenate(row_ids)) if row_ids else np.zeros(0, np.int64)
    rows_per_series = np.bincount(distinct >> 32, minlength=count)
    return Joined(whole, [keys[i] for i in firsts], spans, rows_per_series, stored)


def _series(keys: list[bytes], time_at: int) -> tuple[np.ndarray, list[int]]:
    """Each key's series number (the key without its base time), and per series the index
    of its smallest key."""
    if not keys:
        return np.zeros(0, np.int64), []
    numbers: dict[bytes, int] = {}
    sid = np.fromiter((numbers.setdefault(key[:time_at] + key[time_at + 4:], len(numbers))
                       for key in keys), np.int64, len(keys))
    firsts = [-1] * len(numbers)
    for i, (key, number) in enumerate(zip(keys, sid.tolist())):
        first = firsts[number]
        if first < 0 or key < keys[first]:
            firsts[number] = i
    return sid, firsts


def _cat(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
    if not arrays:
        return np.zeros(0, dtype)
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
