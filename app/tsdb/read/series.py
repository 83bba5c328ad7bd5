"""The raw rows of a sub-query's plan from their sources, merged by time per series: the
closed rows through a range entry of the hour cache (``app.tsdb.read.closed_ranges``), the later
rows from the row source (``rows``: storage scan and hour cache), decoded whole or fused with
the downsample (``fused``)."""

from __future__ import annotations

from app.engine.downsample import Window
from app.engine.model import Series
from app.storage.base import HourColumn
from app.tsdb import hour_cache
from app.tsdb.hour_cache import HourCache, cache_for
from app.tsdb.read import closed_ranges, hour_columns, hour_reads
from app.tsdb.read.fused import read_fused
from app.tsdb.read.merge import merged
from app.tsdb.read.rows import RowReader


def read_rows(reader: RowReader, first_s: int, last_s: int,
              fuse: Window | None = None) -> list[Series]:
    """The series of the reader's plan from the rows with base times in ``[first_s, last_s]``:
    the closed rows from the hour columns (a fused read, see :func:`_fused_from_columns`) or
    through a range entry of the hour cache when the plan allows it and the store can stamp
    a whole range (``closed_ranges``), the others (and all of them otherwise) row by row.

    ``fuse``: the downsampling window when the read may downsample as it decodes
    (``app.engine.staged``), which it does when no hour cache takes part in the read
    (the cache keeps raw points): then the series come as ``StagedSeries``."""
    plan = reader.plan
    cache = cache_for(reader.tsdb) if plan.cache.ranges else None
    closed_s = closed_ranges.closed_last_s(first_s, last_s, reader.row_span_s,
                                           hour_cache.clock_ms())
    if closed_s is not None:
        columns, asked = _fused_from_columns(reader, cache, first_s, closed_s, fuse)
        if columns is not None and fuse is not None:
            return hour_reads.read_fused(reader, columns, first_s, closed_s, last_s, fuse)
        series_before = reader.stats.series
        closed = None if cache is None else \
            closed_ranges.read_closed(reader, cache, first_s, closed_s, asked)
        if closed is not None:
            if closed_s == last_s:
                return closed
            rest = reader.read_stored(closed_s + reader.row_span_s, last_s)
            joined = merged([closed, rest])
            reader.stats.series = series_before + len(joined)  # each series once
            reader.limits.check_emitted(plan.sub, plan.buckets, len(joined))  # all of them
            return joined
    rows, named, hits = reader.row_stream(first_s, last_s)
    if fuse is not None and reader.keeper is None and not hits and reader.kept_counts is None:
        return read_fused(reader, rows, fuse)
    return reader.decode(reader.group(rows, named, hits))


def _fused_from_columns(reader: RowReader, cache: HourCache | None, first_s: int,
                        closed_s: int, fuse: Window | None
                        ) -> tuple[HourColumn | None, bool | None]:
    """Whether a fused read takes its closed hours ``[first_s, closed_s]`` from the hour
    columns (the columns, else None), decided once: with no hour cache taking part, or as
    the first read of these ranges by this process (keeping nothing: the cache keeps them
    from the next read of the same ranges, a dashboard's refresh; a fresh process answers
    at columnar speed). Also whether the ranges were read before, when that was asked
    (None: not asked; ``read_closed`` asks)."""
    columns = hour_columns.source(reader) if fuse is not None else None
    if columns is None:
        return None, None
    if cache is not None:
        asked = closed_ranges.read_before(reader, first_s, closed_s)
        return (None if asked else columns), asked
    plan = reader.plan
    alone = not plan.cache.rows and not plan.cache.ranges and reader.kept_counts is None
    return (columns if alone else None), None
