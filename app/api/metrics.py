"""``/metrics``: pytsd's own metrics in Prometheus' text format, summed over the server's
workers (``app/observe/metrics.py``). Not an OpenTSDB endpoint; it lives beside ``/api``."""

from __future__ import annotations

import time

from flask import Response, current_app
from flask.blueprints import BlueprintSetupState
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest

from app.api import bp
from app.api.stats import background_points, sync_cache_counters
from app.observe import metrics
from app.tsdb import TSDB

LAG_SUFFIX = ".lag_s"


def prometheus_metrics() -> Response:
    tsdb = current_app.extensions["tsdb"]
    sync_cache_counters(tsdb)
    return Response(metrics.exposition() + background_lags(tsdb),
                    content_type=CONTENT_TYPE_LATEST)


def background_lags(tsdb: TSDB) -> bytes:
    """``pytsd_background_lag_seconds`` per job, read from the jobs' leases in storage at each
    scrape (the same value on every worker and node, so not a per-worker sum)."""
    registry = CollectorRegistry()
    lag = Gauge("pytsd_background_lag_seconds", "How far a background job of the fleet "
                "(compaction sweep, rollup pass) is behind its horizon", ["job"],
                registry=registry)
    for metric, value, _ in background_points(tsdb, time.time()):
        if metric.endswith(LAG_SUFFIX):
            lag.labels(job=metric.removeprefix("tsd.").removesuffix(LAG_SUFFIX)).set(value)
    return generate_latest(registry)


@bp.record_once
def _register(state: BlueprintSetupState) -> None:
    # At the root, not under /api: where Prometheus looks by default.
    state.app.add_url_rule("/metrics", "metrics", prometheus_metrics, methods=["GET"])
