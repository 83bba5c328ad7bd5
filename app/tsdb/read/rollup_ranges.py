"""Closed rollup rows through range entries: one stamp of the key range, one row per series.

A 30-day query reads 30 day rows per series from the 1-hour table; row by row that is a stamp,
a cache lookup and a Python step per row. On HBase the closed rows of the scan ranges, from
the second time the process reads them, are validated by the stamps of their rows (read
without values) and kept *joined*: every series' cells of the wanted aggregates lie in one
block, series after series (value cells, then count cells), so the reader sees one
:class:`RollupRow` per series, standing for all its rows (``rows``, stored bytes), and
combines buckets over the block without a step per row. A changed stamp, or no entry, reads
the rows as before (``RowSource.rows``) and joins them again. Why every change is seen:
docs/cache.md. (The embedded store reads its rollup rows' columns instead: no entry is kept,
``plan._cache_policy``.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import numpy as np

from app.storage.codec_decode import DecodedRow
from app.tsdb import hour_cache
from app.tsdb.hour_cache import ENTRY_OVERHEAD_BYTES, RangeEntry
from app.tsdb.read.closed_ranges import RANGE_SETTLED_MS, asked_before
from app.tsdb.read.rollup_rows import NO_COUNT, RollupRow, RowSource

Range = tuple[bytes, bytes]
RowStamps = list[tuple[bytes, int, int]]
Kept = tuple[list[tuple[bytes, RollupRow]], RowStamps]
"""A range entry's payload: one joined row per series, and the row stamps read."""


def closed_rows(source: RowSource, ranges: Sequence[Range]) -> list[tuple[bytes, RollupRow]]:
    """One joined row per series of the closed rows of ``ranges``, in key order of their
    first rows."""
    cache = source.cache
    assert cache is not None
    space, key = source.space + "\x00ranges", repr(list(ranges)).encode()
    if not asked_before(space, key):
        return list(source.rows(ranges))  # see closed_ranges.read_closed
    stamp, row_stamps = _stamp(source, ranges)  # before the values: see docs/cache.md
    entry = cache.get_range(space, key, stamp)
    if entry is not None and cast(Kept, entry.payload)[1] == row_stamps:
        return cast(Kept, entry.payload)[0]
    rows = list(source.rows(ranges))
    joined, whole = join_series(rows, source.series_key)
    settled = stamp[1] + RANGE_SETTLED_MS <= hour_cache.clock_ms()
    if settled and all(row.kept for _, row in rows):
        nbytes = (whole.ts_ms.nbytes + whole.values.nbytes + whole.is_int.nbytes
                  + ENTRY_OVERHEAD_BYTES * (len(joined) + 1))
        cache.put_range(space, key, RangeEntry(stamp, (joined, row_stamps), nbytes, len(rows)))
    return joined


def _stamp(source: RowSource, ranges: Sequence[Range]) -> tuple[hour_cache.Stamp, RowStamps]:
    """Every row's stamp of the wanted cells (kept with the entry and compared whole), and
    their number and newest write time as the quick first test."""
    rows = [row for start, stop in ranges
            for row in source.table.scan_stamps_packed(start, stop, "t", source.prefixes)]
    return (len(rows), max((row[2] for row in rows), default=0)), rows


def join_series(rows: Sequence[tuple[bytes, RollupRow]], series_key: Callable[[bytes], bytes]
                ) -> tuple[list[tuple[bytes, RollupRow]], DecodedRow]:
    """The rows' cells copied into one block, series after series (every series' value
    cells, then every series' count cells), and one row per series spanning its cells."""
    ordered = sorted(rows, key=lambda item: (series_key(item[0]), item[0]))
    parts = [(row.decoded, row.spans[0], row.spans[1]) for _, row in ordered]
    parts += [(row.decoded, row.spans[2], row.spans[3]) for _, row in ordered]
    whole = DecodedRow(_joined([d.ts_ms[a:b] for d, a, b in parts], np.int64),
                       _joined([d.values[a:b] for d, a, b in parts], np.float64),
                       _joined([d.is_int[a:b] for d, a, b in parts], np.bool_))
    for array in (whole.ts_ms, whole.values, whole.is_int):
        array.flags.writeable = False  # shared by later queries
    sizes = np.array([b - a for _, a, b in parts], np.int64)
    ends = np.cumsum(sizes)
    n = len(ordered)
    keys = [series_key(key) for key, _ in ordered]
    firsts = [i for i in range(n) if i == 0 or keys[i] != keys[i - 1]]
    out = []
    for first, nxt in zip(firsts, [*firsts[1:], n]):
        spans = (int(ends[first] - sizes[first]), int(ends[nxt - 1]),
                 int(ends[n + first] - sizes[n + first]), int(ends[n + nxt - 1]))
        members = ordered[first:nxt]
        out.append((members[0][0], RollupRow(
            (NO_COUNT, 0), whole, sum(row.stored_bytes for _, row in members), None,
            spans=spans, kept=False, rows=len(members))))
    out.sort(key=lambda item: item[0])
    return out, whole


def _joined(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype)
