"""pytsd's own figures written into itself (off by default), and the provisioned "pytsd
itself" Grafana dashboard reading only metrics and tags that writer produces (issue 25)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient

from app.api.put import writer_of
from app.api.self_stats import stats_points, write_self_stats

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = json.loads((ROOT / "grafana/dashboards/pytsd-self.json").read_text("utf-8"))
T0 = 1_700_000_000


def busy_client(make_client: Callable[[dict[str, Any]], FlaskClient]) -> FlaskClient:
    client = make_client({"tsd.core.auto_create_metrics": True,
                          "tsd.query.limits.data_points.default": 5})
    points = [{"metric": metric, "timestamp": T0 + i, "value": i, "tags": {"host": "a"}}
              for metric, count in (("self.m", 10), ("self.small", 3)) for i in range(count)]
    assert client.post("/api/put", data=json.dumps(points),
                       content_type="application/json").status_code == 204
    grafana = {"X-Dashboard-Uid": "ops-1"}
    assert client.get(f"/api/query?start={T0}&end={T0 + 3}&m=sum:self.small").status_code == 200
    assert client.get(f"/api/query?start={T0}&end={T0 + 60}&m=sum:self.m",
                      headers=grafana).status_code == 413  # refused: more than 5 points
    return client


def test_the_self_dashboard_reads_what_the_writer_writes(
        make_client: Callable[[dict[str, Any]], FlaskClient]) -> None:
    client = busy_client(make_client)
    written: dict[str, set[str]] = {}
    for point in stats_points(client.application.extensions["tsdb"]):
        written.setdefault(point.metric, set()).update(point.tags)
    targets = [t for panel in DASHBOARD["panels"] for t in panel["targets"]]
    assert DASHBOARD["uid"] == "pytsd-self" and len(targets) >= 10
    for target in targets:
        assert target["datasource"] == {"type": "opentsdb", "uid": "pytsd"}
        assert target["metric"] in written, target["metric"]
        for grouped in target["filters"]:
            assert grouped["tagk"] in written[target["metric"]], (target["metric"], grouped)
    assert {"dashboard", "reason"} <= written["tsd.query.refused"]


def test_the_writer_stores_the_servers_figures_readable_by_query(
        make_client: Callable[[dict[str, Any]], FlaskClient]) -> None:
    client = busy_client(make_client)
    tsdb = client.application.extensions["tsdb"]
    assert write_self_stats(tsdb, writer_of(client.application.extensions)) is None
    answer = client.get("/api/query?start=1h-ago&m=max:tsd.query.refused{dashboard=ops-1}")
    assert answer.status_code == 200, answer.get_json()
    [series] = answer.get_json()
    assert list(series["dps"].values())[-1] >= 1
    added = client.get("/api/query?start=1h-ago&m=max:tsd.datapoints.added").get_json()
    assert list(added[0]["dps"].values())[-1] >= 13
