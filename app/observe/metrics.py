"""pytsd's own metrics, one set per server whichever worker counts or answers.

Under gunicorn every worker writes its counters to files in a directory the arbiter makes
for this server (``PROMETHEUS_MULTIPROC_DIR``, set by ``app/server/gunicorn_conf.py`` before
any worker starts): prometheus_client's multiprocess mode. ``/metrics`` and ``/api/stats``
read them all, so both answer the server's totals, whichever worker takes the request. A
process without that directory (tests, ``pytsd`` commands) counts in memory.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MAX_LABEL_CHARS = 120  # dashboards and users become labels: a hostile header stays short

HTTP_REQUESTS = Counter("pytsd_http_requests", "HTTP requests answered by the app",
                        ["route", "status"])
HTTP_LATENCY = Histogram("pytsd_http_request_duration_seconds",
                         "Time from a request's arrival in the app to its answer",
                         ["route"], buckets=LATENCY_BUCKETS_S)
SERVER_REFUSED = Counter("pytsd_server_refused",
                         "HTTP requests the server answered itself (400, 408, 413, 503...)",
                         ["status"])
QUERIES = Counter("pytsd_queries", "Queries by admission lane and outcome",
                  ["lane", "outcome"])
QUERY_LATENCY = Histogram("pytsd_query_duration_seconds", "Query run time by lane", ["lane"],
                          buckets=LATENCY_BUCKETS_S)
QUEUE_WAIT = Histogram("pytsd_query_queue_seconds", "Time a query waited for its lane",
                       ["lane"], buckets=LATENCY_BUCKETS_S)
REFUSED = Counter("pytsd_queries_refused", "Queries refused (limit, timeout, queue), by "
                  "the dashboard that sent them", ["reason", "dashboard"])
RUNNING = Gauge("pytsd_queries_running", "Queries running now, by lane", ["lane"],
                multiprocess_mode="livesum")
POINTS_READ = Counter("pytsd_datapoints_read", "Data points decoded by queries")
POINTS_WRITTEN = Counter("pytsd_datapoints_added", "Data points written (HTTP and telnet)")
CACHE_LOOKUPS = Counter("pytsd_cache_lookups", "Cache lookups by cache and result",
                        ["cache", "result"])
STORE_ERRORS = Counter("pytsd_store_errors", "Requests that failed in the store")


def label(text: str | None) -> str:
    return (text or "")[:MAX_LABEL_CHARS]


DASHBOARD_UID = re.compile(r"[A-Za-z0-9_-]{1,40}")
MAX_DASHBOARDS = 1000  # distinct dashboard labels per process; the rest count as "other"
_dashboards: set[str] = set()


def dashboard_label(uid: str | None) -> str:
    """A Grafana dashboard uid as a label, bounded: the header comes from any client, and
    every distinct label is a series in every worker's files."""
    if not uid:
        return ""
    if not DASHBOARD_UID.fullmatch(uid):
        return "other"
    if uid not in _dashboards:
        if len(_dashboards) >= MAX_DASHBOARDS:
            return "other"
        _dashboards.add(uid)
    return uid


def multiproc_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


class WorkersCollector(MultiProcessCollector):
    """Every worker's metric files, less those still empty.

    A process creates its file before it sizes it. A read in between (a worker booting while
    another answers ``/api/stats``) failed the whole read with ``struct.error``; a process
    killed in between left the empty file for good (prometheus/client_python#1199). A file
    never shrinks back to empty, so one found non-empty reads whole.
    """

    def collect(self) -> Iterable[Metric]:
        files = [name for name in glob.glob(os.path.join(self._path, "*.db"))
                 if os.path.getsize(name) > 0]
        return self.merge(files, accumulate=True)


def registry() -> CollectorRegistry:
    """What to read: every worker's files, or this process's memory."""
    path = multiproc_dir()
    if path is None:
        return REGISTRY
    merged = CollectorRegistry()
    WorkersCollector(merged, path=path)
    return merged


def exposition() -> bytes:
    """The server's metrics in Prometheus' text format."""
    return generate_latest(registry())


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def samples(source: Collector | None = None) -> list[Sample]:
    collector = source if source is not None else registry()
    return [Sample(s.name, dict(s.labels), float(s.value))
            for family in collector.collect() for s in family.samples]


def total(name: str, found: Iterable[Sample] | None = None, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(s.value for s in (found if found is not None else samples())
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


class _Files:
    """The counter files of one worker, as a collector (a per-pid breakdown)."""

    def __init__(self, files: list[str]) -> None:
        self.files = files

    def collect(self) -> Iterable[object]:
        return MultiProcessCollector.merge(self.files, accumulate=True)


def per_worker(name: str) -> dict[int, float]:
    """``name``'s total per process that counted some (empty without the shared directory;
    a helper process that imported the counters but never counted is left out)."""
    path = multiproc_dir()
    if path is None:
        return {}
    found: dict[int, float] = {}
    for file in glob.glob(os.path.join(path, "counter_*.db")):
        pid = int(os.path.basename(file)[len("counter_"):-len(".db")])
        value = total(name, samples(_Files([file])))  # type: ignore[arg-type]
        if value:
            found[pid] = value
    return found


def worker_exited(pid: int) -> None:
    """For the arbiter: a dead worker's live gauges go; its counters stay in the totals."""
    if multiproc_dir() is not None:
        mark_process_dead(pid)
