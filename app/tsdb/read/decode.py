"""One decode for every row source: stored cells to points, many rows in one vectorised pass.

Row j of a pass has its timestamps shifted by ``j * SERIES_SHIFT_S`` seconds, so the decoder's
ascending sort leaves the rows one after the other; cutting at the shift boundaries and taking
the shift back gives each row (or series) its own arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from app.engine.model import Int64Array
from app.storage import codec
from app.storage.base import Row, Table
from app.storage.codec_cells import cell_kind, cell_points
from app.storage.codec_decode import decode_stored_rows
from app.storage.packed_cells import PackedCells
from app.tsdb.annotations import query_note
from app.tsdb.hour_cache import CachedRow
from app.tsdb.read.keys import SeriesRows, base_time_s

# Integers at or beyond 2**53 lose digits as float64; their exact values are re-read.
EXACT_DOUBLE_LIMIT = 2.0**53
# Wider than any timestamp in ms (2**43 ms is the year 2248) and a whole number of seconds.
SERIES_SHIFT_S = 2**43 // 1000
DATA_PREFIX = codec.DATA_PREFIX

Pass = tuple[codec.DecodedRow, np.ndarray, np.ndarray]
"""A pass's decode: its points (rows one after the other, each in time order), where rows
2.. start, and the points that are integers beyond 2**53."""


def decode_pass(rows: Sequence[tuple[bytes, Row]], time_at: int) -> Pass | None:
    """Rows read from storage decoded in one vectorised pass; ``time_at``: where a row key's
    base time starts."""
    if not rows:
        return None
    merged = decode_stored_rows(
        ((int.from_bytes(key[time_at:time_at + 4], "big") + j * SERIES_SHIFT_S, cells)
         for j, (key, cells) in enumerate(rows)), DATA_PREFIX)
    shift_ms = SERIES_SHIFT_S * 1000
    cuts = np.searchsorted(merged.ts_ms, np.arange(1, len(rows)) * shift_ms)
    if merged.has_duplicates:  # the caller decodes such a pass row by row
        return merged, cuts, np.empty(0, np.int64)
    counts = np.diff(cuts, prepend=0, append=merged.ts_ms.size)
    merged.ts_ms -= np.repeat(np.arange(len(rows), dtype=np.int64) * shift_ms, counts)
    for array in (merged.ts_ms, merged.values, merged.is_int):
        # The cache may keep these arrays and hand them to later queries as they are.
        array.flags.writeable = False
    big = np.flatnonzero(merged.is_int & (np.abs(merged.values) >= EXACT_DOUBLE_LIMIT))
    return merged, cuts, big


def decode_series(layout: codec.RowKeyLayout, groups: Sequence[SeriesRows]
                  ) -> list[codec.DecodedRow] | None:
    """Stored rows of many series in one pass, each series' own arrays; None when two cells
    hold the same timestamp (then each row is decoded with its write times)."""
    batch = [(base_time_s(layout, key) + j * SERIES_SHIFT_S, cells)
             for j, group in enumerate(groups) for key, cells in group.rows]
    merged = decode_stored_rows(batch, DATA_PREFIX)
    if merged.has_duplicates:
        return None
    shift_ms = SERIES_SHIFT_S * 1000
    cuts = np.searchsorted(merged.ts_ms, np.arange(1, len(groups)) * shift_ms).tolist()
    out = []
    for j, (start, end) in enumerate(zip([0, *cuts], [*cuts, merged.ts_ms.size])):
        ts_ms = merged.ts_ms[start:end]
        ts_ms -= j * shift_ms  # in place: the merged array is ours alone
        out.append(codec.DecodedRow(ts_ms, merged.values[start:end], merged.is_int[start:end]))
    return out


def decode_row(table: Table, layout: codec.RowKeyLayout, key: bytes, cells: Row
               ) -> codec.DecodedRow:
    """One stored row; the same timestamp in two cells (rare) is re-read with write times,
    the newest winning."""
    base_s = base_time_s(layout, key)
    data = data_cells(cells)
    decoded = codec.decode_row(base_s, data)
    if decoded.has_duplicates:
        times = table.row_write_times(key)
        write_ts = {column[2:]: ts for column, ts in times.items()}
        decoded = codec.decode_row(base_s, data, write_ts)
    return decoded


def exact_longs(layout: codec.RowKeyLayout, group: SeriesRows, decoded: codec.DecodedRow
                ) -> Int64Array | None:
    """Exact 64-bit values when an integer is beyond a double's 2**53 (rare: counters
    near Long.MAX_VALUE), which the float64 decoder rounds; None otherwise."""
    big = decoded.is_int & (np.abs(decoded.values) >= EXACT_DOUBLE_LIMIT)
    if not big.any():
        return None
    exact: dict[int, int] = {}
    for key, cells in group.rows:
        if isinstance(cells, CachedRow):  # kept only without such integers
            continue
        base_ms = base_time_s(layout, key) * 1000
        for qualifier, value in data_cells(cells):
            kind = cell_kind(qualifier)
            for offset_ms, point_q, point_v in cell_points(kind, qualifier, value) \
                    if kind is not None else ():
                if not point_q[-1] & codec.FLAG_FLOAT:
                    exact[base_ms + offset_ms] = int.from_bytes(point_v, "big", signed=True)
    longs = np.where(decoded.is_int & ~big, decoded.values, 0.0).astype(np.int64)
    for i in np.flatnonzero(big).tolist():
        longs[i] = exact[int(decoded.ts_ms[i])]
    return longs


def stored_bytes(key: bytes, cells: Row) -> int:
    """Per cell its row key, column name and value, as OpenTSDB weighs its KeyValues: many
    small cells cost more than one compacted column."""
    if isinstance(cells, PackedCells):  # from the joined bytes, no entry made
        return cells.stored_bytes(len(key))
    return len(key) * len(cells) + sum(map(len, cells)) + sum(map(len, cells.values()))


def has_notes(cells: Row) -> bool:
    """Whether the row may hold a note: a column of odd length (a note's qualifier is 3 or 5
    bytes, a data column's even; the family ``t:`` is 2)."""
    if isinstance(cells, PackedCells):
        return cells.has_odd_column()
    return any(len(column) & 1 for column in cells)


def sliced(merged: codec.DecodedRow, parts: Sequence[codec.DecodedRow],
           rows_per_series: Sequence[int]) -> list[codec.DecodedRow]:
    """Series out of one decode pass whose rows lie series after series, in time order."""
    row_end = np.cumsum([p.ts_ms.size for p in parts], dtype=np.int64)
    series_end = row_end[np.cumsum(rows_per_series) - 1].tolist()
    return [codec.DecodedRow(merged.ts_ms[a:b], merged.values[a:b], merged.is_int[a:b])
            for a, b in zip([0, *series_end], series_end)]


def joined(rows: Sequence[tuple[codec.DecodedRow, CachedRow | None]],
           rows_per_series: Sequence[int]) -> list[codec.DecodedRow]:
    """Consecutive rows (each ascending) joined per series: a slice of a kept block when the
    series' rows lie one after the other in it (no copy), else one copy of that series."""
    out = []
    at = 0
    for size in rows_per_series:
        series = rows[at:at + size]
        at += size
        out.append(block_slice(series) or concatenated([d for d, _ in series], ordered=True))
    return out


def block_slice(rows: Sequence[tuple[codec.DecodedRow, CachedRow | None]]
                ) -> codec.DecodedRow | None:
    """The rows as one slice of the block they were kept in, when they lie in order in it."""
    first = rows[0][1] if rows else None
    if first is None or first.block is None or first.offset < 0:
        return None
    block, start = first.block, first.offset
    end = start
    for decoded, entry in rows:
        if entry is None or entry.block is not block or entry.offset != end:
            return None
        end += len(decoded)
    arrays = block.arrays
    return codec.DecodedRow(arrays.ts_ms[start:end], arrays.values[start:end],
                            arrays.is_int[start:end])


def concatenated(parts: Sequence[codec.DecodedRow], ordered: bool = False) -> codec.DecodedRow:
    """Rows in one copy; for one series' rows (``ordered``), rows that overlap in time (not
    expected) are sorted."""
    ts_ms = np.concatenate([p.ts_ms for p in parts])
    values = np.concatenate([p.values for p in parts])
    is_int = np.concatenate([p.is_int for p in parts])
    if ordered and ts_ms.size > 1 and not bool((ts_ms[1:] > ts_ms[:-1]).all()):
        order = np.argsort(ts_ms, kind="stable")
        return codec.DecodedRow(ts_ms[order], values[order], is_int[order])
    return codec.DecodedRow(ts_ms, values, is_int)


def data_cells(cells: Row) -> list[tuple[bytes, bytes]]:
    """``(qualifier, value)`` of the ``t`` family (the decoder skips non-data qualifiers)."""
    return [(column[2:], value) for column, value in cells.items()
            if column.startswith(DATA_PREFIX)]


def row_annotations(layout: codec.RowKeyLayout, key: bytes, cells: Row) -> list[dict[str, Any]]:
    """The row's notes, ready for the response: every field Grafana reads, times in seconds
    (the serializer keeps those starting in the query range)."""
    notes: list[dict[str, Any]] = []
    if not has_notes(cells):
        return notes
    for column, value in cells.items():
        if column.startswith(DATA_PREFIX) and codec.is_annotation_qualifier(column[2:]):
            note = query_note(layout, key, column[2:], value)
            if note is not None:
                notes.append(note)
    return notes
