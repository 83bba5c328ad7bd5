"""Writing OpenTSDB 2.4's rollup tables: points given by clients, and rollups pytsd computes.

``POST /api/rollup`` takes points already aggregated elsewhere (2.4's ``RollupDataPointRpc``
and ``TSDB#addAggregatePoint``). Beyond 2.4, which leaves filling the tables to an external
job, :func:`compute_rollups` rolls raw points up itself, one closed span at a time, into
single cells laid out exactly as 2.4 writes them, so OpenTSDB reads them too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.engine.aggregators import AGGREGATORS
from app.engine.model import Series
from app.errors import BadRequestError, TsdbError
from app.query.ast import SubQuery
from app.storage import codec_rollup
from app.storage.codec import FLAG_BITS
from app.tsdb import TSDB
from app.tsdb import rollup_coverage as coverage
from app.tsdb.background import run_every
from app.tsdb.read.decode import EXACT_DOUBLE_LIMIT
from app.tsdb.rollup_config import RollupConfig, RollupConfigError, RollupInterval
from app.tsdb.rollup_lease import RollupLease
from app.tsdb.writer import DataPoint, PointWriter, parse_point

log = logging.getLogger(__name__)

# The aggregates pytsd computes (each only when the config maps it to an ID).
COMPUTED = ("sum", "count", "min", "max")
DERIVED = ("AVG", "DEV")
DAY_S = 86400
HOUR_S = 3600


@dataclass(frozen=True)
class AggregatePoint:
    """One ``/api/rollup`` point: a rollup (``interval`` + ``aggregator``) and/or a
    pre-aggregate (``groupByAggregator``)."""

    point: DataPoint
    interval: str | None
    aggregator: str | None
    group_by_aggregator: str | None


def parse_aggregate_point(raw: Any) -> AggregatePoint:
    point = parse_point(raw)
    fields = {name: raw.get(name) or None
              for name in ("interval", "aggregator", "groupByAggregator")}
    for name, value in fields.items():
        if value is not None and not isinstance(value, str):
            raise BadRequestError(f"Invalid {name}: {value!r}")
    return AggregatePoint(point, fields["interval"], fields["aggregator"],
                          fields["groupByAggregator"])


class RollupWriter:
    """``TSDB#addAggregatePoint``: validation, the ``_aggregate`` tag, the table, the cell."""

    def __init__(self, tsdb: TSDB) -> None:
        if tsdb.rollup_config is None:
            raise BadRequestError("No rollup or aggregations were configured")
        self.tsdb = tsdb
        self.rollups: RollupConfig = tsdb.rollup_config
        self.points = PointWriter(tsdb)
        self.agg_tag_key: str = tsdb.config["tsd.rollups.agg_tag_key"]
        self.raw_tag_value: str = tsdb.config["tsd.rollups.raw_agg_tag_value"]

    def write(self, points: Sequence[AggregatePoint]) -> list[str | None]:
        """Write the valid points; one error message (or None) per point."""
        errors: list[str | None] = []
        by_table: dict[str, dict[bytes, dict[bytes, bytes]]] = {}
        for point in points:
            try:
                table, row, qualifier, value = self.cell(point)
            except RollupConfigError as exc:
                errors.append(exc.message)
                continue
            except ValueError as exc:  # a timestamp the interval's row cannot hold
                errors.append(str(exc))
                continue
            except TsdbError as exc:
                if exc.code >= 500:
                    raise
                errors.append(exc.message)
                continue
            by_table.setdefault(table, {}).setdefault(row, {})[b"t:" + qualifier] = value
            errors.append(None)
        for name, rows in by_table.items():
            self.tsdb.table(name).put_many(sorted(rows.items()))
        return errors

    def cell(self, agg: AggregatePoint) -> tuple[str, bytes, bytes, bytes]:
        """``(table, row key, qualifier, value)`` of one aggregate point."""
        point, group_by = agg.point, agg.group_by_aggregator
        if point.timestamp & 0xFFFFFFFF00000000:
            raise BadRequestError(f"bad timestamp={point.timestamp} when trying to add "
                                  f"value={point.value} to metric={point.metric}")
        tags = dict(point.tags)
        self._tag_aggregate(tags, group_by)
        self._check_aggregators(agg)
        if agg.interval:
            interval = self.rollups.by_interval(agg.interval)
            assert agg.aggregator is not None
            table = interval.pre_aggregation_table if group_by else interval.table
            base_s = codec_rollup.rollup_base_time(point.timestamp, interval.units,
                                                   interval.unit_multiplier)
            qualifier, value = codec_rollup.rollup_cell(
                point.timestamp, base_s, point.value, self.rollups.id_for(agg.aggregator),
                interval.interval_s, interval.intervals, wide_floats=True)
        else:
            if not group_by:
                raise BadRequestError("Interval cannot be null for a non-group by point")
            table = self.rollups.default_interval.pre_aggregation_table
            base_s, qualifier, value = _raw_cell(point)
        template = self.points.row_template(point.metric, tags)
        return table, self.points.row_for(template, base_s), qualifier, value

    def _tag_aggregate(self, tags: dict[str, str], group_by: str | None) -> None:
        given = tags.get(self.agg_tag_key)
        if given is None:
            if group_by:
                tags[self.agg_tag_key] = group_by.upper()
            elif self.tsdb.config["tsd.rollups.tag_raw"]:
                tags[self.agg_tag_key] = self.raw_tag_value
            return
        if group_by is None or given.lower() != group_by.lower():
            raise BadRequestError(f"Given tag value for {self.agg_tag_key} of {given} did "
                                  f"not match the group by aggregator of {group_by}")
        tags[self.agg_tag_key] = group_by.upper()

    def _check_aggregators(self, agg: AggregatePoint) -> None:
        block = self.tsdb.config["tsd.rollups.block_derived"]
        if agg.group_by_aggregator:
            if agg.group_by_aggregator.lower() not in AGGREGATORS:
                raise BadRequestError(
                    f"Invalid group by aggregator {agg.group_by_aggregator}")
            if block and agg.group_by_aggregator.upper() in DERIVED:
                raise BadRequestError("Derived group by aggregations are not allowed "
                                      f"{agg.group_by_aggregator}")
        if agg.interval:
            if not agg.aggregator:
                raise BadRequestError("Missing the rollup aggregator")
            if block and agg.aggregator.upper() in DERIVED:
                raise BadRequestError(f"Derived rollup aggregations are not allowed "
                                      f"{agg.aggregator.upper()}")


