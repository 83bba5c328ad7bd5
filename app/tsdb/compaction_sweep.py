"""The compaction sweep: closed hours compacted by the fleet, whoever wrote their points.

Each process's :class:`~app.tsdb.compaction.CompactionQueue` compacts the rows that process
wrote; the rows of a process that died (kill -9, a lost machine) would stay uncompacted,
the slowest rows to read. The sweep walks the closed hours instead, in every pytsd process
with background compaction on, and one holder of its :class:`~app.tsdb.lease.Lease` at a
time does the work:

* an hour is due ``grace_s`` after it ends (the live writers' queues have compacted their
  rows by then, so the sweep mostly finds nothing to do);
* a window ``[done_until, horizon)`` of due hours is scanned key-only, one range per salt
  bucket and metric, and every row holding two or more data cells is compacted by
  :func:`~app.tsdb.compaction.compact_row` (OpenTSDB's bytes; safe beside any other
  compactor, Java's included);
* at most ``rows_per_pass`` rows are scanned per pass, one pass every ``interval_s``; the
  position (the window and the next row key) is written into the lease every
  ``CHECKPOINT_ROWS`` rows, renewing it, so a holder that dies costs at most that much work
  and the next holder carries on from there once the lease expires (``3 * interval_s``).

What it does not cover: a point written into an hour after the sweep passed it (a late
point, an import) is left to the writer's queue, ``pytsd compact`` or a Java read
(docs/fleet.md states the bound).

The lease cell lives in ``tsdb-uid``, row ``\\x00pytsd.compaction.sweep`` (after MAXID's
``\\x00``, before every UID and name), column ``id:pytsd.compaction.sweep``: the one table
every node has, rollups on or not. OpenTSDB's ``uid fsck`` calls it an unknown qualifier (a
warning; ``--fix-unknowns`` deletes it, which only restarts the sweep's window); pytsd's
ignores it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.errors import TsdbError
from app.storage.base import Row, Table
from app.tsdb.background import StatLine, run_every
from app.tsdb.compaction import DATA_PREFIX, MAX_TIMESPAN_S, compact_row, data_cells
from app.tsdb.lease import Lease, LeaseState

if TYPE_CHECKING:
    from app.tsdb import TSDB

log = logging.getLogger(__name__)

SWEEP_ROW = b"\x00pytsd.compaction.sweep"
SWEEP_COLUMN = b"id:pytsd.compaction.sweep"
# A first pass (or one after the fleet was down for long) starts this far back at most:
# older hours are for `pytsd compact`.
MAX_CATCH_UP_S = 86400
CHECKPOINT_ROWS = 1000


@dataclass
class SweepStats:
    held_by_other: bool = False
    lost_lease: bool = False
    rows_scanned: int = 0
    rows_compacted: int = 0
    cells_merged: int = 0
    done_until_s: int | None = None
    horizon_s: int = 0
    hours: list[str] = field(default_factory=list)

    @property
    def lag_s(self) -> int:
        """Due time not swept yet: 0 when every due hour is done."""
        if self.done_until_s is None:
            return 0
        return max(0, self.horizon_s - self.done_until_s)


@dataclass(frozen=True)
class Window:
    """Due hours ``[start_s, end_s)`` being swept, from row key ``next_row`` on."""

    start_s: int
    end_s: int
    next_row: bytes = b""

    def cursor(self) -> str:
        return f"{self.end_s}:{self.next_row.hex()}"

    def __str__(self) -> str:
        return f"{_utc(self.start_s)}..{_utc(self.end_s)}"


def _utc(time_s: int) -> str:
    return time.strftime("%Y-%m-%d %H:%MZ", time.gmtime(time_s))


def due_horizon_s(now_s: float, grace_s: int) -> int:
    """The end of the due hours: every hour ending at least ``grace_s`` ago."""
    return int(now_s - grace_s) // MAX_TIMESPAN_S * MAX_TIMESPAN_S


def window_of(state: LeaseState, horizon_s: int) -> Window | None:
    """The window to sweep next (the stored one if its cursor is sound), or None when
    every due hour is swept."""
    done = state.done_until_s
    if done is not None and state.cursor:
        end_text, _, row_hex = state.cursor.partition(":")
        try:
            end_s, next_row = int(end_text), bytes.fromhex(row_hex)
        except ValueError:
            end_s, next_row = 0, b""
        if done < end_s <= horizon_s:
            return Window(done, end_s, next_row)
    floor_s = horizon_s - MAX_CATCH_UP_S  # where a new window starts at most
    start_s = floor_s if done is None else max(done, floor_s)
    return Window(start_s, horizon_s) if start_s < horizon_s else None


class CompactionSweep:
    """One process's part in the sweep: every pass tries the lease, and works if it holds it."""

    def __init__(self, tsdb: TSDB, lease: Lease | None = None) -> None:
        config = tsdb.config
        self.tsdb = tsdb
        self.interval_s: int = config["tsd.storage.compaction.sweep.interval_s"]
        self.grace_s: int = config["tsd.storage.compaction.sweep.grace_s"]
        self.rows_per_pass: int = config["tsd.storage.compaction.sweep.rows_per_pass"]
        self.lease = lease or Lease(tsdb.uid_table, SWEEP_ROW, SWEEP_COLUMN,
                                    lease_s=3 * self.interval_s)
        # This process's totals, for /api/stats.
        self.totals = SweepStats()
        self._lock = threading.Lock()

    def run_once(self, now_s: float | None = None) -> SweepStats:
        """One pass: at most ``rows_per_pass`` rows of due hours scanned and compacted."""
        clock = _Clock(time.time() if now_s is None else now_s)
        stats = SweepStats(horizon_s=due_horizon_s(clock.now_s(), self.grace_s))
        state: LeaseState | None = self.lease.acquire(clock.now_s())
        if state is None:
            stats.held_by_other = True
            return stats
        stats.done_until_s = state.done_until_s
        table = self.tsdb.data_table()
        while state is not None and stats.rows_scanned < self.rows_per_pass:
            window = window_of(state, stats.horizon_s)
            if window is None:
                break
            if not window.next_row:
                log.info("compaction sweep: hours %s", window)
            state = self._sweep(table, window, stats, clock)
        self._add_to_totals(stats)
        return stats

    def _sweep(self, table: Table, window: Window, stats: SweepStats,
               clock: _Clock) -> LeaseState | None:
        """Sweep ``window`` in chunks until it ends or the pass's row budget does, storing
        the position after each chunk; the state stored last, None when the lease was lost
        (another process took it over: this pass stops)."""
        stats.hours.append(str(window))
        ranges = list(self._ranges(window))
        position: bytes | None = window.next_row
        while position is not None:
            budget = min(CHECKPOINT_ROWS, self.rows_per_pass - stats.rows_scanned)
            position = self._sweep_chunk(table, ranges, position, budget, stats)
            if position is None:
                done_until, cursor = window.end_s, None
            else:
                done_until = window.start_s
                cursor = Window(window.start_s, window.end_s, position).cursor()
            state = self.lease.advance(done_until, cursor, clock.now_s())
            if state is None:
                stats.lost_lease = True
                log.warning("compaction sweep: the lease was taken over mid-pass")
                return None
            stats.done_until_s = state.done_until_s
            if stats.rows_scanned >= self.rows_per_pass:
                return state
        return state

    def _ranges(self, window: Window) -> Iterator[tuple[bytes, bytes]]:
        """One ``[start, stop)`` per salt bucket and metric, in key order."""
        layout = self.tsdb.layout
        uids = sorted({uid for _, uid in self.tsdb.metrics.grep(lambda _: True)})
        for salt in layout.salt_prefixes():
            for uid in uids:
                yield layout.metric_scan_range(salt, uid, window.start_s, window.end_s - 1)

    @staticmethod
    def _sweep_chunk(table: Table, ranges: list[tuple[bytes, bytes]], position: bytes,
                     budget: int, stats: SweepStats) -> bytes | None:
        """Scan up to ``budget`` rows of the ranges from row key ``position`` on, key-only,
        then compact those with several data cells. The next position, or None when the
        ranges ended first. Every scan has ended before the first row is compacted (no
        write into a range being read)."""
        candidates: list[tuple[bytes, Row]] = []
        scanned = 0
        following: bytes | None = None
        for start, stop in ranges:
            if stop <= position:
                continue
            for row, cells in table.scan(row_start=max(start, position), row_stop=stop,
                                         columns=[b"t"], limit=budget - scanned,
                                         keys_only=True):
                scanned += 1
                merge = data_cells(cells)
                if len(merge) >= 2:
                    # Two of its (key-only) cells: what compact_row needs to know before it
                    # reads the row whole, without keeping thousands per row meanwhile.
                    candidates.append((row, {DATA_PREFIX + q: b"" for q in list(merge)[:2]}))
                following = row + b"\x00"  # the smallest key after this row
            if scanned >= budget:
                break
        else:
            following = None  # every range scanned to its end
        stats.rows_scanned += scanned
        for row, some_cells in candidates:
            merged = compact_row(table, row, some_cells)
            if merged:
                stats.rows_compacted += 1
                stats.cells_merged += merged
        return following

    def _add_to_totals(self, stats: SweepStats) -> None:
        with self._lock:
            totals = self.totals
            totals.rows_scanned += stats.rows_scanned
            totals.rows_compacted += stats.rows_compacted
            totals.cells_merged += stats.cells_merged
            totals.held_by_other = stats.held_by_other
            totals.horizon_s = stats.horizon_s
            totals.done_until_s = stats.done_until_s

    def stat_lines(self) -> list[StatLine]:
        """``/api/stats`` lines: this process's work, and the fleet's position and lag as
        stored in the lease (read now, so any node reports the same)."""
        totals = self.totals
        lines: list[StatLine] = [
            ("tsd.compaction.sweep.rows_scanned", totals.rows_scanned, {}),
            ("tsd.compaction.sweep.rows_compacted", totals.rows_compacted, {}),
            ("tsd.compaction.sweep.cells_merged", totals.cells_merged, {}),
        ]
        now = time.time()
        try:
            _, state = self.lease.current()
        except TsdbError:
            return lines  # the store is down: /api/stats still answers
        done = None if state is None else state.done_until_s
        lag = SweepStats(done_until_s=done, horizon_s=due_horizon_s(now, self.grace_s)).lag_s
        held = state is not None and state.owner == self.lease.owner and state.expires_s > now
        return [*lines, ("tsd.compaction.sweep.holder", int(held), {}),
                ("tsd.compaction.sweep.done_until_s", done or 0, {}),
                ("tsd.compaction.sweep.lag_s", lag, {})]


class _Clock:
    """``now_s`` (a test may pin it) moved on by the time the pass has taken."""

    def __init__(self, now_s: float) -> None:
        self._start_s = now_s
        self._started = time.monotonic()

    def now_s(self) -> float:
        return self._start_s + time.monotonic() - self._started


def describe(stats: SweepStats) -> str | None:
    """The log line of a pass that did something (None otherwise)."""
    if stats.held_by_other or not stats.rows_scanned:
        return None
    return (f"compaction sweep: scanned {stats.rows_scanned} rows of hours "
            f"{', '.join(stats.hours)}, compacted {stats.rows_compacted} "
            f"({stats.cells_merged} cells); done until "
            f"{'-' if stats.done_until_s is None else _utc(stats.done_until_s)}, "
            f"lag {stats.lag_s} s")


def run_sweep_in_background(sweep: CompactionSweep) -> threading.Thread:
    """Run a pass every ``interval_s`` seconds, the first one now (hours closed while no
    process ran are due)."""
    return run_every("compaction-sweep", sweep.interval_s,
                     lambda: describe(sweep.run_once()), wait_first=False)
