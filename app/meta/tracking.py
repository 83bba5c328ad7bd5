"""TSUID tracking on writes: ``TSDB.addPointInternal``'s meta branch, at a bounded cost.

OpenTSDB 2.4 does, for every data point, when ``tsd.core.meta.enable_tsuid_tracking`` is on:

* ``enable_realtime_ts`` off: put ``ts_ctr = 1`` (the cell's write time marks the series live);
* ``enable_realtime_ts`` on, ``enable_tsuid_incrementing`` off: get ``ts_meta`` and store a new
  TSMeta when there is none (``storeIfNecessary``);
* both on: atomically increment ``ts_ctr`` and store a new TSMeta when it reaches 1.

That is one extra HBase RPC per point (OpenTSDB #549, #575). pytsd does the first two once per
series, process and clock hour (the put and the check are idempotent, so repeating them within
the hour adds nothing but ``lastReceived`` precision). For the third it adds the points up in
memory and increments each series' counter once per ``tsd.core.meta.counter_flush_ms`` (and when
the process exits): counts of the last interval are lost if the process dies, and a new series'
TSMeta appears up to one interval late. This module imports nothing from ``app.tsdb``.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping

from app.meta.codec import (
    TS_COUNTER_COLUMN,
    TS_META_COLUMN,
    TSMeta,
    counter_bytes,
    created_s,
    tsuid_of_row,
)
from app.storage.base import Table
from app.storage.codec_cells import APPEND_QUALIFIER, cell_kind, cell_points, iter_qualifiers

log = logging.getLogger(__name__)
Rows = Mapping[bytes, Mapping[bytes, bytes]]
APPEND_COLUMN = b"t:" + APPEND_QUALIFIER
SINGLE_SECOND_COLUMN_BYTES = 4  # b"t:" and a 2-byte qualifier


def tracking_enabled(config: Mapping[str, object]) -> bool:
    return bool(config["tsd.core.meta.enable_tsuid_tracking"])


class TsuidTracker:
    """What one process does about meta data for the rows it writes."""

    def __init__(self, meta_table: Callable[[], Table], salt_width: int, metric_width: int,
                 realtime_ts: bool, incrementing: bool, flush_ms: int = 1000,
                 clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
                 on_new_ts_meta: Callable[[bytes], None] | None = None) -> None:
        self._table = meta_table
        self._salt_width, self._metric_width = salt_width, metric_width
        self.realtime_ts, self.incrementing = realtime_ts, incrementing
        self._clock_ms = clock_ms
        self._seen: set[bytes] = set()
        self._seen_rows: set[bytes] = set()
        self._hour = -1
        self._lock = threading.Lock()
        # New TSMeta objects stored by this process; what to call for each (trees).
        self.created = 0
        self._on_new_ts_meta = on_new_ts_meta
        # Points per row key not yet added to their series' counters, and when they last were.
        self._pending: dict[bytes, int] = {}
        self._flush_ms = flush_ms
        self._flushed_ms = clock_ms()
        if realtime_ts and incrementing:
            atexit.register(_flush_at_exit, weakref.ref(self))

    def track_rows(self, rows: Rows) -> None:
        """Record the series of rows just written to the data table."""
        if self.realtime_ts and self.incrementing:
            self._count(rows)
            return
        fresh = self._fresh(rows.keys())
        if not fresh:
            return
        if self.realtime_ts:
            for tsuid in sorted(fresh):
                self._store_if_necessary(tsuid)
        else:
            one = counter_bytes(1)
            self._table().put_many([(tsuid, {TS_COUNTER_COLUMN: one}) for tsuid in sorted(fresh)])

    def _tsuid(self, row: bytes) -> bytes:
        return tsuid_of_row(row, self._salt_width, self._metric_width)

    def _fresh(self, rows: Iterable[bytes]) -> set[bytes]:
        """The series of ``rows`` not yet tracked by this process in this clock hour (now
        marked). The row keys seen are kept too: a batch of known rows, the common case, costs
        one set difference, with no key sliced."""
        hour = self._clock_ms() // 3_600_000
        with self._lock:
            if hour != self._hour:
                self._seen, self._seen_rows, self._hour = set(), set(), hour
            new_rows = set(rows) - self._seen_rows
            if not new_rows:
                return set()
            self._seen_rows |= new_rows
            fresh = {self._tsuid(row) for row in new_rows} - self._seen
            self._seen |= fresh
        return fresh

    def _count(self, rows: Rows) -> None:
        """Points added up per row key: a row keeps its key for the hour, so a busy series
        costs a dict update per batch; keys become TSUIDs once per flush."""
        single = SINGLE_SECOND_COLUMN_BYTES
        with self._lock:
            pending = self._pending
            for row, cells in rows.items():
                points = len(cells)
                # The common case first: one point per cell, a 2-byte qualifier each (every
                # data column is at least that long, so the sum says all are).
                if sum(map(len, cells)) != single * points:
                    points = _points_in_row(cells)
                pending[row] = pending.get(row, 0) + points
            due = self._clock_ms() - self._flushed_ms >= self._flush_ms
        if due:
            self.flush()

    def flush(self) -> None:
        """Add the pending points to their counters; a counter that was 0 is a new series."""
        with self._lock:
            pending_rows, self._pending = self._pending, {}
            self._flushed_ms = self._clock_ms()
        if not pending_rows:
            return
        pending: dict[bytes, int] = {}
        for row, points in pending_rows.items():
            tsuid = self._tsuid(row)
            pending[tsuid] = pending.get(tsuid, 0) + points
        table = self._table()
        for tsuid in sorted(pending):
            if pending[tsuid] and table.counter_inc(tsuid, TS_COUNTER_COLUMN,
                                                    pending[tsuid]) == pending[tsuid]:
                self._store_new(table, tsuid)

    def _store_if_necessary(self, tsuid: bytes) -> None:
        table = self._table()
        if not table.row(tsuid, [TS_META_COLUMN]).get(TS_META_COLUMN):
            self._store_new(table, tsuid)

    def _store_new(self, table: Table, tsuid: bytes) -> None:
        meta = TSMeta(tsuid=tsuid.hex().upper(), created=created_s(self._clock_ms()))
        table.put(tsuid, {TS_META_COLUMN: meta.storage_json()})
        self.created += 1
        if self._on_new_ts_meta is not None:
            self._on_new_ts_meta(tsuid)


def _flush_at_exit(tracker: weakref.ref[TsuidTracker]) -> None:
    live = tracker()
    if live is None:
        return
    try:
        live.flush()
    except Exception:  # the store may be closed or gone by now: the counts are advisory
        log.warning("could not add the last counts to ts_ctr at exit", exc_info=True)


def _points_in_row(cells: Mapping[bytes, bytes]) -> int:
    return sum(_points_in(column, value) for column, value in cells.items())


def _points_in(column: bytes, value: bytes) -> int:
    """Data points in one written data-table cell (a point, a compacted column, appends)."""
    qualifier = column[2:]
    if column == APPEND_COLUMN:
        kind = cell_kind(qualifier)
        return len(cell_points(kind, qualifier, value)) if kind is not None else 0
    return sum(1 for _ in iter_qualifiers(qualifier))
