"""``/api/query/gexp`` end to end on both backends: points put over HTTP, expressions read
back; every expected value below is worked out by hand from the points in ``POINTS``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient

T0 = 1357084800
END = T0 + 120
POINTS = [("g.cpu", "a", [1, 50, 3]), ("g.cpu", "b", [10, -20, 30]),
          ("g.mem", "a", [0.5, 1.5, 2.5]), ("g.mem", "c", [4.0, 5.0, 6.0])]


@pytest.fixture
def loaded(client: FlaskClient) -> FlaskClient:
    body = [{"metric": metric, "timestamp": T0 + 60 * i, "value": value, "tags": {"host": host}}
            for metric, host, values in POINTS for i, value in enumerate(values)]
    response = client.post("/api/put?sync", data=json.dumps(body),
                           content_type="application/json")
    assert response.status_code == 204, response.get_data(as_text=True)
    return client


def gexp(client: FlaskClient, *exps: str, end: int = END, status: int = 200) -> Any:
    response = client.get("/api/query/gexp", query_string=[("start", str(T0)), ("end", str(end))]
                          + [("exp", e) for e in exps])
    assert response.status_code == status, response.get_data(as_text=True)
    return response.get_json()


def dps(*values: Any, step: int = 60, first: int = T0) -> dict[str, Any]:
    return {str(first + step * i): v for i, v in enumerate(values)}


def raw_dps(client: FlaskClient, *exps: str, **kw: Any) -> list[str]:
    """The ``dps`` objects as printed (integers and floats told apart)."""
    response = client.get("/api/query/gexp", query_string=[("start", str(T0)), ("end", str(END))]
                          + [("exp", e) for e in exps])
    text = response.get_data(as_text=True)
    return [part.split("}")[0] for part in text.split('"dps":{')[1:]]


def test_scale_keeps_integers_for_an_integer_factor(loaded: FlaskClient) -> None:
    out = gexp(loaded, "scale(sum:g.cpu{host=*},2)")
    assert [(s["metric"], s["tags"], s["dps"]) for s in out] == [
        ("g.cpu", {"host": "a"}, dps(2, 100, 6)), ("g.cpu", {"host": "b"}, dps(20, -40, 60))]
    assert raw_dps(loaded, "scale(sum:g.cpu{host=a},2)") == [
        '"1357084800":2,"1357084860":100,"1357084920":6']
    assert raw_dps(loaded, "scale(sum:g.cpu{host=a},0.5)") == [
        '"1357084800":0.5,"1357084860":25.0,"1357084920":1.5']


def test_absolute_and_alias(loaded: FlaskClient) -> None:
    assert gexp(loaded, "absolute(sum:g.cpu{host=b})")[0]["dps"] == dps(10, 20, 30)
    out = gexp(loaded, "alias(sum:g.cpu{host=*},cpu.@host)")
    # the alias keeps the sign of values (OpenTSDB 2.4.1 takes their absolute value)
    assert [(s["metric"], s["tags"], s["aggregateTags"], s["dps"]) for s in out] == [
        ("cpu.a", {}, [], dps(1, 50, 3)), ("cpu.b", {}, [], dps(10, -20, 30))]


def test_moving_average_by_count_and_by_time(loaded: FlaskClient) -> None:
    assert gexp(loaded, "movingAverage(sum:g.cpu{host=b},2)")[0]["dps"] == dps(0.0, -5.0, 5.0)
    # a 2-minute window: 0 until a point 2 minutes old exists, then the points newer than that
    assert gexp(loaded, "movingAverage(sum:g.cpu{host=a},'2min')")[0]["dps"] == dps(
        0.0, 0.0, 26.5)


def test_highest_current_and_highest_max_rank_differently(loaded: FlaskClient) -> None:
    assert [s["tags"] for s in gexp(loaded, "highestMax(sum:g.cpu{host=*},1)")] == [
        {"host": "a"}]  # 50 beats 30
    assert [s["tags"] for s in gexp(loaded, "highestCurrent(sum:g.cpu{host=*},1)")] == [
        {"host": "b"}]  # 30 beats 3
    assert len(gexp(loaded, "highestMax(sum:g.cpu{host=*},5)")) == 2


def test_series_arithmetic_joins_on_tags_with_zero_fill(loaded: FlaskClient) -> None:
    out = gexp(loaded, "sumSeries(sum:g.cpu{host=*},sum:g.mem{host=*})")
    assert [(s["metric"], s["tags"], s["annotations"], s["dps"]) for s in out] == [
        ("g.cpu", {"host": "a"}, [], dps(1.5, 51.5, 5.5)),
        ("g.cpu", {"host": "b"}, [], dps(10.0, -20.0, 30.0)),
        ("g.mem", {}, [], dps(4.0, 5.0, 6.0))]  # the first argument has no host=c
    assert gexp(loaded, "diffSeries(sum:g.cpu{host=a},sum:g.mem{host=a})")[0]["dps"] == dps(
        0.5, 48.5, 0.5)
    assert gexp(loaded, "multiply(sum:g.cpu{host=a},sum:g.mem{host=a})")[0]["dps"] == dps(
        0.5, 75.0, 7.5)
    out = gexp(loaded, "divideSeries(sum:g.mem{host=*},sum:g.cpu{host=*})")
    assert [s["dps"] for s in out] == [dps(0.5, 0.03, 2.5 / 3), dps(0.0, -0.0, 0.0),
                                       dps(0.0, 0.0, 0.0)]  # dividing by zero gives 0


def test_time_shift_moves_points_later(loaded: FlaskClient) -> None:
    out = gexp(loaded, "timeShift(sum:g.cpu{host=a},'1min')")
    assert out[0]["dps"] == dps(1, 50, first=T0 + 60)  # the third point moved past the end


def test_nested_expressions_and_several_exp(loaded: FlaskClient) -> None:
    out = gexp(loaded, "scale(sumSeries(sum:g.cpu{host=a},sum:g.cpu{host=b}),10)",
               "absolute(sum:g.cpu{host=b})")
    assert [(s["tags"], s["dps"]) for s in out] == [
        ({"host": "a"}, dps(10.0, 500.0, 30.0)),
        ({}, dps(100.0, -200.0, 300.0)),  # the first argument has no host=b
        ({"host": "b"}, dps(10, 20, 30))]
    assert [s.get("annotations") for s in out] == [[], [], None]


def test_plain_m_queries_are_not_answered(loaded: FlaskClient) -> None:
    response = loaded.get(f"/api/query/gexp?start={T0}&m=sum:g.cpu")
    assert response.status_code == 200 and response.get_json() == []


@pytest.mark.parametrize(("exp", "message"), [
    ("foo(sum:g.cpu)", "Function foo has not been implemented"),
    ("scale(sum:g.cpu,2", "Failed to parse scale(sum:g.cpu,2"),
    ("scale(sum:g.cpu~,2)", "Failed to parse scale(sum:g.cpu~,2)"),
    ("sum:g.cpu", "Failed to parse sum:g.cpu"),
    ("scale(sum:g.cpu)", "Missing scaling factor"),
    ("scale(sum:g.cpu,x)", "Unparseable scale factor value: 0.0"),
    ("scale(2,sum:g.cpu)", "Unknown parameter type: null in tree: scale(g.cpu)"),
    ("sumSeries(sum:g.cpu)", "Must have 2 to 26 series, got 1 instead"),
    ("sumSeries(sum:g.nope,sum:g.cpu)", "No such name for 'metrics': 'g.nope'"),
    ("movingAverage(sum:g.cpu,'5y')", "Unknown time unit=y in window='5y'"),
    ("highestMax(sum:g.cpu,0)", "Top n value must be greater than zero: 0"),
    ("timeShift(sum:g.cpu,'5y')", "unknown time unit=y'"),
    ("alias(sum:g.cpu)", "Missing the alias"),
])
def test_errors(loaded: FlaskClient, exp: str, message: str) -> None:
    assert gexp(loaded, exp, status=400)["error"]["message"] == message


def test_missing_start_no_query_and_post(loaded: FlaskClient) -> None:
    assert loaded.get("/api/query/gexp?exp=absolute(sum:g.cpu)").status_code == 400
    out = loaded.get(f"/api/query/gexp?start={T0}").get_json()
    assert out["error"]["message"] == "Missing sub queries"
    response = loaded.post("/api/query/gexp", data="{}", content_type="application/json")
    assert response.status_code == 400
    assert "GET" in response.get_json()["error"]["details"]


def test_query_limits_apply_to_the_leaves(make_client: Any) -> None:
    client = make_client({"tsd.query.limits.data_points.default": 2})
    body = [{"metric": "g.cpu", "timestamp": T0 + 60 * i, "value": i, "tags": {"host": "a"}}
            for i in range(5)]
    put = client.post("/api/put?sync", data=json.dumps(body), content_type="application/json")
    assert put.status_code == 204
    out = gexp(client, "absolute(sum:g.cpu{host=a})", end=T0 + 600, status=413)
    assert "data points" in out["error"]["message"]