def _raw_cell(point: DataPoint) -> tuple[int, bytes, bytes]:
    """A pre-aggregate in raw-point layout; floats 8 bytes wide, as 2.4's HTTP path."""
    from app.storage import codec

    flags, raw = codec_rollup.encode_aggregate_value(point.value, wide_floats=True)
    return codec.base_time_s(point.timestamp), codec.build_qualifier(point.timestamp,
                                                                     flags), raw


# --- computing rollups from raw data ------------------------------------------------------


@dataclass
class RollupStats:
    series: int = 0
    points_read: int = 0
    cells_written: int = 0
    spans: list[str] = field(default_factory=list)
    held_by_other: bool = False  # a background pass skipped: another process holds the lease
    hours_rolled: int = 0  # whole hours recorded in the coverage record
    hours_lost: int = 0  # of those, hours another roller raced (marked: rolled again)
    note: str = ""  # what a background pass did, for the log


def bucket_starts(ts_s: np.ndarray, interval: RollupInterval) -> np.ndarray:
    """Start (s) of each point's interval, counted from its row's base time as 2.4 does."""
    base = row_base_times(ts_s, interval)
    return np.asarray(base + (ts_s - base) // interval.interval_s * interval.interval_s)


def aggregate_series(ts_ms: np.ndarray, values: np.ndarray, is_int: np.ndarray,
                     interval: RollupInterval) -> dict[str, tuple[np.ndarray, np.ndarray,
                                                                  np.ndarray]]:
    """Per interval of one series: ``{agg: (start_s, value, is_int)}`` for sum/count/min/max.

    A sum, min or max is an integer when every point of its interval is and it is exact in
    a double (below 2**53: beyond, float64 sums have rounded it); a count always is.
    """
    starts_s = bucket_starts(ts_ms // 1000, interval)
    cuts = np.flatnonzero(np.diff(starts_s)) + 1
    first = np.concatenate(([0], cuts))
    counts = np.diff(np.concatenate((first, [starts_s.size])))
    all_int = np.logical_and.reduceat(is_int, first)
    stamp = starts_s[first]
    out = {"sum": np.add.reduceat(values, first), "min": np.minimum.reduceat(values, first),
           "max": np.maximum.reduceat(values, first)}
    result = {name: (stamp, agg, all_int & (np.abs(agg) < EXACT_DOUBLE_LIMIT))
              for name, agg in out.items()}
    result["count"] = (stamp, counts.astype(np.float64), np.ones(first.size, bool))
    return result


def rollup_cells(series: Series, interval: RollupInterval, ids: Mapping[str, int],
                 layout_time_start: int) -> dict[bytes, dict[bytes, bytes]]:
    """Row key -> ``{column: value}`` of one series' rollups over its points."""
    rows: dict[bytes, dict[bytes, bytes]] = {}
    if series.ts_ms.size == 0:
        return rows
    head, tail = series.row_order[:layout_time_start], series.row_order[layout_time_start:]
    for name, (stamps, values, ints) in aggregate_series(
            series.ts_ms, series.values, series.is_int, interval).items():
        agg_id = ids.get(name)
        if agg_id is None:
            continue
        bases = row_base_times(stamps, interval)
        qualifiers, raws = codec_rollup.encode_rollup_cells(
            stamps, bases, values, ints, agg_id, interval.interval_s, interval.intervals,
            wide_floats=True)
        keys = {base: head + base.to_bytes(4, "big") + tail for base in set(bases.tolist())}
        for base, qualifier, raw in zip(bases.tolist(), qualifiers, raws):
            rows.setdefault(keys[base], {})[b"t:" + qualifier] = raw
    return rows


def row_base_times(stamps_s: np.ndarray, interval: RollupInterval) -> np.ndarray:
    """``RollupUtils.getRollupBasetime`` of many timestamps (seconds)."""
    if interval.units in ("h", "d"):
        span_s = 3600 * interval.unit_multiplier if interval.units == "h" else DAY_S
        return np.asarray(stamps_s - stamps_s % span_s)
    unit = "M" if interval.units == "n" else "Y"
    return np.asarray(stamps_s.astype("datetime64[s]").astype(f"datetime64[{unit}]")
                      .astype("datetime64[s]").astype(np.int64))


def compute_rollups(tsdb: TSDB, start_s: int, end_s: int,
                    metrics: Iterable[str] | None = None, *,
                    widen_start: bool = False) -> RollupStats:
    """Roll up every raw point in ``[start_s, end_s)`` into each rollup table.

    Only whole intervals inside the range are written (so a range of whole days fills a
    1-day interval); with ``widen_start`` each interval starts at the interval holding
    ``start_s`` instead (the background pass: a day is rolled up once it is over, from its
    first hour). Running again over the same range rewrites the same cells.

    Rolling every metric (``metrics`` None) records the whole hours rolled in the coverage
    record (``rollup_coverage``): their marks are read first, then the raw rows' stamps,
    then the values, so a write stored after the values were read changes a mark later.
    """
    rollups = tsdb.rollup_config
    if rollups is None:
        raise RollupConfigError("Rollups are not enabled (tsd.rollups.enable)")
    hours: list[int] = []
    if metrics is None:
        hours = list(range(-(-start_s // HOUR_S) * HOUR_S, end_s - end_s % HOUR_S, HOUR_S))
    # The marks before the metrics' names: a metric whose mark was read got its UID first.
    before = coverage.read(tsdb, hours[0], hours[-1]) if hours else coverage.Coverage()
    found = tsdb.metrics.grep(lambda _: True) if metrics is None else []
    names = [name for name, _ in found] if metrics is None else list(metrics)
    stamps = (coverage.raw_stamps(tsdb, [uid for _, uid in found], hours[0],
                                  hours[-1] + HOUR_S) if hours else {})
    rolled_before = {hour for hour, _ in before.covers}
    stats = RollupStats()
    for interval in rollups.rollups():
        first = (start_s if not widen_start else start_s - start_s % interval.interval_s)
        first = -(-first // interval.interval_s) * interval.interval_s
        last = end_s - end_s % interval.interval_s
        if last <= first:
            continue
        stats.spans.append(f"{interval.interval}: {first}..{last}")
        for metric in names:
            _roll_metric(tsdb, interval, metric, (first, last), stats, rolled_before)
    if hours:
        stats.hours_rolled = len(hours)
        stats.hours_lost = coverage.record(tsdb, before, coverage.tracked(tsdb), hours, stamps)
    return stats


def _roll_metric(tsdb: TSDB, interval: RollupInterval, metric: str, span_s: tuple[int, int],
                 stats: RollupStats, rolled_before: set[int]) -> None:
    """One metric's rollups of ``interval`` over ``[first, last)`` (``rolled_before``: the
    hours pytsd rolled before, whose cells it may drop: see :func:`drop_stale`)."""
    from app.tsdb.reader import SeriesReader

    first, last = span_s
    assert tsdb.rollup_config is not None
    ids = tsdb.rollup_config.aggregation_ids
    time_start = tsdb.layout.salt_width + tsdb.layout.metric_width
    table = tsdb.table(interval.table)
    # Whole intervals per pass, about a day of raw points (bounds memory).
    chunk_s = max(1, DAY_S // interval.interval_s) * interval.interval_s
    for chunk_start in range(first, last, chunk_s):
        chunk_end = min(chunk_start + chunk_s, last)
        reader = SeriesReader(tsdb)
        sub = SubQuery(aggregator="none", metric=metric)
        written: dict[bytes, dict[bytes, bytes]] = {}
        # A backfill reads each hour once: it does not churn the hour cache.
        for series in reader.read(sub, chunk_start * 1000, chunk_end * 1000 - 1,
                                  keeps_cells=True):
            keep = (series.ts_ms >= chunk_start * 1000) & (series.ts_ms < chunk_end * 1000)
            series.ts_ms, series.values = series.ts_ms[keep], series.values[keep]
            series.is_int = series.is_int[keep]
            rows = rollup_cells(series, interval, ids, time_start)
            table.put_many(sorted(rows.items()))
            for key, cells in rows.items():
                written.setdefault(key, {}).update(cells)
            stats.series += 1
            stats.points_read += int(series.ts_ms.size)
            stats.cells_written += sum(len(cells) for cells in rows.values())
        drop_stale(tsdb, interval, tsdb.metrics.get_id(metric), (chunk_start, chunk_end),
                   written, rolled_before)


def _slot(qualifier: bytes) -> tuple[int, int] | None:
    """``(aggregator ID, offset)`` of a 3-byte rollup qualifier: the cell's place, whatever
    its value's width and kind (the flags)."""
    if len(qualifier) != 3:
        return None
    return qualifier[0], int.from_bytes(qualifier[1:], "big") >> FLAG_BITS


def drop_stale(tsdb: TSDB, interval: RollupInterval, metric_uid: bytes,
               span_s: tuple[int, int], written: Mapping[bytes, Mapping[bytes, bytes]],
               rolled_before: set[int]) -> int:
    """Delete the cells of pytsd's aggregates in ``[start, end)`` a roll did not just write:
    those in a place (aggregate and offset) it wrote under other flags, and, in the hours of
    ``rolled_before`` (pytsd's own earlier roll, recorded in the coverage record), every other.

    The flags (value width, integer or float) are part of a rollup qualifier, so a late point
    that turns a 1-byte ``sum`` into 2 bytes lands beside the old cell, and both would be read
    (OpenTSDB fails on the duplicate unless ``tsd.storage.fix_duplicates``). A re-roll must
    also leave exactly what the raw rows hold now: an interval whose points were all deleted
    since, a series gone from the hour. Cells in hours pytsd never rolled may be an external
    job's (``/api/rollup``) and stay. Written first, deleted after: a reader never finds a
    written place empty. Returns the cells deleted."""
    assert tsdb.rollup_config is not None
    ids = {tsdb.rollup_config.aggregation_ids.get(name) for name in COMPUTED} - {None}
    table = tsdb.table(interval.table)
    layout = tsdb.layout
    at = layout.salt_width + layout.metric_width
    start_s, end_s = span_s
    first = codec_rollup.rollup_base_time(start_s, interval.units, interval.unit_multiplier)
    last = codec_rollup.rollup_base_time(end_s - 1, interval.units, interval.unit_multiplier)
    dropped = 0
    for salt in layout.salt_prefixes():
        row_start, row_stop = layout.metric_scan_range(salt, metric_uid, first, last)
        for key, cells in table.scan(row_start=row_start, row_stop=row_stop, columns=[b"t"]):
            base = int.from_bytes(key[at:at + 4], "big")
            kept = written.get(key, {})
            places = {_slot(column[2:]) for column in kept}
            stale = []
            for column in cells:
                slot = _slot(column[2:])
                if slot is None or slot[0] not in ids or column in kept:
                    continue
                at_s = base + slot[1] * interval.interval_s
                if start_s <= at_s < end_s and (slot in places or at_s - at_s % HOUR_S
                                                in rolled_before):
                    stale.append(column)
            if stale:
                table.delete(key, columns=stale)
                dropped += len(stale)
    return dropped


class RollupPass:
    """Rolls up hours as they close, like the compaction queue (pytsd; 2.4 needs a job).

    Each pass runs only in the process holding the :class:`~app.tsdb.rollup_lease.RollupLease`
    (every worker of every pytsd process on the store runs this, one of them does the work)
    and rolls, at most ``tsd.rollups.compute.hours_per_pass`` hours in all: the hours from
    ``done_until`` to the horizon (the very first pass: the hour before it), then the hours
    whose raw rows changed since they were rolled (``rollup_backfill``), then the past,
    backwards from the first hour rolled to the oldest raw hour. Progress is kept in the
    lease, so whoever holds it next carries on from there.
    """

    def __init__(self, tsdb: TSDB, lease: RollupLease | None = None) -> None:
        self.tsdb = tsdb
        # The lease outlives a missed pass or two; a holder that died is replaced after it.
        self.lease = lease or RollupLease(
            tsdb, lease_s=3 * tsdb.config["tsd.rollups.compute.interval_s"])

    def run_once(self, now_s: float | None = None) -> RollupStats:
        from app.tsdb import rollup_backfill as backfill
        from app.tsdb.read.rollup_choice import rollup_horizon_ms

        now = time.time() if now_s is None else now_s
        started = time.monotonic()
        horizon_s = rollup_horizon_ms(self.tsdb.config["tsd.rollups.compute.lag_s"], now) // 1000
        state = self.lease.acquire(now)
        if state is None:
            return RollupStats(held_by_other=True)
        plan = backfill.plan_pass(self.tsdb, state, now, horizon_s)
        stats = RollupStats()
        for start, end in backfill.runs(plan.hours()):
            _add(stats, compute_rollups(self.tsdb, start, end, widen_start=True))
            # A long pass renews its lease as it goes (after a third of it); one that lost
            # it stops (the new holder starts from the progress recorded before).
            elapsed_s = time.monotonic() - started
            if elapsed_s > self.lease.lease_s / 3:
                state = self.lease.acquire(now + elapsed_s)
                if state is None:
                    return stats
                started, now = time.monotonic(), now + elapsed_s
        self.lease.record(state, plan.done_s, backfill_s=plan.back_s, oldest_s=plan.oldest_s,
                          oldest_at_s=plan.oldest_at_s, sweep_s=plan.sweep_s)
        stats.note = (f"{len(plan.forward)} new hours, {len(plan.again)} changed hours again, "
                      f"{len(plan.past)} past hours (backfill: {plan.hours_left} hours left), "
                      f"lag {horizon_s - plan.done_s} s")
        return stats


def _add(total: RollupStats, one: RollupStats) -> None:
    total.series += one.series
    total.points_read += one.points_read
    total.cells_written += one.cells_written
    total.spans += one.spans
    total.hours_rolled += one.hours_rolled
    total.hours_lost += one.hours_lost


def run_rollups_in_background(rollup_pass: RollupPass, interval_s: int) -> threading.Thread:
    """Run ``rollup_pass`` now (hours closed while no worker ran are due), then every
    ``interval_s`` seconds."""
    def roll() -> str | None:
        stats = rollup_pass.run_once()
        if stats.cells_written:
            return (f"rolled up {stats.points_read} points into {stats.cells_written} cells "
                    f"({stats.note})")
        if stats.hours_rolled:
            return f"rollups: {stats.note}"
        return None

    return run_every("rollups", interval_s, roll, wait_first=False)
