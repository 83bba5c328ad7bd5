"""What a background rollup pass rolls besides the hours that just closed.

* **Changed hours**: an hour whose cover no longer holds (``rollup_coverage``: a write, a
  delete or an import marked it; the verifier marked it) is rolled again, as is a marked hour
  the pass never rolled (an import into the past).
* **Foreign writes**: the verifier compares the raw stamps of the rolled hours of the last
  ``tsd.rollups.compute.verify_s`` with the stamps their covers recorded, and of as many older
  rolled hours as a pass may roll, a cursor sweeping back through them; a difference (a Java
  TSD's point, a direct table write, a compaction) marks the hour.
* **The past** (backfill): hours older than the first one the pass rolled, newest first, down
  to the oldest raw hour in the data table (or ``tsd.rollups.compute.backfill_max_s`` back),
  a bounded number per pass; the cursor is kept in the lease, so the next holder carries on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.tsdb import TSDB
from app.tsdb import rollup_coverage as coverage
from app.tsdb.rollup_config import RollupInterval
from app.tsdb.rollup_lease import LeaseState, RollupLease

HOUR_S = 3600


@dataclass(frozen=True)
class PassPlan:
    """What one pass rolls, and the progress to record once it did."""

    forward: list[int]  # hours that closed since the last pass
    again: list[int]  # hours whose rollups no longer hold
    past: list[int]  # the backfill's hours (below its cursor)
    done_s: int  # done_until after the pass
    back_s: int  # the backfill's cursor after the pass
    hours_left: int  # what the backfill has left after the pass
    oldest_s: int | None
    oldest_at_s: int | None
    sweep_s: int  # the verifier's cursor after the pass

    def hours(self) -> list[int]:
        return [*self.forward, *self.again, *self.past]


def plan_pass(tsdb: TSDB, state: LeaseState, now_s: float, horizon_s: int) -> PassPlan:
    """Plan a pass from the lease's progress; verifies (and marks) hours on the way."""
    budget = max(1, tsdb.config["tsd.rollups.compute.hours_per_pass"])
    done = horizon_s - HOUR_S if state.done_until_s is None else state.done_until_s
    backfill_s = state.position("backfill_s")
    back_s = done if backfill_s is None else min(backfill_s, done)
    forward = list(range(done, min(horizon_s, done + budget * HOUR_S), HOUR_S))
    uids = [uid for _, uid in tsdb.metrics.grep(lambda _: True)]
    intervals = coverage.tracked(tsdb)
    record = coverage.read(tsdb)
    window = max(back_s, horizon_s - tsdb.config["tsd.rollups.compute.verify_s"])
    window -= window % HOUR_S
    changed = verify(tsdb, record, intervals, uids, window, done)
    sweep = sweep_span(state.position("sweep_s"), back_s, window, budget)
    changed |= verify(tsdb, record, intervals, uids, *sweep)
    oldest, oldest_at = state.position("oldest_s"), state.position("oldest_at_s")
    if oldest_at is None or (now_s - oldest_at >= HOUR_S and (oldest is None or back_s <= oldest)):
        oldest, oldest_at = oldest_hour_s(tsdb, uids), int(now_s)
    floor = back_s if oldest is None else max(oldest, backfill_floor(tsdb, horizon_s))
    changed |= changed_hours(record, intervals, (back_s, done), (floor, back_s), horizon_s)
    again = sorted(changed - set(forward), reverse=True)[:budget - len(forward)]
    left = budget - len(forward) - len(again)
    past = list(range(max(floor, back_s - left * HOUR_S), back_s, HOUR_S)) if left > 0 else []
    new_back = past[0] if past else back_s
    return PassPlan(forward, again, past, forward[-1] + HOUR_S if forward else done, new_back,
                    max(0, new_back - floor) // HOUR_S, oldest, oldest_at, sweep[0])


def oldest_hour_s(tsdb: TSDB, metric_uids: Sequence[bytes]) -> int | None:
    """The base time of the oldest raw row: the first row of each metric in each salt bucket
    (one row read each, keys only)."""
    table = tsdb.data_table()
    at = tsdb.layout.salt_width + tsdb.layout.metric_width
    oldest: int | None = None
    for uid in metric_uids:
        for salt in tsdb.layout.salt_prefixes():
            for key, _ in table.scan(row_prefix=salt + uid, limit=1, keys_only=True):
                base = int.from_bytes(key[at:at + 4], "big")
                oldest = base if oldest is None else min(oldest, base)
    return oldest


def changed_hours(record: coverage.Coverage, intervals: Sequence[RollupInterval],
                  rolled: tuple[int, int], todo: tuple[int, int], horizon_s: int) -> set[int]:
    """Hours before the horizon to roll (again): in the rolled span ``[from, until)`` those
    with a cover that no longer holds; elsewhere, those with a mark and no cover that holds
    (an import into the past), except in the span the backfill has still to do."""
    first, until = rolled
    out = set()
    for hour in record.hours():
        if (hour >= horizon_s or todo[0] <= hour < todo[1]
                or all(record.valid(hour, i.interval) for i in intervals)):
            continue
        if first <= hour < until or hour in record.marks:
            out.add(hour)
    return out


def verify(tsdb: TSDB, record: coverage.Coverage, intervals: Sequence[RollupInterval],
           metric_uids: Sequence[bytes], first_s: int, end_s: int) -> set[int]:
    """Mark the covered hours of ``[first_s, end_s)`` whose raw stamp changed since they were
    rolled (writes pytsd did not see); return them."""
    if not intervals:
        return set()
    name = intervals[0].interval
    hours = [h for h in range(first_s, end_s, HOUR_S)
             if all(record.valid(h, i.interval) for i in intervals)]
    if not hours:
        return set()
    now = coverage.raw_stamps(tsdb, metric_uids, hours[0], hours[-1] + HOUR_S)
    changed = set()
    for hour in hours:
        cover = record.cover(hour, name)
        if cover is not None and cover.stamp != now.get(hour, (0, 0)):
            changed.add(hour)
    coverage.mark_hours(tsdb, changed, closed_only=False)
    return changed


def backfill_floor(tsdb: TSDB, horizon_s: int) -> int:
    """The oldest hour the backfill may roll (``tsd.rollups.compute.backfill_max_s``)."""
    max_s = tsdb.config["tsd.rollups.compute.backfill_max_s"]
    return 0 if max_s <= 0 else horizon_s - max_s - (horizon_s - max_s) % HOUR_S


def sweep_span(cursor_s: int | None, first_s: int, window_s: int,
               hours: int) -> tuple[int, int]:
    """The older rolled hours (``[first_s, window_s)``, before the verified window) to verify
    this pass: ``hours`` of them below the cursor, newest first, starting again at the window
    once the cursor reached the oldest; so every rolled hour is verified every
    ``rolled hours / hours`` passes."""
    if cursor_s is None or not first_s < cursor_s <= window_s:
        cursor_s = window_s
    return max(first_s, cursor_s - hours * HOUR_S), cursor_s


def runs(hours: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted hours as ``[start, end)`` spans of consecutive hours."""
    spans: list[tuple[int, int]] = []
    for hour in sorted(set(hours)):
        if spans and spans[-1][1] == hour:
            spans[-1] = (spans[-1][0], hour + HOUR_S)
        else:
            spans.append((hour, hour + HOUR_S))
    return spans


def progress(tsdb: TSDB, now_s: float) -> list[tuple[str, int, dict[str, str]]]:
    """``/api/stats`` points of the background pass, from the lease in storage (so every
    worker of every node answers the same): how far it rolled, its lag behind the horizon,
    and the backfill's cursor and the hours it has left."""
    from app.tsdb.read.rollup_choice import rollup_horizon_ms

    _, state = RollupLease(tsdb, 0).current()
    if state is None or state.done_until_s is None:
        return []
    horizon_s = rollup_horizon_ms(tsdb.config["tsd.rollups.compute.lag_s"], now_s) // 1000
    tags = {"type": "background"}
    points = [("tsd.rollup.done_until", state.done_until_s, tags),
              ("tsd.rollup.lag_s", max(0, horizon_s - state.done_until_s), tags)]
    backfill_s, oldest_s = state.position("backfill_s"), state.position("oldest_s")
    if backfill_s is not None:
        floor = None if oldest_s is None else max(oldest_s, backfill_floor(tsdb, horizon_s))
        left = 0 if floor is None else max(0, backfill_s - floor)
        points += [("tsd.rollup.backfill.cursor", backfill_s, tags),
                   ("tsd.rollup.backfill.hours_left", left // HOUR_S, tags)]
    return points
