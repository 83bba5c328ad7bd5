"""Reading what the plan's rollup choice says (``app.tsdb.read.rollup_choice`` decides it):
rollup buckets up to the horizon, raw rows after it, one merge by time (``read.merge``).

When pytsd computes the rollups (``tsd.rollups.compute.background``) the rollup tables answer
only the buckets whose hours the coverage record (``rollup_coverage``) says are rolled and
unchanged since; the other buckets are read raw (:func:`covered_read`), whatever the usage but
an explicit ``ROLLUP_NOFALLBACK`` (docs/rollups.md, "Coverage").
"""

from __future__ import annotations

import numpy as np

from app.engine.downsample import Window
from app.engine.execute import scan_bounds_ms, stage_raw
from app.engine.model import Series
from app.engine.staged import StagedSeries, in_one_buffer
from app.tsdb.read.merge import merged, trimmed
from app.tsdb.read.rollup_choice import COUNTED, EXACT, HOUR_S, RollupChoice
from app.tsdb.read.rollup_table import PreAggregateReader, RollupReader
from app.tsdb.read.rows import RowReader
from app.tsdb.read.series import read_rows
from app.tsdb.rollup_config import RollupInterval


def read_planned(reader: RowReader, choice: RollupChoice) -> list[Series] | None:
    """The plan's series from rollups (+ raw after the horizon), or None: raw rows answer
    (nothing rolled, and the usage falls back)."""
    if choice.pre_aggregate:
        return _pre_aggregated(reader, choice)
    sub = reader.plan.sub
    if choice.covered:
        if sub.rollup_usage != "ROLLUP_NOFALLBACK":
            return covered_read(reader, choice)
        valid, _ = _hours_rolled(reader, choice.tried[0], choice)
        reader.stats.hours_not_rolled += int((~valid).sum())
    rolled = _read_rollups(reader, choice.tried, choice.first_ms, choice.split_ms,
                           pre_aggregate=False)
    if not rolled and choice.usage != "ROLLUP_NOFALLBACK":
        return None
    raw: list[Series] = []
    split_ms, scan_end_ms = choice.split_ms, choice.scan_end_ms
    if split_ms < scan_end_ms:
        first_s = split_ms // 1000 - (split_ms // 1000) % HOUR_S
        last_s = (scan_end_ms - 1) // 1000
        raw = [trimmed(s, s.ts_ms >= split_ms)
               for s in read_rows(reader, first_s, last_s - last_s % HOUR_S)]
    if sub.downsample is not None and sub.downsample.function.lower() in COUNTED:
        return merged([as_buckets(reader, rolled), _counted(reader, raw)])
    return merged([rolled, raw])


def as_buckets(reader: RowReader, rolled: list[Series]) -> list[Series]:
    """Rollup buckets (one point each, already the answer: a count's sum of counts) as series
    the read downsampled (``StagedSeries``), so the engine does not count them again."""
    spec = reader.plan.sub.downsample
    return [s if isinstance(s, StagedSeries) else
            StagedSeries(tsuid=s.tsuid, tags=s.tags, ts_ms=s.ts_ms,
                         values=s.values.astype(np.float64, copy=False),
                         is_int=np.zeros(s.ts_ms.size, dtype=bool), annotations=s.annotations,
                         row_order=s.row_order, tag_uids=s.tag_uids, downsample=spec,
                         raw_points=int(s.ts_ms.size))
            for s in rolled]


def _counted(reader: RowReader, raw: list[Series]) -> list[Series]:
    """Raw rows after the rollups, downsampled here as the engine would (fill policy ``none``,
    no rate), to join the rollup buckets as buckets."""
    if not raw:
        return []
    plan = reader.plan
    spec = plan.sub.downsample
    assert spec is not None
    scan_start_ms, scan_end_ms = scan_bounds_ms(plan.start_ms, plan.end_ms, spec)
    window = Window(scan_start_ms, scan_end_ms, plan.start_ms, plan.end_ms)
    part = stage_raw(plan.sub, raw, window, reader.deadline)
    return list(in_one_buffer(part.names, part.buckets.ts_ms, part.buckets.values,
                              part.buckets.offsets, part.raw_points.tolist(), spec))


def _read_rollups(reader: RowReader, tried: tuple[RollupInterval, ...], first_ms: int,
                  end_ms: int, *, pre_aggregate: bool) -> list[Series]:
    """Buckets in ``[first_ms, end_ms)`` from the first of ``tried`` that has any."""
    spec = reader.plan.sub.downsample
    assert spec is not None
    exact = EXACT[spec.function.lower()]
    rolled: list[Series] = []
    for interval in tried:
        table = interval.pre_aggregation_table if pre_aggregate else interval.table
        rollup_reader = RollupReader(reader, interval, exact, spec.interval_ms, table)
        rolled = rollup_reader.read_between(first_ms, end_ms)
        reader.stats.rows += rollup_reader.stats.rows
        reader.stats.points += rollup_reader.stats.points
        if rolled:
            break
    return rolled


