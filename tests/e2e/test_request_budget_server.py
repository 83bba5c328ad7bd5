"""Issue 24's requests through a real gunicorn server (one worker, ``tsd.query.timeout`` 1 s):
each answers within the timeout + 1 s with its JSON 4xx, and the worker then serves the next
request at once (nothing keeps running behind it), its peak resident memory under 1 GiB."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.e2e.tsd_process import TsdProcess, start_tsd, workers_peak_rss_kb

TIMEOUT_MS = 1000
T0 = 1_600_000_000
PEAK_RSS_KB = 1024 * 1024  # the bound: a worker under 1 GiB whatever the request


@pytest.fixture(scope="module")
def tsd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TsdProcess]:
    server = start_tsd(tmp_path_factory.mktemp("budget"), {
        "tsd.query.timeout": TIMEOUT_MS, "tsd.query.limits.emitted_points": 10_000,
        "tsd.core.auto_create_metrics": "true"})
    try:
        points = [{"metric": "budget.m", "timestamp": T0 + 10 * i, "value": i,
                   "tags": {"host": "a"}} for i in range(50)]
        assert requests.post(f"{server.url}/api/put", json=points, timeout=30).status_code == 204
        yield server
    finally:
        server.stop()


def timed(method: str, url: str, **kwargs: Any) -> tuple[requests.Response, float]:
    started = time.perf_counter()
    response = requests.request(method, url, timeout=30, **kwargs)
    return response, time.perf_counter() - started


@pytest.mark.parametrize(("method", "path", "body", "status", "message"), [
    ("POST", "/api/query/exp", {
        "time": {"start": 0, "aggregator": "sum"},
        "metrics": [{"id": "a", "metric": "budget.m"}],
        "expressions": [{"id": "e0", "expr": "a"}] + [
            {"id": f"e{i}", "expr": f"e{i - 1} + a"} for i in range(1, 1000)]},
     413, "Sorry, you have attempted to emit more than our limit of 10000 data points"),
    ("POST", "/api/query/last", {"queries": [{"tsuids": [
        f"000001000001{i:06X}" for i in range(100_000)]}]},
     400, "Too many tsuids in a sub query: 100000, more than 10000"),
    ("POST", "/api/query", {"start": 0, "queries": [{
        "aggregator": "sum", "metric": "budget.m", "filters": [
            {"type": "regexp", "tagk": "host", "filter": "(" * 5000 + "a" + ")" * 5000}]}]},
     400, "Too many characters in a regexp filter: 10001, more than 1024"),
    ("GET", "/api/query?start=1h-ago&m=sum:%00", None,
     400, "No such name for 'metrics': '\x00'"),
    ("POST", "/api/query/exp", {
        "time": {"start": 0, "aggregator": "sum"},
        "metrics": [{"id": "a", "metric": "budget.m"}],
        "expressions": [{"id": "e", "expr": "a+" * 500_000 + "a"}]},
     400, "Too many characters in an expression: 1000001, more than 4096"),
    ("POST", "/api/query", {"start": 0, "queries": [{
        "aggregator": "sum", "metric": "budget.m", "percentiles": [50.0] * 100_000}]},
     400, "Too many percentiles: 100000, more than 100"),
], ids=["exp-chain", "last-tsuids", "regexp", "nul-metric", "exp-1mb", "percentiles"])
def test_a_hostile_request_answers_in_time_and_the_worker_is_free(
        tsd: TsdProcess, method: str, path: str, body: Any, status: int, message: str) -> None:
    response, elapsed_s = timed(method, f"{tsd.url}{path}", json=body)
    assert response.status_code == status, response.text[:300]
    assert response.json()["error"]["message"].startswith(message)
    assert elapsed_s < TIMEOUT_MS / 1000 + 1
    after, after_s = timed("GET", f"{tsd.url}/api/query?start={T0}&m=sum:budget.m")
    assert after.status_code == 200 and len(after.json()[0]["dps"]) == 50
    assert after_s < 1.0
    assert max(workers_peak_rss_kb(tsd.process.pid)) < PEAK_RSS_KB
