"""Counters for ``/api/stats``: requests, latencies, points, UID caches.

Requests and points are counted in ``app/observe/metrics.py``: under gunicorn in files every
worker of the server writes, so ``/api/stats`` answers the server's totals whichever worker
takes the request, with a per-worker breakdown (``tsd.worker.*``, tagged ``pid``). Latency
percentiles come from the most recent ``LATENCY_WINDOW`` requests of the answering worker
(``/metrics`` has the server's histograms); UID cache figures are per process, as the caches.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import weakref
from collections import deque
from typing import Any

import numpy as np
from flask import Response, current_app, g, jsonify, request
from flask.blueprints import BlueprintSetupState

from app.api import bp
from app.api.mode import endpoint_segment
from app.observe import metrics
from app.observe.health import STORE_HEALTH
from app.observe.queries import query_log
from app.storage.base import SPACE_USED, STORE_STATS, StoreSpace, able
from app.tsdb import TSDB
from app.tsdb.hour_cache import cache_for
from app.tsdb.rollup_backfill import progress as rollup_progress
from app.tsdb.rollup_coverage import coverage_mode

LATENCY_WINDOW = 4096
# Endpoints whose success means the store answered (/api/version does not tell).
STORE_SEGMENTS = frozenset({"put", "query", "q", "suggest", "search", "uid", "annotation",
                            "annotations", "histogram"})
LATENCY_PERCENTILES = (50, 75, 90, 95, 99)
SPACE_EVERY_S = 300
_SPACE_LOCK = threading.Lock()
# Per TSDB (weakly: a test's TSDB goes away with it): when last counted, and what.
_SPACE_CACHE: weakref.WeakKeyDictionary[TSDB, tuple[int, StoreSpace]] = (
    weakref.WeakKeyDictionary())


class Counters:
    """What only this process knows: its start and its recent latencies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started_s = time.time()
        self.latencies_ms: deque[float] = deque(maxlen=LATENCY_WINDOW)

    def record_request(self, endpoint: str, status: int, elapsed_ms: float) -> None:
        metrics.HTTP_REQUESTS.labels(endpoint, str(status)).inc()
        metrics.HTTP_LATENCY.labels(endpoint).observe(elapsed_ms / 1000)
        with self._lock:
            self.latencies_ms.append(elapsed_ms)

    @property
    def points_written(self) -> int:
        """Points the server (every worker) has written."""
        return int(metrics.total("pytsd_datapoints_added_total"))

    def recent_latencies(self) -> list[float]:
        with self._lock:
            return list(self.latencies_ms)


COUNTERS = Counters()


def record_points_written(count: int) -> None:
    """Called by ``/api/put`` and the line protocol with the points they stored."""
    if count:
        metrics.POINTS_WRITTEN.inc(count)


def record_points_read(count: int) -> None:
    """Called by the read endpoints with the data points they decoded."""
    if count:
        metrics.POINTS_READ.inc(count)


_synced: dict[tuple[int, str, str], int] = {}
_sync_lock = threading.Lock()


def sync_cache_counters(tsdb: TSDB) -> None:
    """Move this process's cache counters (plain ints the caches keep) into the shared
    counters, by difference since the last call; called after each query and by /metrics."""
    current: dict[tuple[str, str], int] = {}
    cache = cache_for(tsdb)
    if cache is not None:
        current[("hour", "hit")] = cache.stats.hits
        current[("hour", "miss")] = cache.stats.misses
    for kind, uids in tsdb.uids.items():
        current[(f"uid_{kind}", "hit")] = uids.cache_hits
        current[(f"uid_{kind}", "miss")] = uids.cache_misses
    with _sync_lock:
        for (cache_name, result), value in current.items():
            key = (id(tsdb), cache_name, result)
            delta = value - _synced.get(key, 0)
            if delta > 0:
                metrics.CACHE_LOOKUPS.labels(cache_name, result).inc(delta)
            _synced[key] = value


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
    if endpoint_segment(request.path) in ("query", "q"):
        sync_cache_counters(current_app.extensions["tsdb"])
    count_request(request.path, _endpoint(), response.status_code,
                  None if started is None else (time.perf_counter() - started) * 1000)
    return response


