"""Admission lanes and attribution on a real server over the demo data (issue 25): a query
carrying Grafana's headers shows in /api/stats/query while it runs and after, whichever
worker answers; with the expensive lane saturated, cheap queries are still served and the
surplus expensive ones get 503 with Retry-After. Loopback, bounded (a few seconds)."""

from __future__ import annotations

import threading
import time

import pytest
import requests

from tests.e2e.tsd_process import TsdProcess, demo_store_in, start_tsd

GRAFANA = {"X-Grafana-Referer": "http://grafana:3000/d/farm42/web-farm?orgId=1&viewPanel=7",
           "X-Dashboard-Uid": "farm42", "X-Panel-Id": "7", "X-Grafana-Org-Id": "1"}
EXPENSIVE = "/api/query?start=24h-ago&m=sum:rate:sys.cpu.user{host=*}"  # ~52k points
CHEAP = "/api/query?start=1h-ago&m=sum:sys.cpu.user{host=web01}"  # ~360 points


@pytest.fixture(scope="module")
def demo_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return demo_store_in(tmp_path_factory.mktemp("admission"))


def start(tmp_path_factory: pytest.TempPathFactory, demo_url: str, workers: int,
          **settings: object) -> TsdProcess:
    return start_tsd(tmp_path_factory.mktemp("server"),
                     {"tsd.storage": demo_url, "tsd.query.expensive_points": 50_000,
                      "tsd.query.cache.max_bytes": 0, **settings}, workers=workers)


def hammer(url: str, stop: threading.Event, answers: list[requests.Response],
           headers: dict[str, str]) -> None:
    while not stop.is_set():
        answers.append(requests.get(url, headers={**headers, "Connection": "close"},
                                    timeout=30))


def test_a_grafana_query_is_seen_running_and_completed(
        tmp_path_factory: pytest.TempPathFactory, demo_url: str) -> None:
    tsd = start(tmp_path_factory, demo_url, workers=2, **{"tsd.query.expensive_threads": 2})
    stop, answers = threading.Event(), []  # type: ignore[var-annotated]
    threads = [threading.Thread(target=hammer, args=(tsd.url + EXPENSIVE, stop, answers,
                                                     GRAFANA)) for _ in range(3)]
    for thread in threads:
        thread.start()
    seen_running = None
    try:
        deadline = time.monotonic() + 20
        while seen_running is None and time.monotonic() < deadline:
            stats = requests.get(tsd.url + "/api/stats/query",
                                 headers={"Connection": "close"}, timeout=10).json()
            seen_running = next((q for q in stats["running"] if q["dashboard"] == "farm42"),
                                None)
        time.sleep(1.0)  # more queries, over both workers
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        # Asked of whichever worker takes each new connection: the same completed list.
        views = [requests.get(tsd.url + "/api/stats/query", headers={"Connection": "close"},
                              timeout=10).json()["completed"] for _ in range(6)]
        tsd.stop()
    completed = views[0]
    assert seen_running is not None, "never caught the query running"
    assert (seen_running["panel"], seen_running["org"], seen_running["lane"]) == (
        "7", "1", "expensive")
    assert seen_running["headers"]["X-Grafana-Referer"] == GRAFANA["X-Grafana-Referer"]
    assert seen_running["remote"].startswith("127.0.0.1:")
    assert seen_running["elapsed"] >= 0
    mine = [q for q in completed if q["dashboard"] == "farm42"]
    assert len(mine) == min(len(answers), 256)  # every answer, whichever worker ran it
    assert all(view == completed for view in views)
    assert all(q["httpResponse"]["code"] == 200 for q in mine)


def test_cheap_queries_pass_a_saturated_expensive_lane(
        tmp_path_factory: pytest.TempPathFactory, demo_url: str) -> None:
    tsd = start(tmp_path_factory, demo_url, workers=1,
                **{"tsd.query.expensive_threads": 1, "tsd.query.max_queue_ms": 200})
    stop = threading.Event()
    expensive: list[requests.Response] = []
    threads = [threading.Thread(target=hammer, args=(tsd.url + EXPENSIVE, stop, expensive,
                                                     GRAFANA)) for _ in range(8)]
    for thread in threads:
        thread.start()
    cheap_ms: list[float] = []
    try:
        time.sleep(0.5)  # the expensive lane fills up
        for _ in range(30):
            started = time.perf_counter()
            answer = requests.get(tsd.url + CHEAP, timeout=30)
            cheap_ms.append((time.perf_counter() - started) * 1000)
            assert answer.status_code == 200
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        tsd.stop()
    refused = [a for a in expensive if a.status_code == 503]
    assert refused, "the expensive lane never refused"
    assert all(a.headers["Retry-After"] == "1" for a in refused)
    # Within the queue bound (200 ms) and the server's own overhead, not after minutes.
    refused_s = sorted(a.elapsed.total_seconds() for a in refused)
    assert refused_s[-1] < 2.0, refused_s
    assert {a.status_code for a in expensive} <= {200, 503}
    cheap_ms.sort()
    print(f"cheap p50 {cheap_ms[15]:.0f} ms, max {cheap_ms[-1]:.0f} ms; expensive "
          f"{len(expensive) - len(refused)} served, {len(refused)} refused, in "
          f"{refused_s[0]:.2f}-{refused_s[-1]:.2f} s")


def test_a_waiting_query_whose_client_left_is_dropped(
        tmp_path_factory: pytest.TempPathFactory, demo_url: str) -> None:
    import socket

    tsd = start_tsd(tmp_path_factory.mktemp("gone"),
                    {"tsd.storage": demo_url, "tsd.query.expensive_points": 50_000,
                     "tsd.query.expensive_threads": 1, "tsd.query.max_queue_ms": 20_000},
                    workers=1, app="tests.e2e.wsgi_faults:application")
    holder = threading.Thread(target=requests.get,
                              args=(tsd.url + "/test/hold-expensive-lane?s=6",),
                              kwargs={"timeout": 30})
    try:
        holder.start()
        time.sleep(0.5)  # the lane is held: an expensive query now waits (up to 20 s)
        with socket.create_connection(("127.0.0.1", tsd.port)) as sock:
            sock.sendall(f"GET {EXPENSIVE} HTTP/1.1\r\nHost: x\r\n"
                         "X-Dashboard-Uid: gone-1\r\n\r\n".encode())
            time.sleep(0.3)  # waiting for the lane now; then the client goes away
        dropped: list[dict[str, object]] = []
        deadline = time.monotonic() + 4  # well before the lane frees (6 s)
        while not dropped and time.monotonic() < deadline:
            time.sleep(0.2)
            completed = requests.get(tsd.url + "/api/stats/query", timeout=10).json()
            dropped = [q for q in completed["completed"] if q["dashboard"] == "gone-1"]
    finally:
        holder.join()
        tsd.stop()
    assert dropped, "a query whose client left was never dropped"
    assert dropped[0]["httpResponse"] == {"code": 499, "reasonPhrase": ""}
    assert dropped[0]["lane"] == "expensive"
