"""The raw rows of a sub-query from their sources, merged by time per series: the closed
rows through a range entry of the hour cache (``app.tsdb.closed_range``), the later rows from
the row source (``rows``: storage scan and hour cache), decoded whole or fused with the
downsample (``fused``)."""

from __future__ import annotations

from app.engine.downsample import Window
from app.engine.model import Series
from app.query.ast import SubQuery
from app.query.filters import build_filter
from app.query.limits import filled_buckets
from app.tsdb import closed_range, hour_cache
from app.tsdb.hour_cache import cache_for
from app.tsdb.read.fused import read_fused
from app.tsdb.read.rows import RowReader


def read_rows(reader: RowReader, sub: SubQuery, first_s: int, last_s: int,
              fuse: Window | None = None) -> list[Series]:
    """The series of ``sub`` from the rows with base times in ``[first_s, last_s]``: the
    closed rows through a range entry of the hour cache when the store can stamp a whole
    range (``closed_range``), the others (and all of them otherwise) row by row.

    ``fuse``: the downsampling window when the read may downsample as it decodes
    (``app.engine.staged``), which it does when no hour cache takes part in the read
    (the cache keeps raw points): then the series come as ``StagedSeries``."""
    filters = [build_filter(f) for f in sub.filters]
    cache = cache_for(reader.tsdb) if reader.range_cache_on() else None
    closed_s = None if cache is None else closed_range.closed_last_s(
        first_s, last_s, reader.row_span_s, hour_cache.clock_ms())
    if cache is not None and closed_s is not None:
        series_before = reader.stats.series
        closed = closed_range.read_closed(reader, cache, sub, filters, first_s, closed_s)
        if closed is not None:
            if closed_s == last_s:
                return closed
            rest = reader.read_stored(sub, filters, closed_s + reader.row_span_s, last_s)
            joined = closed_range.joined(closed, rest)
            reader.stats.series = series_before + len(joined)  # each series once
            reader.limits.check_emitted(sub, reader.buckets, len(joined))  # all of them
            return joined
    rows, named, hits = reader.row_stream(sub, filters, first_s, last_s)
    if fuse is not None and reader.keeper is None and not hits and reader.kept_counts is None:
        return read_fused(reader, rows, filters, fuse)
    return reader.decode(reader.group(rows, named, hits), filters, sub.explicit_tags)


def read_hours(reader: RowReader, sub: SubQuery, window: Window, first_s: int,
               last_s: int) -> list[Series]:
    """Part of a split read (``app.tsdb.split``): the series of ``sub`` from the rows with
    base times in ``[first_s, last_s]``, downsampled as they are read when no hour cache
    takes part (see :func:`read_rows`)."""
    reader.sub = sub
    reader.buckets = filled_buckets(sub, window.query_start_ms, window.query_end_ms)
    return read_rows(reader, sub, first_s, last_s, window)
