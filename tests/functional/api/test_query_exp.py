"""``/api/query/exp`` end to end through Flask's client, on the embedded store and on HBase.

Expected answers are worked out by hand from the few points written below (OpenTSDB 2.4.1's
shape; the differential test compares generated queries with the real TSD).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

T0 = 1357084800
MS = 1000
POINTS = [("m.a", "web01", 0, 1), ("m.a", "web01", 60, 2), ("m.a", "web01", 120, 3),
          ("m.a", "web02", 60, 10), ("m.b", "web01", 0, 100), ("m.b", "web01", 120, 300)]
TIME = {"start": str(T0), "end": str(T0 + 600), "aggregator": "sum"}
FILTERS = [{"id": "f1", "tags": [{"type": "wildcard", "tagk": "host", "filter": "*",
                                  "groupBy": True}]}]
METRICS = [{"id": "a", "metric": "m.a", "filter": "f1"},
           {"id": "b", "metric": "m.b", "filter": "f1"}]


def load(client: FlaskClient) -> FlaskClient:
    points = [{"metric": m, "timestamp": T0 + dt, "value": v, "tags": {"host": h}}
              for m, h, dt, v in POINTS]
    assert client.post("/api/put", data=json.dumps(points)).status_code == 204
    return client


@pytest.fixture
def loaded(client: FlaskClient) -> FlaskClient:
    return load(client)


def ask(client: FlaskClient, body: Any) -> tuple[int, Any]:
    response = client.post("/api/query/exp", data=json.dumps(body),
                           content_type="application/json")
    return response.status_code, response.get_json()


def test_union_expression_answer(loaded: FlaskClient) -> None:
    status, body = ask(loaded, {"time": TIME, "filters": FILTERS, "metrics": METRICS,
                                "expressions": [{"id": "e", "expr": "a + b"}]})
    assert status == 200
    (output,) = body["outputs"]
    # web01: a = 1, 2, 3 and b = 100, (none: 0), 300; web02: a = (0), 10, (0), no b (0)
    assert output["dps"] == [[T0 * MS, 101.0, 0.0], [(T0 + 60) * MS, 2.0, 10.0],
                             [(T0 + 120) * MS, 303.0, 0.0]]
    assert output["dpsMeta"] == {"firstTimestamp": T0 * MS, "lastTimestamp": (T0 + 120) * MS,
                                 "setCount": 3, "series": 2}
    assert output["meta"] == [
        {"index": 0, "metrics": ["timestamp"]},
        {"index": 1, "metrics": ["m.a", "m.b"], "commonTags": {"host": "web01"},
         "aggregatedTags": []},
        # 2.4 names the first series' metrics for every series
        {"index": 2, "metrics": ["m.a", "m.b"], "commonTags": {"host": "web02"},
         "aggregatedTags": []}]
    assert body["query"]["expressions"] == [
        {"id": "e", "expr": "a + b", "fillPolicy": None,
         "join": {"operator": "union", "useQueryTags": False, "includeAggTags": True}}]
    assert list(body["query"]) == ["name", "time", "filters", "metrics", "expressions",
                                   "outputs"]


def test_intersection_alias_and_metric_output(loaded: FlaskClient) -> None:
    status, body = ask(loaded, {
        "time": TIME, "filters": FILTERS,
        "metrics": [METRICS[0], {**METRICS[1], "fillPolicy": {"policy": "scalar", "value": 5}}],
        "expressions": [{"id": "e", "expr": "a * b", "join": {"operator": "intersection"}}],
        "outputs": [{"id": "e", "alias": "product"}, {"id": "b"}, {"id": "nothing"}]})
    assert status == 200
    product, b = body["outputs"]
    assert (product["id"], product["alias"]) == ("e", "product")
    # web01 only; b reads its fill, 5, at T0+60
    assert product["dps"] == [[T0 * MS, 100.0], [(T0 + 60) * MS, 10.0],
                              [(T0 + 120) * MS, 900.0]]
    assert "alias" not in b and b["dps"] == [[T0 * MS, 100.0], [(T0 + 120) * MS, 300.0]]
    assert b["meta"][1] == {"index": 1, "metrics": ["m.b"], "commonTags": {"host": "web01"},
                            "aggregatedTags": []}


def test_expression_output_is_cut_to_the_range_but_a_metric_output_is_not(
        loaded: FlaskClient) -> None:
    span = {**TIME, "start": str(T0 + 30), "end": str(T0 + 90)}
    # no filter: one series, the sum over hosts: 1, 12, 3 at T0, T0+60, T0+120
    status, body = ask(loaded, {"time": span, "metrics": [{"id": "a", "metric": "m.a"}],
                                "expressions": [{"id": "e", "expr": "a > 5"}],
                                "outputs": [{"id": "e"}, {"id": "a"}]})
    assert status == 200
    e, a = body["outputs"]
    # one step inside: lastTimestamp stays 0 until a second one is written (2.4's counting)
    assert e["dps"] == [[(T0 + 60) * MS, 1.0]]
    assert e["dpsMeta"] == {"firstTimestamp": (T0 + 60) * MS, "lastTimestamp": 0,
                            "setCount": 1, "series": 1}
    assert a["dps"] == [[T0 * MS, 1.0], [(T0 + 60) * MS, 12.0], [(T0 + 120) * MS, 3.0]]


@pytest.mark.parametrize("body, message", [
    ({}, "missing time"),
    ({"time": TIME, "metrics": [{"id": "a", "metric": "no.such"}]},
     "No such name for 'metrics': 'no.such'"),
    ({"time": TIME, "metrics": METRICS[:1], "filters": FILTERS,
      "expressions": [{"id": "e", "expr": "a > 1 ? 1 : 0"}]},
     "Expression returned a result of type: java.lang.Integer for ExpressionIterator(id=e, "
     "expression=\"a > 1 ? 1 : 0"),
    ({"time": TIME, "metrics": METRICS[:1], "expressions": [{"id": "e", "expr": "a +"}]},
     "parsing error in 'a +' at column 4: unexpected 'end of expression'"),
    ("[1", "Unable to parse the given JSON"),
])
def test_bad_requests_are_400(loaded: FlaskClient, body: Any, message: str) -> None:
    data = body if isinstance(body, str) else json.dumps(body)
    response = loaded.post("/api/query/exp", data=data, content_type="application/json")
    assert response.status_code == 400
    assert response.get_json()["error"]["message"] == message


def test_methods(loaded: FlaskClient) -> None:
    response = loaded.get("/api/query/exp")
    assert response.status_code == 400
    assert response.get_json()["error"]["message"] == "Incoming data was null or empty"
    assert loaded.put("/api/query/exp", data="{}").status_code == 405
    assert loaded.delete("/api/query/exp").status_code == 400  # deletes are off by default


def test_query_limits_apply(make_client: Callable[..., FlaskClient]) -> None:
    client = load(make_client({"tsd.query.limits.data_points.default": 2}))
    status, body = ask(client, {"time": TIME, "metrics": [{"id": "a", "metric": "m.a"}],
                                "expressions": [{"id": "e", "expr": "a * 2"}]})
    assert status == 413, body
    assert "limit of 2 data points" in body["error"]["message"]
