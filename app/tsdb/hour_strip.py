"""One copy of the kept hours (``tsd.storage.sqlite.one_copy``), done by the server's
background work, never by a query.

A read keeps a closed hour's hour column beside its cells (cheap: it has decoded them
anyway). This job then has the cells of each kept hour give their values to it
(``sqlite_hours.strip_kept``), a few hours a step, each hour in its own short write
transaction, pausing between steps: a writer waits for one hour's strip at most, and no
query pays for it. In every pytsd process (not read-only) over a store with the setting on,
one holder of its :class:`~app.tsdb.lease.Lease` at a time does the work; each step renews
the lease. A pass starts from the first kept hour again: the hours done are skipped in the
SQL that finds the others (one index probe each), so no position needs keeping.

The lease cell lives in ``tsdb-uid``, row ``\\x00pytsd.hour.strip``, column
``id:pytsd.hour.strip`` (beside the compaction sweep's, ``app.tsdb.compaction_sweep``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.storage import embedded
from app.storage.base import HOUR_COLUMN, HourColumn, able
from app.tsdb.background import run_every
from app.tsdb.lease import Lease

if TYPE_CHECKING:
    from app.config import Config
    from app.tsdb import TSDB

STRIP_ROW = b"\x00pytsd.hour.strip"
STRIP_COLUMN = b"id:pytsd.hour.strip"
HOURS_PER_STEP = 4
# Between steps: writers and queries of this process get the write lock and the GIL.
STEP_PAUSE_S = 0.05


def wanted(config: Config) -> bool:
    """Whether kept hours are stripped at all: the one place that decides (the setting, an
    embedded store's)."""
    return embedded(config) and bool(config["tsd.storage.sqlite.one_copy"])


def stripping_table(tsdb: TSDB) -> HourColumn | None:
    """The data table when its kept hours are to be stripped (:func:`wanted`, on a store that
    keeps hour columns), else None."""
    return able(tsdb.data_table(), HOUR_COLUMN) if wanted(tsdb.config) else None


@dataclass
class StripStats:
    held_by_other: bool = False
    lost_lease: bool = False
    steps: int = 0
    cells_stripped: int = 0


def strip_all(table: HourColumn, between: Callable[[], bool] | None = None) -> StripStats:
    """Strip every kept hour not stripped yet, ``HOURS_PER_STEP`` at a time, calling
    ``between`` between steps (False: stop, the lease is lost)."""
    stats = StripStats()
    after: bytes | None = b""
    while after is not None:
        after, stripped = table.strip_hour_values(after, HOURS_PER_STEP)
        stats.steps += 1
        stats.cells_stripped += stripped
        if after is not None and between is not None and not between():
            stats.lost_lease = True
            break
    return stats


class HourStrip:
    """One process's part: every pass tries the lease, and strips if it holds it."""

    def __init__(self, tsdb: TSDB, lease: Lease | None = None,
                 pause_s: float = STEP_PAUSE_S) -> None:
        self.tsdb = tsdb
        self.interval_s: int = tsdb.config["tsd.storage.sqlite.one_copy.interval_s"]
        self.pause_s = pause_s
        self.lease = lease or Lease(tsdb.uid_table, STRIP_ROW, STRIP_COLUMN,
                                    lease_s=3 * self.interval_s)

    def run_once(self) -> StripStats:
        """One pass: every kept hour not stripped yet, unless another process holds the
        lease (or takes it over meanwhile: this pass stops). Nothing on a store that keeps
        no hour columns (asked here, not when the server starts: the store opens on use)."""
        table = stripping_table(self.tsdb)
        if table is None or not table.hours_to_strip():
            return StripStats()  # no lease taken (no write) when there is nothing to do
        if self.lease.acquire(time.time()) is None:
            return StripStats(held_by_other=True)
        return strip_all(table, self._between_steps)

    def _between_steps(self) -> bool:
        """Pause, then renew the lease; False when it was lost."""
        time.sleep(self.pause_s)
        return self.lease.advance(None, None, time.time()) is not None


def describe(stats: StripStats) -> str | None:
    """The log line of a pass that stripped something (None otherwise)."""
    if not stats.cells_stripped:
        return None
    return (f"one copy: {stats.cells_stripped} cells of kept hours gave their values to "
            f"their hour columns in {stats.steps} steps")


def run_strip_in_background(strip: HourStrip) -> threading.Thread:
    """A pass every ``interval_s`` seconds, the first one after a wait: a fresh process's
    first queries do not share the CPU with it."""
    return run_every("hour-strip", strip.interval_s, lambda: describe(strip.run_once()),
                     wait_first=True)
