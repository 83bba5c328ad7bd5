"""Every read endpoint under one budget (issue 24): each request of the issue's table answers
within ``tsd.query.timeout`` + 1 s with a JSON 4xx or its correct 200, on every backend.

The timeout is small here (1 s) so a request the budget failed to stop would show. A budget
the serving layer cancelled (``environ["pytsd.budget"].cancel()``) stops every endpoint.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from app.query.budget import ENVIRON_KEY, Budget, QueryCancelledError
from app.tsdb import TSDB
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import app_over, drop_tables, make_tsdb

TIMEOUT_MS = 1000
T0 = 1_600_000_000  # 50 points of budget.m{host=a}, every 10 s from here
POINTS = 50
SETTINGS = {"tsd.query.timeout": TIMEOUT_MS, "tsd.query.limits.emitted_points": 10_000}


@pytest.fixture
def tsdb_with_data(tsd_config: dict[str, Any]) -> Iterator[TSDB]:
    tsdb = make_tsdb({**tsd_config, **SETTINGS})
    now_s = int(time.time())
    points = [DataPoint("budget.m", T0 + 10 * i, i, {"host": "a"}) for i in range(POINTS)]
    points.append(DataPoint("budget.one", now_s - 60, 7, {"host": "a"}))
    assert not any(PointWriter(tsdb).write(points))
    yield tsdb
    drop_tables(tsdb)


@pytest.fixture
def client(tsdb_with_data: TSDB) -> FlaskClient:
    return app_over(tsdb_with_data).test_client()


def timed(call: Callable[[], TestResponse]) -> tuple[TestResponse, float]:
    started = time.perf_counter()
    response = call()
    return response, time.perf_counter() - started


def error_of(response: TestResponse, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)[:500]
    body = json.loads(response.get_data(as_text=True))
    assert set(body) == {"error"} and body["error"]["code"] == status
    return dict(body["error"])


def within_budget(elapsed_s: float) -> None:
    assert elapsed_s < TIMEOUT_MS / 1000 + 1


# --- the table ----------------------------------------------------------------------


def test_an_expression_chain_is_refused_before_it_is_evaluated(client: FlaskClient) -> None:
    # e0=a, e{i}=e{i-1}+a: 1,000 expressions of 50 points each (50,000 > 10,000 emitted).
    expressions = [{"id": "e0", "expr": "a"}] + [
        {"id": f"e{i}", "expr": f"e{i - 1} + a"} for i in range(1, 1000)]
    response, elapsed_s = timed(lambda: client.post("/api/query/exp", json={
        "time": {"start": 0, "aggregator": "sum"},
        "metrics": [{"id": "a", "metric": "budget.m"}], "expressions": expressions}))
    error = error_of(response, 413)
    assert error["message"].startswith(
        "Sorry, you have attempted to emit more than our limit of 10000 data points (the "
        "expressions would emit up to 50000).")
    within_budget(elapsed_s)


def test_a_huge_expression_is_refused_before_it_is_parsed(client: FlaskClient) -> None:
    response, elapsed_s = timed(lambda: client.post("/api/query/exp", json={
        "time": {"start": 0, "aggregator": "sum"},
        "metrics": [{"id": "a", "metric": "budget.m"}],
        "expressions": [{"id": "e", "expr": "a+" * 500_000 + "a"}]}))
    error = error_of(response, 400)
    assert error["message"] == "Too many characters in an expression: 1000001, more than 4096"
    assert error["details"] == "The bound is tsd.query.limits.expression_chars"
    within_budget(elapsed_s)


def test_expression_nodes_are_bounded(make_client: Callable[[dict[str, Any]], FlaskClient]
                                      ) -> None:
    client = make_client({"tsd.query.limits.expression_nodes": 10})
    response = client.post("/api/query/exp", json={
        "time": {"start": 0, "aggregator": "sum"},
        "metrics": [{"id": "a", "metric": "sys.cpu"}],
        "expressions": [{"id": "e", "expr": "a + a + a"}, {"id": "f", "expr": "e * a + a"}]})
    # "a + a + a" is 5 nodes, "e * a + a" 5: 10 pass; one more is refused.
    assert "No such name for 'metrics'" in error_of(response, 400)["message"]
    response = client.post("/api/query/exp", json={
        "time": {"start": 0, "aggregator": "sum"},
        "metrics": [{"id": "a", "metric": "sys.cpu"}],
        "expressions": [{"id": "e", "expr": "a + a + a"}, {"id": "f", "expr": "e * a + -a"}]})
    assert error_of(response, 400)["message"] == (
        "Too many expression nodes: 11, more than 10")


def test_a_second_fill_over_a_long_range_answers_with_its_points(client: FlaskClient) -> None:
    response, elapsed_s = timed(lambda: client.post("/api/query/exp", json={
        "time": {"start": 0, "aggregator": "sum",
                 "downsampler": {"interval": "1s", "aggregator": "avg",
                                 "fillPolicy": {"policy": "zero"}}},
        "metrics": [{"id": "a", "metric": "budget.m", "fillPolicy": {"policy": "zero"}}],
        "expressions": [{"id": "e", "expr": "a * 2"}]}))
    assert response.status_code == 200, response.get_data(as_text=True)[:300]
    [output] = response.get_json()["outputs"]
    # 2.4 does not pass the fill on to the sub-query: one bucket per stored point.
    assert [row[0] for row in output["dps"]] == [(T0 + 10 * i) * 1000 for i in range(POINTS)]
    assert [row[1] for row in output["dps"]] == [2.0 * i for i in range(POINTS)]
    within_budget(elapsed_s)


def test_query_last_with_too_many_tsuids_is_refused(client: FlaskClient) -> None:
    tsuids = [f"000001000001{i:06X}" for i in range(100_000)]
    response, elapsed_s = timed(lambda: client.post("/api/query/last", json={
        "queries": [{"tsuids": tsuids}]}))
    assert error_of(response, 400)["message"] == (
        "Too many tsuids in a sub query: 100000, more than 10000")
    within_budget(elapsed_s)


def test_query_last_stops_at_the_deadline(
        make_client: Callable[[dict[str, Any]], FlaskClient]) -> None:
    # 10,000 tsuids (the bound) x 25 hours of row keys: far more than 20 ms of gets.
    client = make_client({"tsd.query.timeout": 20})
    tsuids = [f"000001000001{i:06X}" for i in range(10_000)]
    response, elapsed_s = timed(lambda: client.post("/api/query/last", json={
        "queries": [{"tsuids": tsuids}], "backScan": 24}))
    assert error_of(response, 408)["message"].startswith("Query timeout exceeded after ")
    assert elapsed_s < 0.02 + 1


def test_too_many_percentiles_are_refused(client: FlaskClient) -> None:
    response, elapsed_s = timed(lambda: client.post("/api/query", json={
        "start": 0, "queries": [{"aggregator": "sum", "metric": "budget.m",
                                 "percentiles": [50.0] * 100_000}]}))
    assert error_of(response, 400)["message"] == (
        "Too many percentiles: 100000, more than 100")
    within_budget(elapsed_s)


def test_a_long_regexp_is_refused(client: FlaskClient) -> None:
    pattern = "(" * 5000 + "a" + ")" * 5000
    response, elapsed_s = timed(lambda: client.post("/api/query", json={
        "start": 0, "queries": [{"aggregator": "sum", "metric": "budget.m", "filters": [
            {"type": "regexp", "tagk": "host", "filter": pattern}]}]}))
    assert error_of(response, 400)["message"] == (
        "Too many characters in a regexp filter: 10001, more than 1024")
    within_budget(elapsed_s)


def test_a_regexp_with_a_large_program_is_refused(client: FlaskClient) -> None:
    # 13 characters, 2,003 RE2 instructions: each search walks them.
    response = client.post("/api/query", json={
        "start": 0, "queries": [{"aggregator": "sum", "metric": "budget.m", "filters": [
            {"type": "regexp", "tagk": "host", "filter": "[a-z]{1,1000}"}]}]})
    assert error_of(response, 400)["message"] == (
        "Too many RE2 instructions in a regexp filter: 2003, more than 2000")


def test_nested_groups_within_the_bounds_match_quickly(client: FlaskClient) -> None:
    # 400 nested groups: each match took ~40 ms with capture groups; without, microseconds.
    pattern = "(" * 400 + "a" + ")" * 400
    response, elapsed_s = timed(lambda: client.post("/api/query", json={
        "start": 0, "queries": [{"aggregator": "sum", "metric": "budget.m", "filters": [
            {"type": "regexp", "tagk": "host", "filter": pattern, "groupBy": True}]}]}))
    assert response.status_code == 200
    assert [s["tags"] for s in response.get_json()] == [{"host": "a"}]
    within_budget(elapsed_s)


def test_a_long_wildcard_is_refused(client: FlaskClient) -> None:
    response = client.post("/api/query", json={
        "start": 0, "queries": [{"aggregator": "sum", "metric": "budget.m", "filters": [
            {"type": "wildcard", "tagk": "host", "filter": "*" * 200_000 + "a"}]}]})
    assert error_of(response, 400)["message"] == (
        "Too many characters in a wildcard filter: 200001, more than 1024")


@pytest.mark.parametrize("body", [
    {"aggregator": "sum", "tsuids": ["{tsuid}"]},
    {"aggregator": "sum", "metric": "budget.one", "explicitTags": True,
     "filters": [{"type": "literal_or", "tagk": "host", "filter": "a", "groupBy": False}]},
], ids=["tsuids", "explicitTags"])
def test_one_point_since_2013_by_exact_series_answers_at_once(
        client: FlaskClient, tsdb_with_data: TSDB, body: dict[str, Any]) -> None:
    # 13 years of hours are 115,000 row keys: a scan of the metric reads one row instead.
    tsuid = (tsdb_with_data.metrics.get_id("budget.one") + tsdb_with_data.tagk.get_id("host")
             + tsdb_with_data.tagv.get_id("a")).hex().upper()
    sub = json.loads(json.dumps(body).replace("{tsuid}", tsuid))
    response, elapsed_s = timed(lambda: client.post("/api/query", json={
        "start": 1356998400, "queries": [sub]}))
    assert response.status_code == 200, response.get_data(as_text=True)[:300]
    [series] = response.get_json()
    assert list(series["dps"].values()) == [7]
    assert elapsed_s < 1.0


@pytest.mark.parametrize("path", [
    "/api/query?start=1h-ago&m=sum:%00", "/api/query/last?timeseries=%00",
    "/api/query?start=1h-ago&m=sum:budget.m{host=%00}",
    "/api/query?start=1h-ago&m=sum:%ED%A0%80"])
def test_a_name_no_uid_can_have_is_a_400(client: FlaskClient, path: str) -> None:
    error = error_of(client.get(path), 400)
    assert error["message"].startswith("No such name for '")


def test_a_nul_metric_in_lookup_and_exp_is_a_4xx(client: FlaskClient) -> None:
    # /api/search/lookup answers unknown names 404, as OpenTSDB does.
    assert error_of(client.get("/api/search/lookup?m=%00"), 404)["details"] == (
        "No such name for 'metrics': '\x00'")
    response = client.post("/api/query/exp", json={
        "time": {"start": "1h-ago", "aggregator": "sum"},
        "metrics": [{"id": "a", "metric": "\x00"}], "expressions": []})
    assert error_of(response, 400)["message"] == "No such name for 'metrics': '\x00'"


# --- cancellation: the serving layer's flag stops every read ----------------------------------


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", "/api/query?start=0&m=sum:budget.m", None),
    ("POST", "/api/query/exp", {"time": {"start": 0, "aggregator": "sum"},
                                "metrics": [{"id": "a", "metric": "budget.m"}],
                                "expressions": [{"id": "e", "expr": "a + 1"}]}),
    ("GET", "/api/query/gexp?start=0&exp=scale(sum:budget.m,2)", None),
    ("GET", "/api/query/last?timeseries=budget.m{host=a}&back_scan=24", None),
    ("GET", "/api/search/lookup?m=budget.m", None),
    ("GET", "/api/suggest?type=metrics&q=budget", None),
    ("GET", "/api/annotations?start_time=1600000000", None),
    ("GET", "/api/annotation/list?start=0", None),
], ids=["query", "exp", "gexp", "last", "lookup", "suggest", "annotations", "annotation-list"])
def test_a_cancelled_budget_stops_every_read_endpoint(
        client: FlaskClient, method: str, path: str, body: dict[str, Any] | None) -> None:
    budget = Budget.from_config(client.application.config["TSD"])
    budget.cancel()
    response = client.open(path, method=method, json=body,
                           environ_base={ENVIRON_KEY: budget})
    assert error_of(response, 408)["message"] == "Query cancelled: the client has gone"
    # The same request without the flag answers.
    assert client.open(path, method=method, json=body).status_code == 200


def test_cancel_stops_the_deadline_checks() -> None:
    budget = Budget(timeout_ms=0)
    budget.check()
    budget.cancel()
    assert budget.cancelled
    with pytest.raises(QueryCancelledError, match="the client has gone"):
        budget.check(3)


@pytest.mark.parametrize("others", [0, 2], ids=["sparse-metric-scans", "dense-metric-gets"])
def test_exact_series_answer_the_same_by_keys_or_by_scan(
        make_client: Callable[[dict[str, Any]], FlaskClient], others: int) -> None:
    # 10 days of hours are 241 row keys for host=a: with only host=a's 3 rows stored a scan
    # of the metric reads less; with 2 other series in every hour (480 more rows) the keys do.
    start_s = 1_600_000_000 - 1_600_000_000 % 3600
    points = [DataPoint("keys.m", start_s + hour * 3600 + 5, hour, {"host": "a"})
              for hour in (0, 100, 239)]
    points += [DataPoint("keys.m", start_s + hour * 3600, 1, {"host": f"o{n}"})
               for n in range(others) for hour in range(240)]
    client = make_client({})
    tsdb = client.application.extensions["tsdb"]
    assert not any(PointWriter(tsdb).write(points))
    tsuid = (tsdb.metrics.get_id("keys.m") + tsdb.tagk.get_id("host")
             + tsdb.tagv.get_id("a")).hex().upper()
    expected = {str(start_s + hour * 3600 + 5): hour for hour in (0, 100, 239)}
    for sub in ({"aggregator": "sum", "tsuids": [tsuid]},
                {"aggregator": "sum", "metric": "keys.m", "explicitTags": True, "filters": [
                    {"type": "literal_or", "tagk": "host", "filter": "a", "groupBy": True}]}):
        response = client.post("/api/query", json={
            "start": start_s, "end": start_s + 240 * 3600, "queries": [sub]})
        assert response.status_code == 200, response.get_data(as_text=True)[:300]
        [series] = response.get_json()
        assert series["tags"] == {"host": "a"} and series["dps"] == expected


def test_a_cancelled_budget_stops_a_gexp_tree_at_its_first_node() -> None:
    from app.engine.gexp_eval import evaluate_tree
    from app.engine.gexp_functions import FUNCTIONS, GexpContext
    from app.query.gexp import parse_expressions

    trees, _ = parse_expressions(["movingAverage(scale(sum:m,2),'1m')"], FUNCTIONS)
    budget = Budget(timeout_ms=0)
    budget.cancel()
    with pytest.raises(QueryCancelledError):
        evaluate_tree(trees[0], [[]], GexpContext(0, 1, deadline=budget))
    assert evaluate_tree(trees[0], [[]], GexpContext(0, 1)) == []
