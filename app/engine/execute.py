"""Running one sub-query over its decoded series: OpenTSDB 2.4's ``TsdbQuery`` and ``SpanGroup``.

Order of work (``AggregationIterator#create``): per series downsample, then rate; then group the
series and merge each group. Everything runs over the *scan* window (hour-aligned and widened
for downsampling, ``scan_bounds_ms``) so points just outside the query take part in
interpolation, rates and buckets; only the output is cut to ``[start_ms, end_ms]`` (both ends
inclusive, as ``HttpJsonSerializer`` does). A series with no point in the scan window only
lends its annotations to its group (``SpanGroup#add``); a group with notes in range but no
points prints as ``{"metric": "", "tags": {}, ..., "dps": {}}``, as OpenTSDB's does.

Groups: one per distinct combination of the series' values for the group-by tag keys, ordered
by those tagv UIDs (tagk-UID order); aggregator ``none`` gives one group per series in span
order. ``tags`` keeps every key whose value never differs between the group's series (even one
only some series have); ``aggregateTags`` lists keys whose values differ (``computeTags``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

import numpy as np

from app.engine.aggregators import AGGREGATORS
from app.engine.downsample import FILL_POLICIES, Window, downsample
from app.engine.flat import FlatSeries, count_inside, flatten, follows
from app.engine.interpolate import Merged, merge, merge_each
from app.engine.model import GroupResult, Series
from app.engine.rate import rate
from app.engine.staged import (
    Pieces,
    StagedPart,
    StagedSeries,
    all_staged,
    finish_staged,
    series_name,
    stage_bound,
)
from app.errors import BadRequestError
from app.query.ast import Downsample, SubQuery
from app.query.limits import NO_DEADLINE, Deadline

HOUR_S = 3600
# Raw points per chunk of the per-series stage when downsampling (bounds peak memory).
STAGE_CHUNK_POINTS = 262_144


def scan_bounds_ms(start_ms: int, end_ms: int, spec: Downsample | None) -> tuple[int, int]:
    """The window OpenTSDB scans and iterates over (``TsdbQuery#getScanStart/EndTimeSeconds``).

    Start: aligned down to the downsample interval, then to the hour. End: one second past the
    end (2.4 bumps every millisecond end by a second), then to the start of the next interval,
    then up to the next hour; without downsampling always to the *next* hour boundary. The end
    is exclusive: rows from it on are not scanned.
    """
    interval = spec.interval_ms if spec is not None and not spec.run_all else 0
    start = start_ms // 1000
    if interval > 0:
        start -= ((1000 * start) % interval) // 1000
    start = max(start - start % HOUR_S, 0)
    end = end_ms // 1000 + 1
    if interval > 0:
        aligned = end + (interval - (1000 * end) % interval) // 1000
        end = aligned if aligned % HOUR_S == 0 else aligned + HOUR_S - aligned % HOUR_S
    else:
        end += HOUR_S - end % HOUR_S
    return start * 1000, end * 1000


def _span_order(series: Sequence[Series]) -> list[Series]:
    """Row-key order (salt, metric, tag UIDs); input order when no row key is known."""
    if any(s.row_order for s in series):
        return sorted(series, key=lambda s: s.row_order)
    return list(series)


def _group_key(s: Series, tagks: list[str]) -> bytes | None:
    """Concatenated tagv UIDs of the group-by keys in tagk-UID order; None if one is missing."""
    if any(k not in s.tags for k in tagks):
        return None
    if s.tag_uids and all(k in s.tag_uids for k in tagks):
        ordered = sorted(tagks, key=lambda k: s.tag_uids[k][0])
        return b"".join(s.tag_uids[k][1] for k in ordered)
    return b"\x00".join(s.tags[k].encode() for k in sorted(tagks))


def group_series(sub: SubQuery, series: Sequence[Series]) -> list[list[int]]:
    """Indices of ``series`` (span order) per output group, in OpenTSDB's result order."""
    if sub.aggregator == "none":
        return [[i] for i in range(len(series))]
    tagks = sorted({f.tagk for f in sub.filters if f.group_by})
    if not tagks:
        return [list(range(len(series)))] if series else []
    groups: dict[bytes, list[int]] = {}
    for i, s in enumerate(series):
        key = _group_key(s, tagks)
        if key is not None:  # OpenTSDB drops such a span ("WTF? Dropping span")
            groups.setdefault(key, []).append(i)
    return [groups[key] for key in sorted(groups)]


def compute_tags(series: Sequence[Series]) -> tuple[dict[str, str], list[str]]:
    """``SpanGroup#computeTags``: (tags, aggregateTags), both in tagk-UID order."""
    tags: dict[str, str] = {}
    discards: dict[str, None] = {}
    rank: dict[str, bytes | str] = {}
    # A series' tags in any order: what each key ends as, and its rank, does not depend on
    # it (the series' order decides), and both lists are sorted by rank at the end.
    for s in series:
        uids = s.tag_uids
        for tagk, tagv in s.tags.items():
            if tagk not in rank:
                rank[tagk] = uids[tagk][0] if tagk in uids else tagk
            if tagk in discards:
                continue
            seen = tags.get(tagk)
            if seen is None:
                tags[tagk] = tagv
            elif seen != tagv:
                discards[tagk] = None
                del tags[tagk]

    def order(keys: list[str]) -> list[str]:
        return sorted(keys, key=lambda k: (isinstance(rank[k], str), rank[k]))
    return {k: tags[k] for k in order(list(tags))}, order(list(discards))


def _pipeline(sub: SubQuery, flat: FlatSeries, window: Window) -> FlatSeries:
    if sub.downsample is not None:
        flat = downsample(flat, sub.downsample, window, sub.downsample.fill)
    if sub.rate:
        flat = rate(flat, sub.rate_options)
    return flat


def _per_series_stage(sub: SubQuery, series: Sequence[Series], window: Window,
                      deadline: Deadline = NO_DEADLINE) -> FlatSeries:
    """Flatten, downsample and rate the series, a chunk of about ``STAGE_CHUNK_POINTS`` raw
    points at a time when downsampling (which shrinks each chunk), so peak memory follows the
    chunk, not the whole query; the deadline is checked after each chunk."""
    if sub.downsample is None:
        return _pipeline(sub, flatten(series, window.scan_start_ms, window.scan_end_ms), window)
    pieces = Pieces(stage_bound(sub.downsample, window, series))
    chunk: list[Series] = []
    points = 0
    for s in series:
        if points >= STAGE_CHUNK_POINTS // 4 and not follows(chunk[-1], s):
            # Cut where the arrays stop lying in one buffer: a chunk in one is not copied.
            pieces.add(_pipeline(sub, flatten(chunk, window.scan_start_ms,
                                              window.scan_end_ms), window))
            chunk, points = [], 0
            deadline.check(sub.index)
        chunk.append(s)
        points += len(s.ts_ms)
        if points >= STAGE_CHUNK_POINTS:
            pieces.add(_pipeline(sub, flatten(chunk, window.scan_start_ms,
                                              window.scan_end_ms), window))
            chunk, points = [], 0
            deadline.check(sub.index)
    if chunk or not pieces.count:
        pieces.add(_pipeline(sub, flatten(chunk, window.scan_start_ms, window.scan_end_ms),
                             window))
    return pieces.joined()


def stage_raw(sub: SubQuery, series: Sequence[Series], window: Window,
              deadline: Deadline = NO_DEADLINE) -> StagedPart:
    """Part of a query's hours (``app.tsdb.read.split``) in the form a fused read gives: every
    series downsampled with fill policy ``none``, no rate, its raw points in the scan window
    counted; series the read downsampled already pass as they are."""
    assert sub.downsample is not None
    names = [series_name(s) for s in series]
    if all_staged(series):
        staged = cast(list[StagedSeries], series)
        return StagedPart(names, flatten(staged, window.scan_start_ms, window.scan_end_ms),
                          np.array([s.raw_points for s in staged], dtype=np.int64))
    bare = replace(sub, rate=False, downsample=replace(sub.downsample, fill="none"))
    return StagedPart(names, _per_series_stage(bare, series, window, deadline),
                      np.array([count_inside(s, window.scan_start_ms, window.scan_end_ms)
                                for s in series], dtype=np.int64))


# Java arithmetic: overflow to Infinity (answered with a 400 when printed) and Infinity * 0 = NaN
# are silent
@np.errstate(over="ignore", invalid="ignore")
def run_subquery(sub: SubQuery, metric: str, series: Sequence[Series], start_ms: int,
                 end_ms: int, *, timezone: str = "UTC",
                 deadline: Deadline = NO_DEADLINE,
                 keep_scanned: bool = False) -> list[GroupResult]:
    """Downsample, rate and aggregate ``series`` (already filtered) into the response groups.

    ``keep_scanned`` keeps every point of the scanned hour rows instead of cutting the output to
    ``[start_ms, end_ms]`` (OpenTSDB's ``/api/query/exp`` works on, and prints, all of them).

    ``timezone`` is the query's (POST ``timezone``) for calendar downsampling; the validator
    has already folded ``useCalendar`` into ``sub.downsample.calendar``. ``deadline`` is
    checked between stages and between groups.
    """
    scan_start, scan_end = scan_bounds_ms(start_ms, end_ms, sub.downsample)
    ordered = _span_order(series)
    # Groups are formed over every series; one without points in the scan window (say a row
    # holding only an annotation) adds its notes to its group but takes no other part.
    groups = group_series(sub, ordered)
    staged = all_staged(ordered)  # downsampled by the read (app.engine.staged)
    active = np.array([_has_points(s, scan_start, scan_end) for s in ordered], dtype=bool)
    position = np.cumsum(active) - 1  # a series' row in the flat arrays of active series
    window = Window(scan_start, scan_end, start_ms, end_ms, timezone)
    with_points = [s for s, a in zip(ordered, active) if a]
    if staged:
        flat = finish_staged(sub, cast(list[StagedSeries], with_points), window)
    else:
        flat = _per_series_stage(sub, with_points, window, deadline)
    deadline.check(sub.index)
    json_null = sub.downsample is not None and FILL_POLICIES[sub.downsample.fill].json_null
    data_groups = [[int(position[i]) for i in rows if active[i]] for rows in groups]
    singles = _merge_singles(sub, flat, [rows for rows in data_groups if rows], scan_end)
    results = []
    for rows, data_rows in zip(groups, data_groups, strict=True):
        deadline.check(sub.index)
        notes = [note for i in rows if not active[i] for note in ordered[i].annotations]
        if not data_rows:
            if any(_note_in_range(note, start_ms, end_ms) for note in notes):
                results.append(_notes_only(sub, notes))
            continue
        if len(data_rows) == 1:
            merged = singles[data_rows[0]]
        else:
            group_flat = flat if len(data_rows) == flat.n_series else flat.take(data_rows)
            merged = merge(group_flat, AGGREGATORS[sub.aggregator], rate=sub.rate,
                           end_ms=scan_end, deadline=deadline, index=sub.index)
        members = [ordered[i] for i in rows if active[i]]
        results.append(_result(sub, metric, members, merged, (start_ms, end_ms), json_null,
                               notes, keep_scanned))
    return results


def _has_points(s: Series, scan_start: int, scan_end: int) -> bool:
    """Whether the series has raw points in the scan window (counted by the read when it
    downsampled them)."""
    if isinstance(s, StagedSeries):
        return s.raw_points > 0
    return count_inside(s, scan_start, scan_end) > 0


def _note_in_range(note: dict[str, Any], start_ms: int, end_ms: int) -> bool:
    start = int(note.get("startTime") or 0)
    return start_ms <= (start * 1000 if start < 2**32 else start) <= end_ms


def _notes_only(sub: SubQuery, notes: list[dict[str, Any]]) -> GroupResult:
    """A group whose series have annotations but no points: OpenTSDB's SpanGroup without
    spans prints an empty metric name, no tags and empty ``dps``."""
    empty = np.zeros(0, dtype=np.int64)
    return GroupResult(metric="", tags={}, aggregate_tags=[], tsuids=[], ts_ms=empty,
                       values=np.zeros(0), is_int=False, query_index=sub.index,
                       annotations=notes)


def _merge_singles(sub: SubQuery, flat: FlatSeries, groups: list[list[int]],
                   scan_end: int) -> dict[int, Merged]:
    """Merge every group of one series in a single vectorised pass."""
    rows = [g[0] for g in groups if len(g) == 1]
    if not rows:
        return {}
    # Groups come in result (tag) order, not span order: take them in that order.
    part = flat if rows == list(range(flat.n_series)) else flat.take(rows)
    merged, offsets = merge_each(part, AGGREGATORS[sub.aggregator], rate=sub.rate,
                                 end_ms=scan_end)
    out = {}
    for k, row in enumerate(rows):
        piece = slice(int(offsets[k]), int(offsets[k + 1]))
        out[row] = Merged(merged.ts_ms[piece], merged.values[piece], merged.int_mask[piece],
                          merged.longs[piece])
    return out


def _result(sub: SubQuery, metric: str, members: list[Series], merged: Merged,
            range_ms: tuple[int, int], json_null: bool, extra_notes: list[dict[str, Any]],
            keep_scanned: bool = False) -> GroupResult:
    # The serializer's filter: start <= ts <= end, both inclusive.
    lo = int(np.searchsorted(merged.ts_ms, range_ms[0], side="left"))
    hi = int(np.searchsorted(merged.ts_ms, range_ms[1], side="right"))
    inside = slice(0, merged.ts_ms.size) if keep_scanned else slice(lo, hi)
    tags, aggregate_tags = compute_tags(members)
    int_mask = merged.int_mask[inside]
    if np.isinf(merged.values[inside][~int_mask]).any():
        # AggregationIterator#doubleValue refuses it, for the points the serializer prints
        raise BadRequestError(f"Got Infinity: aggregating with {sub.aggregator} overflowed a "
                              "double", "The values are too large for this aggregator or "
                              "downsampler")
    return GroupResult(
        metric=metric,
        tags=tags,
        aggregate_tags=aggregate_tags,
        tsuids=sorted(s.tsuid for s in members),
        ts_ms=merged.ts_ms[inside],
        values=merged.values[inside],
        is_int=bool(len(int_mask)) and bool(int_mask.all()),
        query_index=sub.index,
        annotations=[note for s in members for note in s.annotations] + extra_notes,
        int_mask=int_mask,
        long_values=merged.longs[inside],
        json_null=json_null,
    )
