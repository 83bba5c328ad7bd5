"""A sub-query's read, decided once before any row is read, and frozen: every source of the
read (storage scan, hour cache, closed ranges, rollup tables, the split helper's half) reads
from the plan and decides nothing of it again.

What it holds: the window and the hours to scan, the filled buckets the limits count, the tag
filters (built once) and the rows in UIDs (``select``: unknown names are OpenTSDB's 400s here,
before any read; exact keys or a scan, chosen by cost; on HBase the row-key regexp the region
servers filter the scan with: ``value_uids``), whether the read may downsample as it
decodes (``fuse``), what the hour cache may do (``CachePolicy``), which rollup table answers
(``rollup_choice``) and whether the worker's helper process reads half of it
(``split_choice``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from app.engine.downsample import Window
from app.engine.execute import scan_bounds_ms
from app.engine.staged import fusable
from app.query.ast import SubQuery
from app.query.filters import TagFilter, compile_filters
from app.query.limits import filled_buckets
from app.storage.base import SCAN_COLUMNS, SCAN_STAMPS, able
from app.tsdb import TSDB
from app.tsdb.hour_cache import cache_for
from app.tsdb.read import rollup_choice, seen, split_choice
from app.tsdb.read.keys import MAX_TIMESPAN_S, scan_hours_s
from app.tsdb.read.rollup_choice import RollupChoice
from app.tsdb.read.select import Selection, fetch_by_key, select
from app.tsdb.read.value_uids import scan_regex


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """What the process's hour cache does for a read (docs/cache.md)."""

    rows: bool  # closed rows come decoded from its row entries, and are kept there
    ranges: bool  # closed hours come a key range at a time from its range entries


NO_CACHE = CachePolicy(rows=False, ranges=False)


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """What one sub-query reads over ``[start_ms, end_ms]``, and how."""

    sub: SubQuery
    start_ms: int
    end_ms: int
    buckets: int  # filled buckets (the buckets x series limit)
    first_s: int  # base times of the first and last hour rows scanned
    last_s: int
    filters: tuple[TagFilter, ...]
    selection: Selection
    cache: CachePolicy
    # The downsampling window when the read may downsample as it decodes (its buckets never
    # straddle an hour row, and every cell need not be kept: not a delete); else None.
    fuse: Window | None = None
    rollup: RollupChoice | None = None
    # A fused read of raw hour rows the worker's helper process reads the later half of
    # (``split_choice``; when the helper is busy as the read starts, it is read whole).
    split: bool = False
    # The row-key regexp a scan of the metric is narrowed with on the storage servers (None:
    # none, or a table that cannot), and the one without the value filters' values, for a
    # read kept as a range entry (shared by every value filter on the same keys).
    row_regex: str | None = None
    key_row_regex: str | None = None


def plan_read(tsdb: TSDB, sub: SubQuery, start_ms: int, end_ms: int, *,
              keeps_cells: bool = False, rollups: bool = True) -> ReadPlan:
    """The plan of ``sub`` over ``[start_ms, end_ms]``.

    ``keeps_cells``: the caller needs every row's stored cells (a delete, a histogram read)
    or reads each hour once (a rollup backfill): no hour cache, nothing fused.
    ``rollups``: whether rollup tables may answer (the split helper reads raw rows only).
    """
    first_s, last_s = scan_hours_s(start_ms, end_ms, sub.downsample)
    fuse = None
    if not keeps_cells and fusable(sub.downsample):
        scan_start_ms, scan_end_ms = scan_bounds_ms(start_ms, end_ms, sub.downsample)
        fuse = Window(scan_start_ms, scan_end_ms, start_ms, end_ms)
    filters = compile_filters(sub.filters)
    selection = select(tsdb, sub, filters)  # UIDs first: their 400s before any read
    if fetch_by_key(tsdb, selection, first_s, last_s):
        selection = dataclasses.replace(selection, by_key=True)
    row_regex = key_row_regex = None
    if not selection.tsuids and not (selection.by_key and selection.exact is not None):
        row_regex = scan_regex(tsdb, tsdb.data_table(), filters, selection.constraints)
        key_row_regex = scan_regex(tsdb, tsdb.data_table(), filters, selection.constraints,
                                   values=False)
    rollup = rollup_choice.choose(tsdb, sub, start_ms, end_ms) if rollups else None
    hours = (last_s - first_s) // MAX_TIMESPAN_S + 1
    split = (rollup is None and fuse is not None and hours > 1 and not sub.tsuids
             and bool(tsdb.config["tsd.query.split.enable"])
             and split_choice.split_pays(tsdb, sub, hours))
    return ReadPlan(sub, start_ms, end_ms, filled_buckets(sub, start_ms, end_ms), first_s,
                    last_s, filters, selection,
                    _cache_policy(tsdb, sub, hours, keeps_cells,
                                  fuse is not None and rollup is None, split, rollup),
                    fuse, rollup, split, row_regex, key_row_regex)


def _cache_policy(tsdb: TSDB, sub: SubQuery, hours: int, keeps_cells: bool, fused: bool,
                  split: bool, rollup: RollupChoice | None) -> CachePolicy:
    """The hour cache takes part unless the read keeps cells, the store cannot stamp rows,
    the read is from rollup tables that keep their rows' columns, or (a fused read of raw
    rows) the part each process reads would not fit the cache (``seen``).

    Rollup columns (the embedded store's, ``sqlite_columns``) are the rows decoded once and
    kept on disk, read a range at a time in matrix steps (``rollup_grid``): as fast as the
    cache's entries warm (30 days of 1,000 series: 19 ms against 24), where keeping them
    made a fresh process's first query 190 ms against 27 (docs/performance.md)."""
    if keeps_cells or cache_for(tsdb) is None \
            or able(tsdb.data_table(), SCAN_STAMPS) is None:
        return NO_CACHE
    if rollup is not None and rollup.tried and all(
            able(tsdb.table(interval.table), SCAN_COLUMNS) is not None
            for interval in rollup.tried):
        return NO_CACHE
    if fused and seen.too_large_to_keep(tsdb, sub, hours, 2 if split else 1):
        return NO_CACHE
    return CachePolicy(rows=True, ranges=True)
