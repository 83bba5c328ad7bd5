"""Counters summed across a server's workers (issue 23 item 4, issue 25): ``/api/stats`` and
``/metrics`` answer the server's totals whichever worker takes the request."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.tsd_process import TsdProcess, start_tsd

PUTS, PER_PUT = 64, 10  # 640 points, as in the measurement


@pytest.fixture(scope="module")
def tsd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TsdProcess]:
    server = start_tsd(tmp_path_factory.mktemp("observe"),
                       {"tsd.core.auto_create_metrics": "true"}, workers=2)
    try:
        both_workers_answer(server)
        yield server
    finally:
        server.stop()


def both_workers_answer(tsd: TsdProcess, timeout_s: float = 60) -> None:
    """Wait for the second worker: the server answers as soon as one has booted, and on a
    loaded machine the other may still be starting while every write goes to the first."""
    pids: set[str] = set()
    deadline = time.monotonic() + timeout_s
    while len(pids) < 2 and time.monotonic() < deadline:
        answer = fresh_get(tsd, "/api/stats").json()
        pids.add(next(p["tags"]["pid"] for p in answer if p["metric"] == "tsd.process.uptime_s"))
        time.sleep(0.05)
    assert len(pids) == 2, "one worker answered every request"


def fresh_get(tsd: TsdProcess, path: str) -> requests.Response:
    # A new connection each time: the acceptor spreads connections over the workers.
    return requests.get(tsd.url + path, headers={"Connection": "close"}, timeout=10)


def written(tsd: TsdProcess) -> None:
    for i in range(PUTS):
        points = [{"metric": "obs.m", "timestamp": 1_700_000_000 + i * PER_PUT + j,
                   "value": j, "tags": {"host": "a"}} for j in range(PER_PUT)]
        response = requests.post(tsd.url + "/api/put", json=points,
                                 headers={"Connection": "close"}, timeout=10)
        assert response.status_code == 204, response.text


@pytest.fixture(scope="module")
def after_writes(tsd: TsdProcess) -> TsdProcess:
    written(tsd)
    return tsd


def stat(answer: list[dict[str, object]], metric: str, **tags: str) -> list[float]:
    return [float(str(p["value"])) for p in answer if p["metric"] == metric
            and all(dict(p["tags"]).get(k) == v for k, v in tags.items())]  # type: ignore[arg-type]


def test_api_stats_totals_are_the_servers_whichever_worker_answers(
        after_writes: TsdProcess) -> None:
    answering: set[str] = set()
    for _ in range(40):
        answer = fresh_get(after_writes, "/api/stats").json()
        assert stat(answer, "tsd.datapoints.added", type="all") == [PUTS * PER_PUT]
        pid = next(p["tags"]["pid"] for p in answer if p["metric"] == "tsd.process.uptime_s")
        answering.add(pid)
        if len(answering) == 2:
            break
    assert len(answering) == 2, "one worker answered every request"
    by_worker = [p for p in answer if p["metric"] == "tsd.worker.datapoints.added"]
    assert sum(float(str(p["value"])) for p in by_worker) == PUTS * PER_PUT
    assert len(by_worker) == 2  # both workers took writes (and /api/stats requests)


def test_metrics_parse_and_sum_across_workers(after_writes: TsdProcess) -> None:
    by_worker = stat(fresh_get(after_writes, "/api/stats").json(), "tsd.worker.datapoints.added")
    assert len(by_worker) == 2 and all(by_worker)  # the 640 points went to both workers
    response = fresh_get(after_writes, "/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    added = families["pytsd_datapoints_added"].samples
    assert [s.value for s in added if s.name == "pytsd_datapoints_added_total"] == [640.0]
    puts = [s.value for s in families["pytsd_http_requests"].samples
            if s.name == "pytsd_http_requests_total"
            and s.labels == {"route": "/api/put", "status": "204"}]
    assert puts == [float(PUTS)]
    latency = [s for s in families["pytsd_http_request_duration_seconds"].samples
               if s.name.endswith("_count") and s.labels["route"] == "/api/put"]
    assert [s.value for s in latency] == [float(PUTS)]
