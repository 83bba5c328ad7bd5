"""``/metrics`` in one process (Flask's test client): Prometheus' text format, counting what
the API did. (tests/e2e/test_observe_server.py sums them across real workers.)"""

from __future__ import annotations

import json

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
