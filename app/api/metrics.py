"""``/metrics``: pytsd's own metrics in Prometheus' text format, summed over the server's
workers (``app/observe/metrics.py``). Not an OpenTSDB endpoint; it lives beside ``/api``."""

from __future__ import annotations

from flask import Response, current_app
from flask.blueprints import BlueprintSetupState
from prometheus_client import CONTENT_TYPE_LATEST

from app.api import bp
from app.api.stats import sync_cache_counters
from app.observe import metrics


def prometheus_metrics() -> Response:
    sync_cache_counters(current_app.extensions["tsdb"])
    return Response(metrics.exposition(), content_type=CONTENT_TYPE_LATEST)


@bp.record_once
def _register(state: BlueprintSetupState) -> None:
    # At the root, not under /api: where Prometheus looks by default.
    state.app.add_url_rule("/metrics", "metrics", prometheus_metrics, methods=["GET"])
