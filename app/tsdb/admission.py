"""Cost-aware admission: cheap queries never wait behind expensive ones.

Every query gets an estimated cost (data points to read) before it runs: what the same shape
(metric, filters, downsample) read the last time it ran in this process, or, the first time,
the time span at one point per 10 s per series (times ``WILDCARD_FACTOR`` when a filter
groups by a wildcard or regexp). Queries estimated under ``tsd.query.expensive_points`` run in
the cheap lane (``tsd.server.heavy_threads`` at once per worker), the others in the expensive
lane (``tsd.query.expensive_threads``). Each lane is a semaphore a query waits on in its
request thread, at most ``tsd.query.max_queue_ms``; then it is refused with 503 and a
``Retry-After``. At most ``QUEUE_PER_SLOT`` queries per expensive slot may wait at all (more
are refused at once), so waiting expensive queries cannot take the threads cheap ones need.
Optional quotas cap the queries one user or one dashboard runs at once in a worker.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from app.errors import TsdbError
from app.query.ast import Query, SubQuery
from app.tsdb import TSDB

POINT_EVERY_MS = 10_000  # the first-time guess: one point per 10 s per series
WILDCARD_FACTOR = 10  # ... and ten series when a filter groups by a pattern
QUEUE_PER_SLOT = 4  # expensive queries that may wait per expensive slot
REMEMBERED_SHAPES = 4096
GONE_CHECK_S = 0.1  # a waiting query looks this often whether its client left


class QueryRefusedError(TsdbError):
    """A query not admitted (lane full, quota); carries the seconds to retry after."""

    code = 503

    def __init__(self, message: str, details: str, retry_after_s: int, reason: str) -> None:
        super().__init__(message, details)
        self.retry_after_s = retry_after_s
        self.reason = reason


class ClientGoneError(TsdbError):
    """The client went away while its query waited: nginx's 499, which nobody reads."""

    code = 499


@dataclass(frozen=True)
class AdmissionSettings:
    cheap_slots: int
    expensive_slots: int
    expensive_points: int
    max_queue_ms: int
    user_quota: int
    dashboard_quota: int

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> AdmissionSettings:
        return cls(cheap_slots=max(1, int(config["tsd.server.heavy_threads"])),
                   expensive_slots=max(1, int(config["tsd.query.expensive_threads"])),
                   expensive_points=int(config["tsd.query.expensive_points"]),
                   max_queue_ms=int(config["tsd.query.max_queue_ms"]),
                   user_quota=int(config["tsd.query.quota.user"]),
                   dashboard_quota=int(config["tsd.query.quota.dashboard"]))

    def threads_needed(self) -> int:
        """Request threads the query pool needs so that no lane starves another."""
        return self.cheap_slots + self.expensive_slots * (1 + QUEUE_PER_SLOT)


class Lane:
    def __init__(self, name: str, slots: int, queue_cap: int | None) -> None:
        self.name = name
        self.slots = threading.BoundedSemaphore(slots)
        self.queue_cap = queue_cap
        self.waiting = 0
        self._lock = threading.Lock()

    def enter(self, timeout_s: float, gone: threading.Event | None = None) -> bool:
        """Take a slot within ``timeout_s``; False when full, or when ``gone`` is set (the
        client left: nobody would read the answer)."""
        with self._lock:
            if self.queue_cap is not None and self.waiting >= self.queue_cap:
                return False
            self.waiting += 1
        try:
            if gone is None:
                return self.slots.acquire(timeout=timeout_s)
            deadline = time.monotonic() + timeout_s
            while not gone.is_set():
                step = min(GONE_CHECK_S, deadline - time.monotonic())
                if step <= 0:
                    return self.slots.acquire(blocking=False)
                if self.slots.acquire(timeout=step):
                    return True
            return False
        finally:
            with self._lock:
                self.waiting -= 1

    def leave(self) -> None:
        self.slots.release()


@dataclass
class Ticket:
    lane: str
    cost: int
    waited_s: float = 0.0


def shape_key(sub: SubQuery) -> tuple[Any, ...]:
    return (sub.metric, tuple(sub.tsuids), tuple((f.tagk, f.type, f.filter, f.group_by)
                                                 for f in sub.filters),
            sub.downsample.text if sub.downsample else None)