def count_request(path: str, endpoint: str, status: int, elapsed_ms: float | None) -> None:
    """Count an answered request (Flask's hook; ``/api/put`` answered without Flask,
    app/api/put_direct.py); ``elapsed_ms`` None: not timed, not counted (a request refused
    before the timer's hook)."""
    if status < 500 and endpoint_segment(path) in STORE_SEGMENTS:
        STORE_HEALTH.succeeded()  # an outage ends with the first store access that works
    if elapsed_ms is not None:
        COUNTERS.record_request(endpoint, status, elapsed_ms)


def _point(metric: str, value: float | int, tags: dict[str, str], now_s: int,
           host: str) -> dict[str, Any]:
    text = str(int(value)) if float(value).is_integer() else f"{value:.3f}"
    return {"metric": metric, "timestamp": now_s, "value": text, "tags": {**tags, "host": host}}


# Shared counters -> /api/stats metrics, with the labels kept as tags (pytsd's own figures).
QUERY_FIGURES = (("pytsd_queries_total", "tsd.query.completed"),
                 ("pytsd_queries_refused_total", "tsd.query.refused"),
                 ("pytsd_queries_running", "tsd.query.running"),
                 ("pytsd_cache_lookups_total", "tsd.cache.lookups"),
                 ("pytsd_store_errors_total", "tsd.store.errors"))


def _query_points(found: list[metrics.Sample]) -> list[tuple[str, float | int, dict[str, str]]]:
    points: list[tuple[str, float | int, dict[str, str]]] = []
    for name, metric in QUERY_FIGURES:
        for sample in sorted((s for s in found if s.name == name),
                             key=lambda s: sorted(s.labels.items())):
            tags = {k: v or "none" for k, v in sample.labels.items() if k != "pid"}
            points.append((metric, sample.value, tags or {"type": "all"}))
    return points


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
    found = metrics.samples()
    points: list[tuple[str, float | int, dict[str, str]]] = [
        ("tsd.process.uptime_s", now_s - int(COUNTERS.started_s), {"pid": str(os.getpid())}),
        ("tsd.rpc.received", metrics.total("pytsd_http_requests_total", found),
         {"type": "http"}),
        ("tsd.datapoints.added", metrics.total("pytsd_datapoints_added_total", found),
         {"type": "all"}),
        ("tsd.datapoints.read", metrics.total("pytsd_datapoints_read_total", found),
         {"type": "all"}),
    ]
    for sample in sorted(found, key=lambda s: sorted(s.labels.items())):
        if sample.name == "pytsd_http_requests_total":
            points.append(("tsd.http.requests", sample.value,
                           {"endpoint": sample.labels["route"], "status": sample.labels["status"]}))
    points += _query_points(found)
    for name, metric in (("pytsd_datapoints_added_total", "tsd.worker.datapoints.added"),
                         ("pytsd_http_requests_total", "tsd.worker.rpc.received")):
        for pid, value in sorted(metrics.per_worker(name).items()):
            points.append((metric, value, {"pid": str(pid)}))
    latencies = np.array(COUNTERS.recent_latencies(), dtype=np.float64)
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
                   ("tsd.uid.ids-available", (1 << 8 * uids.width) - 1 - used, tags),
                   # pytsd: names this process assigned, UIDs it burned (races lost)
                   ("tsd.uid.ids-created", uids.ids_created, tags),
                   ("tsd.uid.ids-burned", uids.ids_burned, tags)]
    points += background_points(tsdb, now_s)
    points += _space_points(tsdb, now_s)
    store_stats = able(tsdb.data_table(), STORE_STATS)
    if store_stats is not None:
        points += store_stats.store_stats()
    points += [(metric, value, dict(tags)) for metric, value, tags in tsdb.plugins.stats()]
    return [_point(metric, value, tags, now_s, host) for metric, value, tags in points]


def background_points(tsdb: TSDB, now_s: float) -> list[tuple[str, Any, dict[str, str]]]:
    """pytsd: the fleet's background jobs (compaction sweep; the rollup pass's progress),
    from their leases in storage, so every worker of every node reports the same."""
    points: list[tuple[str, Any, dict[str, str]]] = []
    for report in tsdb.background_stats:
        points += report()
    if coverage_mode(tsdb):
        points += rollup_progress(tsdb, now_s)
    return points


@bp.route("/stats/query", methods=["GET"])
def stats_query() -> Response:
    """OpenTSDB 2.4's running and completed queries (``QueryStats``), of every worker."""
    return jsonify(query_log().snapshot())
