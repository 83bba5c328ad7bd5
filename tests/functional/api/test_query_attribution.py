"""Attribution and admission of /api/query (issue 25): /api/stats/query in OpenTSDB 2.4's
shape with Grafana's headers pulled out, refused and slow queries logged with their dashboard
and cost, and lanes: a cheap query is served while the expensive lane is full, which answers
503 with Retry-After after the queue bound."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.api.query_tracking import attribution
from app.server.cpu_class import lane_class
from app.tsdb.admission import admission_for, run_lanes_in

T0 = 1_700_000_000
GRAFANA = {"X-Grafana-Referer": "http://grafana:3000/d/abc123/web-farm?orgId=1&viewPanel=4",
           "X-Dashboard-Uid": "abc123", "X-Panel-Id": "4", "X-Grafana-Org-Id": "1",
           "X-Grafana-User": "alice"}


def write(client: FlaskClient, hours: int = 1) -> None:
    points = [{"metric": "att.m", "timestamp": T0 + i * 60, "value": i, "tags": {"host": "a"}}
              for i in range(hours * 60)]
    assert client.post("/api/put", data=json.dumps(points),
                       content_type="application/json").status_code == 204


@pytest.fixture
def config_client(make_client: Callable[[dict[str, Any]], FlaskClient]
                  ) -> Callable[..., FlaskClient]:
    def build(**settings: Any) -> FlaskClient:
        client = make_client({"tsd.core.auto_create_metrics": True, **settings})
        write(client)
        return client
    return build


def test_grafana_headers_become_dashboard_panel_org_user() -> None:
    assert attribution(GRAFANA) == {"dashboard": "abc123", "panel": "4", "org": "1",
                                    "grafanaUser": "alice",
                                    "dashboardUrl": GRAFANA["X-Grafana-Referer"]}
    # An older Grafana sends only the page's URL.
    only_referer = attribution({"X-Grafana-Referer": GRAFANA["X-Grafana-Referer"]})
    assert (only_referer["dashboard"], only_referer["panel"], only_referer["org"]) == (
        "abc123", "4", "1")
    assert attribution({})["dashboard"] is None


def test_a_completed_query_in_opentsdbs_shape_with_its_dashboard(
        config_client: Callable[..., FlaskClient]) -> None:
    client = config_client()
    answer = client.get(f"/api/query?start={T0}&end={T0 + 3600}&m=sum:att.m",
                        headers={**GRAFANA, "Authorization": "Bearer secret"})
    assert answer.status_code == 200
    stats = client.get("/api/stats/query").get_json()
    assert list(stats) == ["completed", "running"]
    assert stats["running"] == []
    done = [q for q in stats["completed"] if q.get("dashboard") == "abc123"][-1]
    assert done["httpResponse"] == {"code": 200, "reasonPhrase": "OK"}
    assert done["exception"] == "null"
    assert (done["dashboard"], done["panel"], done["org"], done["user"]) == (
        "abc123", "4", "1", "alice")
    assert done["query"]["queries"][0]["metric"] == "att.m"
    assert done["query"]["start"] == str(T0)
    assert done["requestHeaders"]["X-Grafana-Referer"] == GRAFANA["X-Grafana-Referer"]
    assert "Authorization" not in done["requestHeaders"]
    assert done["stats"]["queryIdx_00"]["dpsRead"] == 60
    assert done["lane"] == "cheap" and done["queryCompletedTimestamp"] >= done[
        "queryStartTimestamp"]


def test_a_refused_query_is_logged_with_its_dashboard_and_cost(
        config_client: Callable[..., FlaskClient], caplog: pytest.LogCaptureFixture) -> None:
    client = config_client(**{"tsd.query.limits.data_points.default": 10})
    caplog.set_level(logging.WARNING, logger="app.query.log")
    answer = client.get(f"/api/query?start={T0}&end={T0 + 3600}&m=sum:att.m", headers=GRAFANA)
    assert answer.status_code == 413
    refused = [r.getMessage() for r in caplog.records if r.name == "app.query.log"]
    assert len(refused) == 1
    assert refused[0].startswith("Query refused (limit, 413): Sorry, you have attempted")
    assert "cost 360 points (cheap lane), dashboard abc123 panel 4 org 1 user alice" in refused[0]
    assert "att.m" in refused[0]
    done = client.get("/api/stats/query").get_json()["completed"][-1]
    assert done["httpResponse"]["code"] == 413 and done["dashboard"] == "abc123"


def test_a_slow_query_is_logged(config_client: Callable[..., FlaskClient],
                                caplog: pytest.LogCaptureFixture) -> None:
    client = config_client(**{"tsd.query.slow_log_ms": 1})  # every query is slow now
    caplog.set_level(logging.WARNING, logger="app.query.log")
    client.get(f"/api/query?start={T0}&end={T0 + 3600}&m=sum:att.m", headers=GRAFANA)
    slow = [r.getMessage() for r in caplog.records if r.name == "app.query.log"]
    assert len(slow) == 1 and slow[0].startswith("Slow query (")
    assert "dashboard abc123 panel 4" in slow[0]


def test_cheap_is_served_while_the_expensive_lane_is_full(
        config_client: Callable[..., FlaskClient]) -> None:
    client = config_client(**{"tsd.query.expensive_points": 10_000,
                              "tsd.query.max_queue_ms": 300})
    admission = admission_for(client.application.extensions["tsdb"])
    expensive = admission.lanes["expensive"]
    assert expensive.enter(0)  # the one expensive slot, as a running expensive query holds it
    try:
        cheap = client.get(f"/api/query?start={T0}&end={T0 + 3600}&m=sum:att.m")
        assert cheap.status_code == 200  # estimated 360 points: the cheap lane
        started = time.perf_counter()
        # 30 days with a wildcard group-by: 30*8640*10 points estimated, the expensive lane.
        refused = client.get(f"/api/query?start={T0}&end={T0 + 30 * 86400}"
                             "&m=sum:att.m{host=*}", headers=GRAFANA)
        waited_s = time.perf_counter() - started
    finally:
        expensive.leave()
    assert refused.status_code == 503
    assert refused.headers["Retry-After"] == "1"
    assert refused.get_json()["error"]["message"] == "Too many queries; retry later"
    assert 0.25 <= waited_s < 3  # the queue bound, not for ever
    done = client.get("/api/stats/query").get_json()["completed"][-1]
    assert (done["httpResponse"]["code"], done["lane"]) == (503, "expensive")


def test_a_dashboard_quota(config_client: Callable[..., FlaskClient]) -> None:
    client = config_client(**{"tsd.query.quota.dashboard": 1, "tsd.server.heavy_threads": 2})
    admission = admission_for(client.application.extensions["tsdb"])
    with admission.admitted(1, None, "abc123"):  # one query of the dashboard runs
        refused = client.get(f"/api/query?start={T0}&end={T0 + 3600}&m=sum:att.m",
                             headers=GRAFANA)
        other = client.get(f"/api/query?start={T0}&end={T0 + 3600}&m=sum:att.m")
    assert refused.status_code == 503 and "tsd.query.quota.dashboard" in refused.get_json()[
        "error"]["details"]
    assert other.status_code == 200


def test_a_query_whose_client_left_stops_waiting_for_its_lane(
        config_client: Callable[..., FlaskClient]) -> None:
    import threading

    client = config_client(**{"tsd.query.expensive_points": 10_000,
                              "tsd.query.max_queue_ms": 5000})
    expensive = admission_for(client.application.extensions["tsdb"]).lanes["expensive"]
    gone = threading.Event()
    gone.set()  # as the server sets it when the connection closes (app/server/http.py)
    assert expensive.enter(0)
    try:
        started = time.perf_counter()
        answer = client.get(f"/api/query?start={T0}&end={T0 + 30 * 86400}&m=sum:att.m{{host=*}}",
                            environ_overrides={"pytsd.client_gone": gone})
        waited_s = time.perf_counter() - started
    finally:
        expensive.leave()
    assert answer.status_code == 499 and waited_s < 2  # not the 5 s queue bound
    done = client.get("/api/stats/query").get_json()["completed"][-1]
    assert done["httpResponse"]["code"] == 499


def test_query_last_takes_a_lane_too(config_client: Callable[..., FlaskClient]) -> None:
    client = config_client(**{"tsd.query.expensive_points": 10_000,
                              "tsd.query.max_queue_ms": 300})
    tsdb = client.application.extensions["tsdb"]
    tsuid = (tsdb.metrics.get_id("att.m") + tsdb.tagk.get_id("host")
             + tsdb.tagv.get_id("a")).hex().upper()
    expensive = admission_for(tsdb).lanes["expensive"]
    assert expensive.enter(0)  # the one expensive slot, as a running expensive query holds it
    try:
        # One series, one hour back: 360 points, the cheap lane.
        cheap = client.get(f"/api/query/last?tsuids={tsuid}&back_scan=1")
        # 100 series over 24 hours: 864,000 points, the expensive lane, full.
        many = ",".join([tsuid] * 100)
        refused = client.get(f"/api/query/last?tsuids={many}&back_scan=24")
    finally:
        expensive.leave()
    assert cheap.status_code == 200
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"


def test_queue_and_deadline_refusals_are_logged_with_their_dashboard(
        config_client: Callable[..., FlaskClient], caplog: pytest.LogCaptureFixture) -> None:
    # The limit (413) is above; the two other refusals of a query: its lane's queue, its deadline.
    client = config_client(**{"tsd.query.expensive_points": 10_000,
                              "tsd.query.max_queue_ms": 50, "tsd.query.timeout": 1})
    write(client, hours=24)
    caplog.set_level(logging.WARNING, logger="app.query.log")
    expensive = admission_for(client.application.extensions["tsdb"]).lanes["expensive"]
    assert expensive.enter(0)
    try:
        queued = client.get(f"/api/query?start={T0}&end={T0 + 30 * 86400}&m=sum:att.m{{host=*}}",
                            headers=GRAFANA)
    finally:
        expensive.leave()
    late = client.get(f"/api/query?start={T0}&end={T0 + 86400}&m=sum:rate:att.m"
                      "&m=max:1m-avg:att.m{host=*}", headers=GRAFANA)
    assert (queued.status_code, late.status_code) == (503, 408)
    refused = [r.getMessage() for r in caplog.records if r.name == "app.query.log"]
    assert [line.split(":")[0] for line in refused] == [
        "Query refused (queue, 503)", "Query refused (timeout, 408)"]
    assert all("dashboard abc123 panel 4 org 1 user alice" in line and "att.m" in line
               for line in refused)


def test_each_query_runs_in_its_lanes_cpu_class(
        config_client: Callable[..., FlaskClient]) -> None:
    """The serving layer's lane scope (app/server/cpu_class.py) wraps each query: an
    expensive one runs as SCHED_BATCH in its thread, a cheap one as it is, and the thread
    is ordinary again after either."""
    client = config_client(**{"tsd.query.expensive_points": 10_000})
    seen: list[tuple[str, int]] = []

    @contextmanager
    def probe(lane: str) -> Iterator[None]:
        with lane_class(lane):
            seen.append((lane, os.sched_getscheduler(0)))
            yield

    run_lanes_in(probe)
    try:
        assert client.get(f"/api/query?start={T0}&end={T0 + 3600}&m=sum:att.m").status_code \
            == 200
        assert client.get(f"/api/query?start={T0}&end={T0 + 30 * 86400}"
                          "&m=sum:att.m{host=*}").status_code == 200
    finally:
        run_lanes_in(None)
    assert seen == [("cheap", os.SCHED_OTHER), ("expensive", os.SCHED_BATCH)]
    assert os.sched_getscheduler(0) == os.SCHED_OTHER
