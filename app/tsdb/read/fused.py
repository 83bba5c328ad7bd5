"""The read path with the downsample fused into the decode: peak memory bounded by a chunk.

Storage streams a metric's hour rows in key order: salt, metric, *hour*, tags, so a series is
complete only at the end of the scan, and holding every row's cells until then (about 10
bytes a point), then every decoded point (17), is what bounded a query's memory by its size.
When the downsample's buckets never straddle an hour row (``app.engine.staged.fusable``), the
rows are instead decoded a chunk at a time as they come (``CHUNK_STORED_BYTES`` of cells,
about 400,000 points of compacted 10-second data), in one vectorised pass whose segments are
the rows themselves; each chunk is downsampled at once with fill policy ``none`` and its cells
and raw points let go. Only the buckets are kept, written at the end series after series (row
key order) into one buffer the engine reads without a copy. The limits run as in the
row-by-row read: bytes and the deadline every ``CHECK_EVERY_ROWS`` rows, points, buckets x
series and the deadline after each chunk, buckets x series again at the end.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.engine.downsample import Window
from app.engine.flat import FlatSeries, constant, ranges_to_index
from app.engine.model import Series
from app.engine.staged import in_one_buffer, stage_chunk
from app.query.filters import series_matches
from app.storage.base import Row
from app.tsdb.read.decode import concatenated, decode_pass, has_notes, row_annotations
from app.tsdb.read.keys import series_order
from app.tsdb.read.rows import CHECK_EVERY_ROWS, RowReader, StoredRow, close_scan

# Stored bytes of cells decoded per chunk (compacted 10-second data: ~10 bytes a point).
CHUNK_STORED_BYTES = 4 << 20
# And at most this many rows, whatever they weigh.
CHUNK_ROWS = 4096


@dataclass(eq=False, slots=True)
class _Fused:
    """One series being read: what the response needs of it."""

    index: int  # in the order first seen
    row_order: bytes
    tag_uids: tuple[tuple[bytes, bytes], ...]
    tags: dict[str, str]
    notes: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class _Piece:
    """One chunk's buckets: per row its series (``_Fused.index``), bucket count and raw
    point count, and the buckets, row after row."""

    owners: np.ndarray
    lengths: np.ndarray
    raw_points: np.ndarray
    ts_ms: np.ndarray
    values: np.ndarray


def read_fused(reader: RowReader, rows: Iterator[tuple[bytes, StoredRow]],
               window: Window) -> list[Series]:
    """The series of the reader's plan from ``rows`` (stored rows, each series' rows in
    time order), downsampled chunk by chunk; in row-key order."""
    fused = FusedRead(reader, window)
    fused.add_rows(rows)
    return fused.finish()


class FusedRead:
    """One fused read: its series as first seen and the buckets of the chunks read so far,
    from stored rows (:meth:`add_rows`) or rows decoded elsewhere (:meth:`add_decoded`: the
    embedded store's hour columns), assembled at the end (:meth:`finish`)."""

    def __init__(self, reader: RowReader, window: Window) -> None:
        self.reader = reader
        self.window = window
        self.by_series: dict[bytes, _Fused | None] = {}
        self.series: list[_Fused] = []
        self.pieces: list[_Piece] = []

    def _series_of(self, key: bytes, order: bytes | None = None) -> _Fused | None:
        """The series of a row key (None: one the filters drop), matched when first seen."""
        if order is None:
            order = series_order(self.reader.layout, key)
        fused = self.by_series.get(order)
        if fused is None and order not in self.by_series:
            fused = self.by_series[order] = _matched(self.reader, key, order, len(self.series))
            if fused is not None:
                self.series.append(fused)
        return fused

    def add_rows(self, rows: Iterator[tuple[bytes, StoredRow]]) -> None:
        """Stored rows, decoded and downsampled a chunk at a time."""
        reader, window = self.reader, self.window
        plan, stats, layout = reader.plan, reader.stats, reader.layout
        sub = plan.sub
        chunk: list[tuple[bytes, Row]] = []
        owners: list[int] = []
        chunk_bytes = 0
        try:
            for key, cells in rows:
                assert isinstance(cells, dict)  # stored cells: no hour cache in this read
                weight = reader.weight(key, cells)
                stats.rows += 1
                stats.bytes += weight
                if stats.rows % CHECK_EVERY_ROWS == 0:
                    reader.limits.check_read(sub, stats.points, stats.bytes)
                    reader.deadline.check(sub.index)
                fused = self._series_of(key)
                if fused is None:
                    continue  # a series the filters dropped
                if has_notes(cells):
                    fused.notes += row_annotations(layout, key, cells)
                chunk.append((key, cells))
                owners.append(fused.index)
                chunk_bytes += weight
                if chunk_bytes >= CHUNK_STORED_BYTES or len(chunk) >= CHUNK_ROWS:
                    self.pieces.append(_stage(reader, _decoded_rows(reader, chunk), owners,
                                              window, len(self.series)))
                    chunk, owners, chunk_bytes = [], [], 0
        finally:
            close_scan(rows)
        reader.limits.check_read(sub, stats.points, stats.bytes)
        if chunk:
            self.pieces.append(_stage(reader, _decoded_rows(reader, chunk), owners, window,
                                      len(self.series)))

    def add_decoded(self, keys: Sequence[bytes], rows: FlatSeries,
                    stored_bytes: np.ndarray) -> None:
        """Rows decoded elsewhere, each a segment of ``rows`` (``keys[i]`` is segment i's),
        with the stored bytes of each, counted and downsampled as one chunk. Rows of series
        the filters drop are counted, as stored rows are."""
        reader = self.reader
        plan, stats = reader.plan, reader.stats
        owners, kept = [], []
        time_at = reader.layout.salt_width + reader.layout.metric_width
        orders = [key[:time_at] + key[time_at + 4:] for key in keys]
        by_series = self.by_series
        new = [key for key, order in zip(keys, orders) if order not in by_series]
        if new:
            reader.prefetch_names(new)
        for i, (key, order) in enumerate(zip(keys, orders)):
            fused = self._series_of(key, order)
            if fused is not None:
                owners.append(fused.index)
                kept.append(i)
        reader.count_rows(stored_bytes)
        reader.limits.check_read(plan.sub, stats.points, stats.bytes)
        reader.deadline.check(plan.sub.index)
        if not kept:
            return
        if len(kept) < len(keys):
            rows = rows.take(kept)
        self.pieces.append(_stage(reader, rows, owners, self.window, len(self.series)))

    def finish(self) -> list[Series]:
        reader = self.reader
        plan = reader.plan
        reader.limits.check_emitted(plan.sub, plan.buckets, len(self.series))
        reader.stats.series += len(self.series)
        return _assembled(reader, self.series, self.pieces)


def _matched(reader: RowReader, key: bytes, order: bytes, index: int) -> _Fused | None:
    """A series first seen, when its tag names pass the filters (``RowReader.matching``)."""
    tag_uids = reader.layout.parse_row_key(key).tags
    tags = reader.names(tag_uids)
    plan = reader.plan
    if tags is None or not series_matches(tags, plan.filters, plan.sub.explicit_tags):
        return None
    return _Fused(index, order, tuple(tag_uids), tags)


def _stage(reader: RowReader, rows: FlatSeries, owners: Sequence[int], window: Window,
           series_seen: int) -> _Piece:
    """Downsample one chunk's decoded rows, count them; the limits and the deadline."""
    plan, stats = reader.plan, reader.stats
    sub = plan.sub
    stats.points += int(rows.ts_ms.size)
    reader.limits.check_read(sub, stats.points, stats.bytes)
    reader.limits.check_emitted(sub, plan.buckets, series_seen)
    reader.deadline.check(sub.index)
    assert sub.downsample is not None
    buckets, raw_points = stage_chunk(sub.downsample, window, rows)
    return _Piece(np.array(owners, dtype=np.int64), buckets.lengths, raw_points,
                  np.ascontiguousarray(buckets.ts_ms), np.ascontiguousarray(buckets.values))


def _decoded_rows(reader: RowReader, chunk: Sequence[tuple[bytes, Row]]) -> FlatSeries:
    """The chunk's rows decoded, each row one segment (in chunk order); values as doubles
    (a downsample reads nothing else, so integers beyond 2**53 need no exact re-read)."""
    done = decode_pass(chunk, reader.layout.salt_width + reader.layout.metric_width)
    assert done is not None
    merged, cuts, _ = done
    if merged.has_duplicates:  # rare: row by row, the newest cell winning (write times)
        parts = [reader.decode_row(key, cells) for key, cells in chunk]
        rows = concatenated(parts)
        offsets = np.concatenate(([0], np.cumsum([len(p) for p in parts]))).astype(np.int64)
    else:
        rows = merged
        offsets = np.concatenate(([0], cuts, [merged.ts_ms.size])).astype(np.int64)
    return FlatSeries(rows.ts_ms, rows.values, constant(0, np.int64, rows.ts_ms.size),
                      ~rows.is_int, offsets)


def _assembled(reader: RowReader, series: list[_Fused], pieces: list[_Piece]
               ) -> list[Series]:
    """Every series' buckets, series after series in row-key order, in one buffer (each
    piece copied in and let go), as :class:`StagedSeries` the engine joins without a copy."""
    counts = np.zeros(len(series), dtype=np.int64)  # by _Fused.index
    raw_points = np.zeros(len(series), dtype=np.int64)
    for piece in pieces:
        np.add.at(counts, piece.owners, piece.lengths)
        np.add.at(raw_points, piece.owners, piece.raw_points)
    series.sort(key=lambda s: s.row_order)
    ordered = np.array([s.index for s in series], dtype=np.int64)
    ends = np.cumsum(counts[ordered])
    total = int(ends[-1]) if len(ends) else 0
    cursor = np.zeros(len(series), dtype=np.int64)  # where each series writes next
    cursor[ordered] = ends - counts[ordered]
    ts_ms = np.empty(total, dtype=np.int64)
    values = np.empty(total, dtype=np.float64)
    while pieces:
        piece = pieces.pop(0)
        at = ranges_to_index(_row_starts(cursor, piece.owners, piece.lengths), piece.lengths)
        ts_ms[at] = piece.ts_ms
        values[at] = piece.values
        np.add.at(cursor, piece.owners, piece.lengths)
    offsets = np.concatenate(([0], ends)).astype(np.int64)
    for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
        _in_time_order(ts_ms[start:end], values[start:end])
    spec = reader.plan.sub.downsample
    assert spec is not None
    tsuid_at = reader.layout.salt_width
    names = [(s.row_order[tsuid_at:].hex().upper(), s.tags, s.notes, s.row_order,
              dict(zip(s.tags, s.tag_uids))) for s in series]
    return list(in_one_buffer(names, ts_ms, values, offsets, raw_points[ordered].tolist(),
                              spec))


def _row_starts(cursor: np.ndarray, owners: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Where each row of a piece writes its buckets: its series' cursor, plus the buckets
    of that series' earlier rows in the piece (a series' rows come in time order)."""
    order = np.argsort(owners, kind="stable")
    sorted_owners, sorted_lengths = owners[order], lengths[order]
    before = np.cumsum(sorted_lengths) - sorted_lengths  # buckets of the rows before
    heads = np.r_[True, sorted_owners[1:] != sorted_owners[:-1]]
    first = np.maximum.accumulate(np.where(heads, np.arange(len(order)), 0))
    starts = np.empty_like(before)
    starts[order] = cursor[sorted_owners] + before - before[first]
    return starts


def _in_time_order(ts_ms: np.ndarray, values: np.ndarray) -> None:
    """Sort one series' buckets in place should its rows have come out of time order (each
    range streams a series' rows by key, and the ranges come one after the other in time,
    so they do not; a bucket lies in one row, so no two rows hold the same one)."""
    if ts_ms.size > 1 and not bool((ts_ms[1:] > ts_ms[:-1]).all()):
        order = np.argsort(ts_ms, kind="stable")
        ts_ms[:] = ts_ms[order]
        values[:] = values[order]
