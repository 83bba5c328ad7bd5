"""What a read makes of the closed hours ``hour_columns`` gives (blobs decoded, or stored
rows): a fused read's buckets, each hour one chunk downsampled at once (``read_fused``), or
the plan's series assembled into one block as a read from cells assembles them, kept as a
range entry and its rows (``read_series``; docs/performance.md, "Cold raw reads from hour
columns")."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable

import numpy as np

from app.engine.downsample import Window
from app.engine.flat import FlatSeries, constant, ranges_to_index
from app.engine.model import Series
from app.query.filters import series_matches
from app.storage.base import HourColumn
from app.storage.codec_decode import DecodedRow
from app.storage.hour_blob import HourRows
from app.tsdb import hour_cache
from app.tsdb.hour_cache import Block, CachedRow, cache_for
from app.tsdb.read import rows as row_reading
from app.tsdb.read.fused import FusedRead
from app.tsdb.read.hour_columns import closed_hours, source
from app.tsdb.read.plan import NO_CACHE
from app.tsdb.read.rows import RowReader


def _kept_rows(hour: HourRows, keep: Callable[[bytes], bool] | None
               ) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """The hour's row keys the plan's UID constraints keep, their indexes and offsets."""
    keys = hour.key_list()
    offsets = np.concatenate(([0], np.cumsum(hour.points))).astype(np.int64)
    if keep is None:
        return keys, np.arange(len(keys)), offsets
    index = [i for i, key in enumerate(keys) if keep(key)]
    return [keys[i] for i in index], np.array(index, np.int64), offsets


def read_fused(reader: RowReader, columns: HourColumn, first_s: int, closed_s: int,
               last_s: int, window: Window) -> list[Series]:
    """A fused read whose hours ``[first_s, closed_s]`` are closed: those from hour columns,
    the rest from storage; the hour cache (if on) neither read nor filled."""
    fused = FusedRead(reader, window)
    keep = reader.constraint_test()
    for hour in closed_hours(reader, columns, first_s, closed_s):
        if hour.decoded is None:
            fused.add_rows(iter([row for row in hour.rows if keep is None or keep(row[0])]))
            continue
        keys, index, offsets = _kept_rows(hour.decoded, keep)
        d = hour.decoded
        rows = FlatSeries(d.ts_ms, d.values, constant(0, np.int64, d.ts_ms.size), ~d.is_int,
                          offsets)
        if len(keys) < len(d.points):
            rows = rows.take(index)
        fused.add_decoded(keys, rows, d.stored_bytes[index])
    if closed_s < last_s:
        tail = reader
        if reader.plan.cache != NO_CACHE:  # the hours after: stored rows, not the cache's
            tail = copy.copy(reader)  # the same stats, limits and deadline
            tail.read_plan = dataclasses.replace(reader.plan, cache=NO_CACHE)
            tail.keeper = None
        later, _, _ = tail.row_stream(closed_s + reader.row_span_s, last_s)
        fused.add_rows(later)
    return fused.finish()


def read_series(reader: RowReader, first_s: int, last_s: int) -> list[Series] | None:
    """The plan's series from the closed hours ``[first_s, last_s]`` as ``read_stored`` reads
    them (row-key order, each series' rows and stored bytes recorded in ``kept_counts``), from
    hour columns; None when some hour cannot come from columns (then nothing is counted)."""
    columns = source(reader)
    if columns is None or reader.kept_counts is None:
        return None
    keep = reader.constraint_test()
    keys: list[bytes] = []
    counts, weights, ts_parts, value_parts, int_parts = [], [], [], [], []
    stamps: list[np.ndarray] = []
    for hour in closed_hours(reader, columns, first_s, last_s):
        if hour.decoded is None:
            return None  # notes, duplicates or huge integers: the rows, as before
        found, index, _ = _kept_rows(hour.decoded, keep)
        d = hour.decoded
        if len(found) < len(d.points):
            offsets = np.concatenate(([0], np.cumsum(d.points))).astype(np.int64)
            take = ranges_to_index(offsets[index], d.points[index])
            ts_parts.append(d.ts_ms[take])
            value_parts.append(d.values[take])
            int_parts.append(d.is_int[take])
        else:
            ts_parts.append(d.ts_ms)
            value_parts.append(d.values)
            int_parts.append(d.is_int)
        keys += found
        counts.append(d.points[index])
        weights.append(d.stored_bytes[index])
        stamps.append(np.stack([d.cells[index], d.newest_ms[index]], axis=1))
    series, block = _assembled_series(reader, keys, counts, weights, ts_parts, value_parts,
                                      int_parts)
    if stamps and series:
        _keep_rows(reader, keys, np.concatenate(counts), np.concatenate(weights),
                   np.concatenate(stamps), block)
    return series


def _assembled_series(reader: RowReader, keys: list[bytes], counts: list[np.ndarray],
                      weights: list[np.ndarray], ts_parts: list[np.ndarray],
                      value_parts: list[np.ndarray], int_parts: list[np.ndarray]
                      ) -> tuple[list[Series], tuple[np.ndarray, np.ndarray, DecodedRow]]:
    """Rows (hour after hour) gathered series after series, each in time order, into one
    block whose slices are the series (returned too, with the rows' order in it and which
    rows are of a series the filters kept); the filters' names run once per series."""
    layout, stats, plan = reader.layout, reader.stats, reader.plan
    time_at = layout.salt_width + layout.metric_width
    numbers: dict[bytes, int] = {}
    sid = np.fromiter((numbers.setdefault(key[:time_at] + key[time_at + 4:], len(numbers))
                       for key in keys), np.int64, len(keys))
    base = np.fromiter((int.from_bytes(key[time_at:time_at + 4], "big") for key in keys),
                       np.int64, len(keys))
    points = np.concatenate(counts) if counts else np.zeros(0, np.int64)
    stored = np.concatenate(weights) if weights else np.zeros(0, np.int64)
    reader.count_rows(stored)
    reader.limits.check_read(plan.sub, stats.points, stats.bytes)
    reader.deadline.check(plan.sub.index)
    orders = sorted(numbers)  # row-key order, as read_stored groups them
    rank = np.empty(len(orders), np.int64)
    rank[[numbers[o] for o in orders]] = np.arange(len(orders))
    row_rank = rank[sid]
    order = np.lexsort((base, row_rank))
    ts_ms = _gathered(ts_parts, points, order, np.int64)
    values = _gathered(value_parts, points, order, np.float64)
    is_int = _gathered(int_parts, points, order, np.bool_)
    for array in (ts_ms, values, is_int):
        array.flags.writeable = False  # a range entry may keep them
    series_points = np.bincount(row_rank, weights=points, minlength=len(orders)).astype(np.int64)
    series_rows = np.bincount(row_rank, minlength=len(orders))
    series_bytes = np.bincount(row_rank, weights=stored, minlength=len(orders)).astype(np.int64)
    ends = np.cumsum(series_points).tolist()
    plan_filters, explicit = plan.filters, plan.sub.explicit_tags
    out: list[Series] = []
    matched = np.zeros(len(orders), np.bool_)
    pending_rows = 0
    assert reader.kept_counts is not None
    firsts = [row_order[:time_at] + b"\0\0\0\0" + row_order[time_at:] for row_order in orders]
    reader.prefetch_names(firsts)
    for rank_of, (row_order, end) in enumerate(zip(orders, ends)):
        start = end - int(series_points[rank_of])
        tag_uids = layout.parse_row_key(firsts[rank_of]).tags
        tags = reader.names(tag_uids)
        if tags is None or not series_matches(tags, plan_filters, explicit):
            continue
        matched[rank_of] = True
        reader.kept_counts.append((int(series_rows[rank_of]), int(series_bytes[rank_of])))
        out.append(Series(tsuid=row_order[layout.salt_width:].hex().upper(), tags=tags,
                          ts_ms=ts_ms[start:end], values=values[start:end],
                          is_int=is_int[start:end], annotations=[], long_values=None,
                          row_order=row_order, tag_uids=dict(zip(tags, tag_uids))))
        stats.points += end - start
        pending_rows += int(series_rows[rank_of])
        if pending_rows >= row_reading.DECODE_CHUNK_ROWS:  # the limits as a pass checks them
            pending_rows = 0
            reader.limits.check_read(plan.sub, stats.points, stats.bytes)
            reader.deadline.check(plan.sub.index)
    stats.series += len(out)
    reader.limits.check_read(plan.sub, stats.points, stats.bytes)
    reader.limits.check_emitted(plan.sub, plan.buckets, len(out))
    return out, (order, matched[row_rank], DecodedRow(ts_ms, values, is_int))


def _gathered(parts: list[np.ndarray], points: np.ndarray, order: np.ndarray,
              dtype: type) -> np.ndarray:
    """The rows' points (``parts`` joined: rows one after the other, ``points`` each) in the
    rows' ``order``: whole rows at once when every row has as many points."""
    if not parts:
        return np.zeros(0, dtype)
    joined = np.concatenate(parts) if len(parts) > 1 else parts[0]
    if points.size and bool((points == points[0]).all()) and points[0] > 0:
        return np.take(joined.reshape(points.size, -1), order, axis=0).reshape(-1)
    starts = np.cumsum(points) - points
    return joined[ranges_to_index(starts[order], points[order])]


def _keep_rows(reader: RowReader, keys: list[bytes], points: np.ndarray, weights: np.ndarray,
               stamps: np.ndarray, block_of: tuple[np.ndarray, np.ndarray, DecodedRow]
               ) -> None:
    """Keep each closed, settled row of a series the read kept in the hour cache (as a cold
    read from cells keeps them): views of the read's one block, stamped as stored (cells,
    newest write time)."""
    cache = cache_for(reader.tsdb) if reader.plan.cache.rows else None
    if cache is None:
        return
    order, wanted, whole = block_of
    ts_ms, values, is_int = whole.ts_ms, whole.values, whole.is_int
    block = Block(whole)
    starts = np.empty(order.size, np.int64)
    starts[order] = np.cumsum(points[order]) - points[order]
    now_ms = hour_cache.clock_ms()
    span_s, time_at = reader.row_span_s, reader.layout.salt_width + reader.layout.metric_width
    entries = []
    for key, start, count, weight, (cells, newest), keep in zip(
            keys, starts.tolist(), points.tolist(), weights.tolist(), stamps.tolist(),
            wanted.tolist()):
        if not keep:
            continue  # a series the filters drop: never decoded by a read from cells
        base_s = int.from_bytes(key[time_at:time_at + 4], "big")
        if hour_cache.keepable(base_s, span_s, (cells, newest), now_ms):
            end = start + count
            entries.append((key, CachedRow((cells, newest), DecodedRow(
                ts_ms[start:end], values[start:end], is_int[start:end]), weight, block, start)))
    if entries:
        cache.put_many(reader.table().name, entries)
