"""In-process counters for ``/api/stats``: requests, latencies, points, UID caches.

Counters live in the worker process that served the request: with several gunicorn workers
each answers ``/api/stats`` with its own figures (as each OpenTSDB TSD reports its own).
Latency percentiles come from the most recent ``LATENCY_WINDOW`` requests.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import weakref
from collections import Counter, deque
from typing import Any

import numpy as np
from flask import Response, g, request
from flask.blueprints import BlueprintSetupState

from app.api import bp
from app.storage.base import SPACE_USED, StoreSpace, able
from app.tsdb import TSDB

LATENCY_WINDOW = 4096
LATENCY_PERCENTILES = (50, 75, 90, 95, 99)
SPACE_EVERY_S = 300
_SPACE_LOCK = threading.Lock()
# Per TSDB (weakly: a test's TSDB goes away with it): when last counted, and what.
_SPACE_CACHE: weakref.WeakKeyDictionary[TSDB, tuple[int, StoreSpace]] = (
    weakref.WeakKeyDictionary())


class Counters:
    """Thread-safe counters of one process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started_s = time.time()
        self.requests: Counter[tuple[str, int]] = Counter()
        self.latencies_ms: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self.points_written = 0
        self.points_read = 0

    def record_request(self, endpoint: str, status: int, elapsed_ms: float) -> None:
        with self._lock:
            self.requests[(endpoint, status)] += 1
            self.latencies_ms.append(elapsed_ms)

    def add_points_written(self, count: int) -> None:
        with self._lock:
            self.points_written += count

    def add_points_read(self, count: int) -> None:
        with self._lock:
            self.points_read += count

    def snapshot(self) -> tuple[list[tuple[tuple[str, int], int]], list[float]]:
        """Request counts (sorted) and recent latencies, copied under the lock."""
        with self._lock:
            return sorted(self.requests.items()), list(self.latencies_ms)


COUNTERS = Counters()


def record_points_written(count: int) -> None:
    """Called by ``/api/put`` with the points it stored."""
    COUNTERS.add_points_written(count)


def record_points_read(count: int) -> None:
    """Called by the read endpoints with the data points they decoded."""
    COUNTERS.add_points_read(count)


def _endpoint() -> str:
    rule = request.url_rule
    if rule is None:
        return "unknown"
    # /api/v1/x and /api/x are one endpoint.
    return rule.rule.replace("/api/v1/", "/api/", 1)


def _start_timer() -> None:
    g.tsd_started = time.perf_counter()


@bp.record_once
def _register_timer(state: BlueprintSetupState) -> None:
    # First of the app's before-request hooks, so requests another hook refuses (CORS) count.
    state.app.before_request_funcs.setdefault(None, []).insert(0, _start_timer)


@bp.after_app_request
def _count_request(response: Response) -> Response:
    started = g.get("tsd_started")
    if started is not None:
        COUNTERS.record_request(_endpoint(), response.status_code,
                                (time.perf_counter() - started) * 1000)
    return response


def _point(metric: str, value: float | int, tags: dict[str, str], now_s: int,
           host: str) -> dict[str, Any]:
    text = str(int(value)) if float(value).is_integer() else f"{value:.3f}"
    return {"metric": metric, "timestamp": now_s, "value": text, "tags": {**tags, "host": host}}


def _space_points(tsdb: TSDB, now_s: int) -> list[tuple[str, float | int, dict[str, str]]]:
    """The embedded store's disk use (nothing on HBase). Counting the points reads the whole
    data table's keys, so a process does it at most every ``SPACE_EVERY_S`` seconds."""
    space_used = able(tsdb.data_table(), SPACE_USED)
    if space_used is None:
        return []
    with _SPACE_LOCK:
        cached = _SPACE_CACHE.get(tsdb)
        if cached is None or cached[0] + SPACE_EVERY_S <= now_s:
            cached = _SPACE_CACHE[tsdb] = (now_s, space_used.space_used())
    used = cached[1]
    tags = {"type": "embedded"}
    return [("tsd.storage.file_bytes", used.file_bytes, tags),
            ("tsd.storage.used_bytes", used.used_bytes, tags),
            ("tsd.storage.points", used.points, tags),
            ("tsd.storage.bytes_per_point", used.file_bytes_per_point, {"kind": "file"}),
            ("tsd.storage.bytes_per_point", used.used_bytes_per_point, {"kind": "in_use"})]


def collect(tsdb: TSDB) -> list[dict[str, Any]]:
    """OpenTSDB's ``/api/stats`` list: ``{"metric","timestamp","value","tags"}``, values as text."""
    now_s, host = int(time.time()), socket.gethostname()
    points: list[tuple[str, float | int, dict[str, str]]] = [
        ("tsd.process.uptime_s", now_s - int(COUNTERS.started_s), {"pid": str(os.getpid())}),
        ("tsd.rpc.received", sum(COUNTERS.requests.values()), {"type": "http"}),
        ("tsd.datapoints.added", COUNTERS.points_written, {"type": "all"}),
        ("tsd.datapoints.read", COUNTERS.points_read, {"type": "all"}),
    ]
    requests, recent = COUNTERS.snapshot()
    latencies = np.array(recent, dtype=np.float64)
    for (endpoint, status), count in requests:
        points.append(("tsd.http.requests", count, {"endpoint": endpoint, "status": str(status)}))
    if latencies.size:
        for pct in LATENCY_PERCENTILES:
            points.append((f"tsd.http.latency_{pct}pct", float(np.percentile(latencies, pct)),
                           {"type": "all"}))
    for kind, uids in tsdb.uids.items():
        tags = {"kind": kind}
        used = uids.max_id()
        points += [("tsd.uid.cache-hit", uids.cache_hits, tags),
                   ("tsd.uid.cache-miss", uids.cache_misses, tags),
                   ("tsd.uid.cache-size", uids.cache_size, tags),
                   ("tsd.uid.ids-used", used, tags),
                   ("tsd.uid.ids-available", (1 << 8 * uids.width) - 1 - used, tags)]
    points += _space_points(tsdb, now_s)
    points += [(metric, value, dict(tags)) for metric, value, tags in tsdb.plugins.stats()]
    return [_point(metric, value, tags, now_s, host) for metric, value, tags in points]
