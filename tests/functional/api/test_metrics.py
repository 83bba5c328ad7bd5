"""``/metrics`` in one process (Flask's test client): Prometheus' text format, counting what
the API did. (tests/e2e/test_observe_server.py sums them across real workers.)"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families


def scrape(client: FlaskClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.get_data(as_text=True))
            for s in family.samples}


def test_metrics_count_points_and_requests(client: FlaskClient) -> None:
    before = scrape(client)
    points = [{"metric": "m.metrics", "timestamp": 1_700_000_000 + i, "value": i,
               "tags": {"host": "a"}} for i in range(3)]
    assert client.post("/api/put", data=json.dumps(points),
                       content_type="application/json").status_code == 204
    after = scrape(client)
    added = ("pytsd_datapoints_added_total", ())
    assert after[added] - before.get(added, 0.0) == 3
    put = ("pytsd_http_requests_total", (("route", "/api/put"), ("status", "204")))
    assert after[put] - before.get(put, 0.0) == 1


def test_dashboard_labels_are_bounded() -> None:
    from app.observe.metrics import dashboard_label

    assert dashboard_label("farm42") == "farm42"
    assert dashboard_label(None) == ""
    assert dashboard_label("x" * 41) == "other"  # Grafana's uids are at most 40 characters
    assert dashboard_label("a b<script>") == "other"


T0 = 1_700_000_000


def delta(before: dict[tuple[str, tuple[tuple[str, str], ...]], float],
          after: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_metrics_count_queries_by_lane_and_outcome_points_read_and_cache_lookups(
        make_client: Callable[[dict[str, Any]], FlaskClient], settled: None) -> None:
    client = make_client({"tsd.core.auto_create_metrics": True,
                          "tsd.query.limits.data_points.default": 150})
    points = [{"metric": "m.q", "timestamp": T0 + i * 60, "value": i, "tags": {"host": "a"}}
              for i in range(240)]  # four hours
    assert client.post("/api/put", data=json.dumps(points),
                       content_type="application/json").status_code == 204
    before = scrape(client)
    hour = f"start={T0}&end={T0 + 3599}"
    assert client.get(f"/api/query?{hour}&m=sum:m.q").status_code == 200
    assert client.get(f"/api/query?{hour}&m=sum:m.q").status_code == 200
    # Four hours, 240 points: over the 150-point limit (413), from a Grafana dashboard.
    assert client.get(f"/api/query?start={T0}&end={T0 + 4 * 3600}&m=sum:m.q",
                      headers={"X-Dashboard-Uid": "dash-9"}).status_code == 413
    after = scrape(client)
    assert delta(before, after, "pytsd_queries_total", lane="cheap", outcome="ok") == 2
    assert delta(before, after, "pytsd_queries_total", lane="cheap", outcome="limit") == 1
    assert delta(before, after, "pytsd_queries_refused_total", reason="limit",
                 dashboard="dash-9") == 1
    assert delta(before, after, "pytsd_query_duration_seconds_count", lane="cheap") == 3
    assert delta(before, after, "pytsd_datapoints_read_total") >= 120  # 60 per good query
    hour_cache = [delta(before, after, "pytsd_cache_lookups_total", cache="hour", result=r)
                  for r in ("hit", "miss")]
    # The hour's row (settled: closed and old enough) is missed once, then kept.
    assert hour_cache[0] >= 1 and hour_cache[1] >= 1, hour_cache


def test_metrics_count_store_errors() -> None:
    from contextlib import closing

    from app.config import load_config
    from app.tsdb import TSDB
    from tests.conftest import app_over

    with closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    tsdb = TSDB(load_config({"tsd.storage": f"hbase://127.0.0.1:{port}",
                             "tsd.storage.hbase.timeout_ms": 300}, environ={}))
    client = app_over(tsdb).test_client()
    before = scrape(client)
    for _ in range(3):
        assert client.get("/api/suggest?type=metrics").status_code == 503
    assert delta(before, scrape(client), "pytsd_store_errors_total") == 3
