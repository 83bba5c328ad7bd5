"""Closed rollup rows through range entries: one stamp of the key range, one row per series.

A 30-day query reads 30 day rows per series from the 1-hour table; row by row that is a stamp,
a cache lookup and a Python step per row. On the embedded store the closed rows of the scan
ranges are validated at once (``SqliteTable.range_newest``: the rows and their newest write
time, aggregated in one statement) and kept *joined*: every series' cells of the wanted
aggregates lie in one block, series after series (value cells, then count cells), so the
reader sees one :class:`RollupRow` per series, standing for all its rows (``rows``, stored
bytes), and combines buckets over the block without a step per row. A changed stamp, or no
entry, reads the rows as before (``RowSource.rows``) and joins them again. Why every change is
seen: docs/cache.md.

Before the range stamp (two index seeks per row, ~90 ms for a day of 1,000 series in the
1-minute table), the embedded store's table version is compared: an entry remembers the
version read before its stamp, and while no write transaction has touched the table since,
the entry is current without reading the range. Rollup tables change once an hour (the
background job) or when ``/api/rollup`` writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import cast

import numpy as np

from app.storage.base import RANGE_NEWEST, VERSIONED, able
from app.storage.codec_decode import DecodedRow
from app.tsdb import hour_cache
from app.tsdb.hour_cache import ENTRY_OVERHEAD_BYTES, RangeEntry
from app.tsdb.read.closed_ranges import RANGE_SETTLED_MS, asked_before
from app.tsdb.read.rollup_rows import NO_COUNT, RollupRow, RowSource

Range = tuple[bytes, bytes]
RowStamps = list[tuple[bytes, int, int]]
Version = tuple[int, int] | None
Kept = tuple[list[tuple[bytes, RollupRow]], RowStamps | None, Version]
"""A range entry's payload: one joined row per series, the row stamps read (HBase), and the
table's version read before its stamp (embedded store)."""


def closed_rows(source: RowSource, ranges: Sequence[Range]) -> list[tuple[bytes, RollupRow]]:
    """One joined row per series of the closed rows of ``ranges``, in key order of their
    first rows."""
    cache = source.cache
    assert cache is not None
    space, key = source.space + "\x00ranges", repr(list(ranges)).encode()
    if able(source.table, RANGE_NEWEST) is None and not asked_before(space, key):
        return list(source.rows(ranges))  # HBase: see closed_ranges.read_closed
    version = source.table.version() if able(source.table, VERSIONED) is not None else None
    known = cache.peek_range(space, key)
    if known is not None and version is not None and cast(Kept, known.payload)[2] == version:
        cache.get_range(space, key, known.stamp)  # counted as a hit
        return cast(Kept, known.payload)[0]
    stamp, row_stamps = _stamp(source, ranges)  # before the values: see docs/cache.md
    entry = cache.get_range(space, key, stamp)
    if entry is not None:
        payload = cast(Kept, entry.payload)
        if payload[1] == row_stamps:
            if version is not None:  # current at this version too
                cache.put_range(space, key, replace(entry, payload=(*payload[:2], version)))
            return payload[0]
    rows = list(source.rows(ranges))
    joined = source.joined_series  # read from columns: joined by series already
    if joined:
        whole = joined[0][1].decoded
    else:
        joined, whole = join_series(rows, source.series_key)
    settled = stamp[1] + RANGE_SETTLED_MS <= hour_cache.clock_ms()
    if settled and all(row.kept for _, row in rows):
        nbytes = (whole.ts_ms.nbytes + whole.values.nbytes + whole.is_int.nbytes
                  + ENTRY_OVERHEAD_BYTES * (len(joined) + 1))
        cache.put_range(space, key, RangeEntry(stamp, (joined, row_stamps, version), nbytes,
                                               len(rows)))
    return joined


def _stamp(source: RowSource, ranges: Sequence[Range]
           ) -> tuple[hour_cache.Stamp, RowStamps | None]:
    """Embedded store: the rows and their newest write time, one statement. HBase: every
    row's stamp of the wanted cells (kept with the entry and compared whole), and their
    number and newest write time as the quick first test."""
    table = source.table
    if able(table, RANGE_NEWEST) is not None:
        return table.range_newest(ranges, "t"), None
    rows = [row for start, stop in ranges
            for row in table.scan_stamps_packed(start, stop, "t", source.prefixes)]
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
