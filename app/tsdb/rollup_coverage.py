"""Which hours pytsd's rollups cover, and from which state of the raw rows: a record in storage.

Every node and every restart reads the same cells, so the planner on any node knows, per hour,
whether the rollup of that hour is complete and current (docs/rollups.md, "Coverage"):

* a **mark** per hour: a random token, replaced by every write pytsd makes into a raw hour that
  has closed (or closes within ``MARK_AHEAD_S``) — ``/api/put``, telnet, ``pytsd import``, a
  query delete — *after* its cells are stored, and by the background verifier when it finds
  that hour's raw stamp changed (a write pytsd did not make: a Java TSD, a direct table put);
* a **cover** per hour and rollup interval: the mark read *before* the roll read the raw rows,
  and the raw stamp (cells, newest write time) of the hour's rows, read before their values.

An hour's rollup of one interval is used only when its cover's token equals the hour's current
mark: any write stored after the roll read the raw rows changed the mark after that (the mark is
written after the cells), so a current token proves no such write happened.

The cells live beside the lease (``rollup_lease``): in the finest rollup table, in rows whose
metric UID is 0 (``…pytsd.rollup.cover`` + the UTC day), which no query and no OpenTSDB reader
scans. One row per day holds the marks (``m`` + hour) and covers (``c`` + hour + interval).
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from app.storage.base import SCAN_STAMPS, Table, able, prefix_stop
from app.tsdb import TSDB
from app.tsdb.rollup_config import RollupInterval

COVER_TAIL = b"pytsd.rollup.cover"
HOUR_S = 3600
DAY_S = 86400
# A write into an hour closing within this many seconds marks it: a write is marked unless it
# is stored before the hour closes plus this margin (the pass rolls an hour only after it
# closed, plus tsd.rollups.compute.lag_s).
MARK_AHEAD_S = 60
_STAMP = struct.Struct(">qq")
Stamp = tuple[int, int]


def hour_local(interval: RollupInterval) -> bool:
    """Intervals whose cells each depend on one raw hour only (they tile the hour, in rows of
    whole hours): what coverage tracks, hour by hour."""
    return (not interval.default_interval and HOUR_S % interval.interval_s == 0
            and interval.units in ("h", "d") and interval.row_span_s % HOUR_S == 0)


def tracked(tsdb: TSDB) -> list[RollupInterval]:
    config = tsdb.rollup_config
    return [] if config is None else [i for i in config.rollups() if hour_local(i)]


def coverage_mode(tsdb: TSDB) -> bool:
    """Whether pytsd computes the rollups (the background pass): then an hour it has not
    rolled, or whose raw rows changed since, is read raw."""
    return tsdb.rollup_config is not None and bool(tsdb.config["tsd.rollups.compute.background"])


def _table(tsdb: TSDB) -> Table:
    assert tsdb.rollup_config is not None
    return tsdb.table(tsdb.rollup_config.rollups()[0].table)


def _prefix(tsdb: TSDB) -> bytes:
    return bytes(tsdb.layout.salt_width + tsdb.layout.metric_width) + COVER_TAIL


def _row(tsdb: TSDB, day_s: int) -> bytes:
    return _prefix(tsdb) + day_s.to_bytes(4, "big")


def _mark_column(hour_s: int) -> bytes:
    return b"t:m" + bytes([hour_s % DAY_S // HOUR_S])


def _cover_column(hour_s: int, interval: str) -> bytes:
    return b"t:c" + bytes([hour_s % DAY_S // HOUR_S]) + interval.encode()


@dataclass(frozen=True)
class Cover:
    token: bytes
    stamp: Stamp

    def encode(self) -> bytes:
        return _STAMP.pack(*self.stamp) + self.token

    @classmethod
    def decode(cls, raw: bytes) -> Cover | None:
        if len(raw) < _STAMP.size:
            return None
        cells, newest = _STAMP.unpack_from(raw)
        return cls(raw[_STAMP.size:], (cells, newest))


@dataclass
class Coverage:
    """The marks and covers of some days, as read from storage."""

    marks: dict[int, bytes] = field(default_factory=dict)
    covers: dict[tuple[int, str], bytes] = field(default_factory=dict)  # raw cell values

    def cover(self, hour_s: int, interval: str) -> Cover | None:
        raw = self.covers.get((hour_s, interval))
        return None if raw is None else Cover.decode(raw)

    def valid(self, hour_s: int, interval: str) -> bool:
        """The hour's rollup of ``interval`` is complete and no raw write reached it since."""
        raw = self.covers.get((hour_s, interval))  # the stamp, then the mark read (Cover)
        return (raw is not None and len(raw) >= _STAMP.size
                and raw[_STAMP.size:] == self.marks.get(hour_s, b""))

    def valid_hours(self, interval: str, first_hour_s: int, hours: int) -> np.ndarray:
        return np.fromiter((self.valid(first_hour_s + i * HOUR_S, interval)
                            for i in range(hours)), bool, hours)

    def hours(self) -> set[int]:
        """Every hour with a mark or a cover."""
        return set(self.marks) | {hour for hour, _ in self.covers}