def _first_guess(sub: SubQuery, span_ms: int) -> int:
    patterns = any(f.group_by and f.type not in ("literal_or", "iliteral_or")
                   for f in sub.filters)
    return max(1, span_ms // POINT_EVERY_MS) * (WILDCARD_FACTOR if patterns else 1)


def last_cost(series: int, hours: int) -> int:
    """What ``/api/query/last`` may read: ``series`` (a metric query counts as a wildcard's
    ``WILDCARD_FACTOR``) times the hours it scans back, each hour a row of a point per 10 s."""
    return max(1, series) * max(1, hours) * (3_600_000 // POINT_EVERY_MS)


class Admission:
    """The lanes and quotas of one worker process."""

    def __init__(self, settings: AdmissionSettings) -> None:
        self.settings = settings
        self.lanes = {"cheap": Lane("cheap", settings.cheap_slots, None),
                      "expensive": Lane("expensive", settings.expensive_slots,
                                        settings.expensive_slots * QUEUE_PER_SLOT)}
        self._read_last: dict[tuple[Any, ...], int] = {}
        self._lock = threading.Lock()
        self._per_user: dict[str, int] = {}
        self._per_dashboard: dict[str, int] = {}

    def estimate(self, query: Query) -> int:
        """Points the query is expected to read (see the module's docstring)."""
        span_ms = max(query.end_ms - query.start_ms, 0)
        with self._lock:
            return sum(self._read_last.get(shape_key(sub), _first_guess(sub, span_ms))
                       for sub in query.queries)

    def learn(self, query: Query, points_per_sub: Mapping[int, int]) -> None:
        """What each sub-query read, for the next estimate of the same shape."""
        with self._lock:
            if len(self._read_last) > REMEMBERED_SHAPES:
                self._read_last.clear()
            for sub in query.queries:
                if sub.index in points_per_sub:
                    self._read_last[shape_key(sub)] = int(points_per_sub[sub.index])

    def lane_for(self, cost: int) -> str:
        return "expensive" if cost >= self.settings.expensive_points else "cheap"

    @contextmanager
    def admitted(self, cost: int, user: str | None, dashboard: str | None,
                 gone: threading.Event | None = None) -> Iterator[Ticket]:
        """Hold a slot of the lane for ``cost`` (see :meth:`estimate`), and of the user's and
        the dashboard's quotas, while the query runs; raise :class:`QueryRefusedError` (or
        :class:`ClientGoneError` when ``gone`` is set while it waits)."""
        ticket = Ticket(self.lane_for(cost), cost)
        with self._quota(self._per_user, user, self.settings.user_quota, "user"), \
                self._quota(self._per_dashboard, dashboard, self.settings.dashboard_quota,
                            "dashboard"):
            lane = self.lanes[ticket.lane]
            started = time.perf_counter()
            if not lane.enter(self.settings.max_queue_ms / 1000, gone):
                if gone is not None and gone.is_set():
                    raise ClientGoneError("Client closed the connection",
                                          "The query was dropped while it waited for its lane")
                raise self._refusal(ticket, "queue",
                                    f"The {ticket.lane} query lane is full "
                                    f"(waited up to tsd.query.max_queue_ms="
                                    f"{self.settings.max_queue_ms})")
            ticket.waited_s = time.perf_counter() - started
            try:
                with _lane_scope(ticket.lane):
                    yield ticket
            finally:
                lane.leave()

    @contextmanager
    def _quota(self, counts: dict[str, int], who: str | None, quota: int,
               kind: str) -> Iterator[None]:
        if not quota or not who:
            yield
            return
        with self._lock:
            if counts.get(who, 0) >= quota:
                raise self._refusal(Ticket("", 0), "quota",
                                    f"The {kind} {who} already runs {quota} queries in this "
                                    f"worker (tsd.query.quota.{kind})")
            counts[who] = counts.get(who, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                counts[who] -= 1
                if not counts[who]:
                    del counts[who]

    def _refusal(self, ticket: Ticket, reason: str, details: str) -> QueryRefusedError:
        retry_s = max(1, math.ceil(self.settings.max_queue_ms / 1000))
        return QueryRefusedError("Too many queries; retry later", details, retry_s, reason)


def _as_is(lane: str) -> AbstractContextManager[None]:
    return nullcontext()


_lane_scope: Callable[[str], AbstractContextManager[None]] = _as_is


def run_lanes_in(scope: Callable[[str], AbstractContextManager[None]] | None) -> None:
    """How the serving layer runs a lane's queries: ``scope(lane)`` wraps each one in its
    thread (``app.server.cpu_class.lane_class``: the expensive lane as the OS's batch work);
    None: as they are."""
    global _lane_scope
    _lane_scope = scope or _as_is


_ADMISSIONS: dict[TSDB, Admission] = {}
_ADMISSIONS_LOCK = threading.Lock()


def admission_for(tsdb: TSDB) -> Admission:
    """The process's lanes for ``tsdb`` (made on first use, after gunicorn's fork)."""
    with _ADMISSIONS_LOCK:
        found = _ADMISSIONS.get(tsdb)
        if found is None:
            found = _ADMISSIONS[tsdb] = Admission(AdmissionSettings.from_config(tsdb.config))
        return found