def _pre_aggregated(reader: RowReader, choice: RollupChoice) -> list[Series]:
    """A pre-aggregate query: the rollup interval's pre-aggregate table when the downsample
    has one, else the default interval's (raw layout). Written by clients only (``/api/rollup``
    with ``groupByAggregator``), so there is no horizon and no raw tail."""
    if choice.tried:
        rolled = _read_rollups(reader, choice.tried, choice.first_ms, choice.split_ms,
                               pre_aggregate=True)
        if rolled or choice.usage == "ROLLUP_NOFALLBACK":
            spec = reader.plan.sub.downsample
            counted = spec is not None and spec.function.lower() in COUNTED
            return as_buckets(reader, rolled) if counted else rolled
    config = reader.tsdb.rollup_config
    assert config is not None
    plan = reader.plan
    pre = PreAggregateReader(reader, config.default_interval.pre_aggregation_table)
    series = read_rows(pre, plan.first_s, plan.last_s)
    reader.stats.rows += pre.stats.rows
    reader.stats.points += pre.stats.points
    return series


# --- coverage: rollups only for hours rolled from the raw rows as they are -------------------


def _hours_rolled(reader: RowReader, interval: RollupInterval,
                  choice: RollupChoice) -> tuple[np.ndarray, int]:
    """Whether each hour of ``[first_ms, split_ms)`` has a cover that holds, and the first
    hour's start (s)."""
    from app.tsdb import rollup_coverage

    first_ms, split_ms = choice.first_ms, choice.split_ms
    first_hour = first_ms // 1000 - first_ms // 1000 % HOUR_S
    last_hour = (split_ms - 1) // 1000 - (split_ms - 1) // 1000 % HOUR_S
    record = rollup_coverage.read(reader.tsdb, first_hour, last_hour)
    hours = (last_hour - first_hour) // HOUR_S + 1
    return record.valid_hours(interval.interval, first_hour, hours), first_hour


def covered_read(reader: RowReader, choice: RollupChoice) -> list[Series]:
    """Each downsample bucket from the rollup when every hour it touches is covered (rolled,
    and no raw write reached it since), else from raw rows; after the horizon from raw rows.
    Every bucket is answered by exactly one of the two, so the answer is the raw one."""
    spec = reader.plan.sub.downsample
    assert spec is not None
    interval = choice.tried[0]
    first_ms, split_ms, scan_end_ms = choice.first_ms, choice.split_ms, choice.scan_end_ms
    step_ms = spec.interval_ms
    valid, first_hour = _hours_rolled(reader, interval, choice)
    starts = np.arange(first_ms, split_ms, step_ms, dtype=np.int64)
    first_hours = (starts // 1000 - first_hour) // HOUR_S
    last_hours = ((starts + step_ms - 1) // 1000 - first_hour) // HOUR_S
    not_rolled = np.concatenate(([0], np.cumsum(~valid)))
    good = not_rolled[last_hours + 1] == not_rolled[first_hours]
    rolled: list[Series] = []
    if good.any():
        # Only the span from the first to the last bucket the rollup answers is read from it
        # (the hours after the data, often uncovered, cost nothing there); its buckets are
        # sifted only when some inside it are not answered.
        lo, hi = int(np.argmax(good)), good.size - int(np.argmax(good[::-1]))
        rolled = _read_rollups(reader, (interval,), first_ms + lo * step_ms,
                               first_ms + hi * step_ms, pre_aggregate=False)
        if not good[lo:hi].all():
            rolled = [s for s in (trimmed(s, good[(s.ts_ms - first_ms) // step_ms])
                                  for s in rolled) if s.ts_ms.size]
    spans = [] if good.all() else _bad_spans(good, first_ms, step_ms)
    if split_ms < scan_end_ms:
        if spans and spans[-1][1] == split_ms:
            spans[-1] = (spans[-1][0], _NO_END)
        else:
            spans.append((split_ms, _NO_END))
    if not spans:
        return rolled
    pieces = [rolled]
    for span_start, span_end in spans:
        last_ms = min(span_end, scan_end_ms) - 1
        first_s = span_start // 1000 - span_start // 1000 % HOUR_S
        raw = read_rows(reader, first_s, last_ms // 1000 - last_ms // 1000 % HOUR_S)
        kept = [trimmed(s, (s.ts_ms >= span_start) & (s.ts_ms < span_end)) for s in raw]
        pieces.append([s for s in kept if s.ts_ms.size or s.annotations])
    if not any(pieces[1:]):  # nothing raw to add (hours after the data, say)
        return rolled
    # Series with neither points nor notes left are left out (as the pieces above).
    return merged([[s for s in piece if s.ts_ms.size or s.annotations] for piece in pieces])


_NO_END = 1 << 62


def _bad_spans(good: np.ndarray, first_ms: int, step_ms: int) -> list[tuple[int, int]]:
    """``[start_ms, end_ms)`` of each run of buckets not answered from the rollup."""
    edges = np.flatnonzero(np.diff(np.concatenate(([1], good.astype(np.int8), [1]))))
    return [(first_ms + int(a) * step_ms, first_ms + int(b) * step_ms)
            for a, b in zip(edges[::2], edges[1::2])]