def read(tsdb: TSDB, first_s: int | None = None, last_s: int | None = None) -> Coverage:
    """The record of the days holding ``[first_s, last_s]`` (all of it when None)."""
    prefix = _prefix(tsdb)
    start = prefix if first_s is None else _row(tsdb, first_s - first_s % DAY_S)
    stop = prefix_stop(prefix) if last_s is None else _row(tsdb, last_s - last_s % DAY_S + DAY_S)
    found = Coverage()
    for key, cells in _table(tsdb).scan(row_start=start, row_stop=stop, columns=[b"t"]):
        day_s = int.from_bytes(key[len(prefix):len(prefix) + 4], "big")
        for column, value in cells.items():
            qualifier = column[2:]
            if len(qualifier) < 2:
                continue
            hour_s = day_s + qualifier[1] * HOUR_S
            if qualifier[:1] == b"m":
                found.marks[hour_s] = value
            elif qualifier[:1] == b"c":
                found.covers[(hour_s, qualifier[2:].decode())] = value
    return found


def mark_hours(tsdb: TSDB, hours_s: Iterable[int], now_s: float | None = None, *,
               closed_only: bool = True) -> int:
    """Give each hour a new mark (one fresh token for all): their covers no longer hold.
    With ``closed_only``, only hours that closed or close within ``MARK_AHEAD_S`` (an open
    hour is rolled by no one yet). Returns how many hours were marked."""
    if tsdb.rollup_config is None:
        return 0
    now = time.time() if now_s is None else now_s
    hours = {h - h % HOUR_S for h in hours_s}
    if closed_only:
        hours = {h for h in hours if h + HOUR_S - MARK_AHEAD_S <= now}
    if not hours:
        return 0
    token = os.urandom(8)
    rows: dict[bytes, dict[bytes, bytes]] = {}
    for hour in hours:
        rows.setdefault(_row(tsdb, hour - hour % DAY_S), {})[_mark_column(hour)] = token
    _table(tsdb).put_many(sorted(rows.items()))
    return len(hours)


def mark_rows(tsdb: TSDB, row_keys: Iterable[bytes]) -> int:
    """Mark the hours of raw rows just written or changed (call *after* storing them)."""
    if tsdb.rollup_config is None:
        return 0
    at = tsdb.layout.salt_width + tsdb.layout.metric_width
    return mark_hours(tsdb, {int.from_bytes(key[at:at + 4], "big") for key in row_keys})


def raw_stamps(tsdb: TSDB, metric_uids: Sequence[bytes], first_s: int,
               end_s: int) -> dict[int, Stamp]:
    """``hour -> (cells, newest write time in ms)`` of every raw row of ``metric_uids`` with a
    base time in ``[first_s, end_s)``: the values stay in storage (``scan_stamps``)."""
    table = able(tsdb.data_table(), SCAN_STAMPS)
    layout = tsdb.layout
    at = layout.salt_width + layout.metric_width
    found: dict[int, Stamp] = {}
    if end_s <= first_s or table is None:
        return found  # a backend without stamps: writes pytsd did not make go unseen
    for uid in metric_uids:
        for salt in layout.salt_prefixes():
            start, stop = layout.metric_scan_range(salt, uid, first_s, end_s - 1)
            for key, cells, newest in table.scan_stamps(start, stop, "t"):
                hour = int.from_bytes(key[at:at + 4], "big")
                had = found.get(hour, (0, 0))
                found[hour] = (had[0] + int(cells), max(had[1], int(newest)))
    return found


def record(tsdb: TSDB, before: Coverage, intervals: Sequence[RollupInterval],
           hours_s: Iterable[int], stamps: dict[int, Stamp]) -> int:
    """Record each hour's cover (the mark read in ``before``, the stamp read before the values)
    with check-and-put against the cover ``before`` holds. A cover changed meanwhile means
    another roller ran over these hours: which cells won is unknown, so the hour is marked
    (read raw, rolled again). Returns the hours so marked."""
    table = _table(tsdb)
    lost: set[int] = set()
    for hour in hours_s:
        value = Cover(before.marks.get(hour, b""), stamps.get(hour, (0, 0))).encode()
        row = _row(tsdb, hour - hour % DAY_S)
        for interval in intervals:
            column = _cover_column(hour, interval.interval)
            expected = before.covers.get((hour, interval.interval))
            if expected == value:
                continue
            if not table.check_and_put(row, column, expected, value):
                lost.add(hour)
    if lost:
        mark_hours(tsdb, lost, closed_only=False)
    return len(lost)
