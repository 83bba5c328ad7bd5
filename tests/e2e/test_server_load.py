"""The serving model under load and at shutdown: real gunicorn processes with pytsd's worker."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from app.tsdb.demo import DEMO_METRICS
from tests.e2e.tsd_process import read_exactly_until, read_response, read_until_closed, start_tsd

HEAVY_QUERY = "start=2d-ago&" + "&".join(f"m=none:{metric}" for metric in DEMO_METRICS)


def _timed_get(url: str) -> tuple[requests.Response, float]:
    started = time.monotonic()
    response = requests.get(url, timeout=60)
    return response, time.monotonic() - started


def test_slow_clients_and_heavy_queries_do_not_stall_one_worker(
        demo_store: str, tmp_path: Path) -> None:
    tsd = start_tsd(tmp_path, {"tsd.storage": demo_store,
                               "tsd.http.request.head_timeout_s": 6}, workers=1)
    slow = [tsd.connect() for _ in range(50)]
    stop = threading.Event()

    def trickle() -> None:  # a header line every 0.5 s: never a complete request
        for sock in slow:
            sock.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\n")
        while not stop.wait(0.5):
            for sock in slow:
                try:
                    sock.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    pass  # answered 408 and closed: expected after the head timeout

    trickler = threading.Thread(target=trickle)
    trickler.start()
    try:
        with ThreadPoolExecutor(2) as heavy_pool:
            heavy_started = time.monotonic()
            heavy = [heavy_pool.submit(_timed_get, f"{tsd.url}/api/query?{HEAVY_QUERY}")
                     for _ in range(2)]
            time.sleep(0.3)  # both are running now (on a loaded machine: soon)
            light, light_s = [], []
            for number in range(20):
                version, seconds = _timed_get(f"{tsd.url}/api/version")
                light.append(version.status_code)
                light_s.append(seconds)
                if number % 5 == 0:
                    query = requests.get(f"{tsd.url}/api/query", timeout=30, params={
                        "start": "1h-ago", "m": "avg:1m-avg:sys.cpu.user{host=web01}"})
                    assert query.status_code == 200 and query.json()[0]["dps"]
            answers = [future.result()[0] for future in heavy]
            heavy_s = time.monotonic() - heavy_started
        assert light == [200] * 20
        assert [answer.status_code for answer in answers] == [200, 200]
        assert len(answers[0].json()) > 20  # every series of every metric
        # Not stalled: a light request queued behind the heavy ones would wait about as long
        # as they run. Relative to their time, so a loaded machine slows both alike.
        assert max(light_s) < max(1.0, heavy_s / 2), (light_s, heavy_s)
        stop.set()
        trickler.join()
        for sock in slow:  # the slow ones end with OpenTSDB's 408, not a hang or HTML
            raw = read_until_closed(sock, timeout_s=15)
            assert raw.startswith(b"HTTP/1.1 408 ") and b'"code":408' in raw
    finally:
        stop.set()
        trickler.join()
        for sock in slow:
            sock.close()
        tsd.stop()


def test_graceful_shutdown_finishes_in_flight_and_closes_idle(tmp_path: Path) -> None:
    tsd = start_tsd(tmp_path, {"tsd.core.auto_create_metrics": "true"}, workers=1)
    body = json.dumps({"metric": "shutdown.inflight", "timestamp": 1_600_000_000, "value": 7,
                       "tags": {"host": "a"}}).encode()
    with tsd.connect() as idle_http, tsd.connect() as idle_lines, tsd.connect() as busy:
        idle_http.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(idle_http)[0] == 200
        idle_lines.sendall(b"frob\n")
        assert idle_lines.recv(100).startswith(b"unknown command: frob")
        busy.sendall(b"POST /api/put HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                     % len(body) + body[:10])
        time.sleep(0.3)
        os.kill(tsd.process.pid, signal.SIGTERM)  # the master: a graceful stop
        started = time.monotonic()
        # Closed at once, not after the 30 s graceful timeout (10 s: room for a loaded machine).
        assert read_until_closed(idle_http, timeout_s=10) == b""
        assert read_until_closed(idle_lines, timeout_s=10) == b""
        assert time.monotonic() - started < 10
        busy.sendall(body[10:])  # the request in flight is still served...
        status, headers, _ = read_response(busy)
        assert status == 204 and headers["connection"] == "close"  # ...and told it is the last
    assert tsd.process.wait(timeout=15) == 0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", tsd.port), timeout=2)
    log = tsd.log.read_text()
    assert "Traceback" not in log


def test_requests_beyond_the_queue_limit_get_503_json(demo_store: str, tmp_path: Path) -> None:
    # A request that blocks its thread for a known time, not a heavy query: how long a query
    # takes depends on the machine, and a fast one would leave the slot free.
    tsd = start_tsd(tmp_path, {"tsd.storage": demo_store, "tsd.server.queue_limit": 1},
                    workers=1, app="tests.e2e.wsgi_faults:application")
    try:
        with ThreadPoolExecutor(1) as pool:
            busy = pool.submit(requests.get, f"{tsd.url}/test/sleep?s=3", timeout=60)
            # Once the sleeping request holds the worker's only slot (soon; later on a loaded
            # machine) the next one is refused; asked again until then, never after it ends.
            time.sleep(0.5)
            overloaded = requests.get(f"{tsd.url}/api/version", timeout=30)
            while overloaded.status_code == 200 and not busy.done():
                time.sleep(0.1)
                overloaded = requests.get(f"{tsd.url}/api/version", timeout=30)
            assert busy.result().status_code == 200
        assert overloaded.status_code == 503
        assert overloaded.json()["error"]["message"] == "Service Unavailable"
        assert requests.get(f"{tsd.url}/api/version", timeout=5).status_code == 200
    finally:
        tsd.stop()


def test_app_failures_are_json_and_a_long_request_outlives_the_worker_timeout(
        tmp_path: Path) -> None:
    # GUNICORN_TIMEOUT=2: a sync worker busy 4 s would be killed (HTML 500 or a reset).
    tsd = start_tsd(tmp_path, {}, workers=1, app="tests.e2e.wsgi_faults:application",
                    environ={"GUNICORN_TIMEOUT": "2"})
    try:
        with requests.Session() as session:
            crash = session.get(f"{tsd.url}/test/crash", timeout=5)
            assert crash.status_code == 500
            assert crash.json()["error"]["message"] == "Internal Server Error"
            bad = session.get(f"{tsd.url}/test/bad-header", timeout=5)
            assert bad.status_code == 500 and "Injected" not in bad.headers
            assert bad.json()["error"]["details"] == "The handler produced an invalid response"
            with ThreadPoolExecutor(1) as pool:
                slow = pool.submit(requests.get, f"{tsd.url}/test/sleep?s=4", timeout=20)
                time.sleep(0.5)
                during = session.get(f"{tsd.url}/api/version", timeout=5)  # not blocked
                assert (slow.result().status_code, slow.result().text) == (200, "slept 4")
            assert during.status_code == 200
        log = tsd.log.read_text()
        assert "WORKER TIMEOUT" not in log and "RuntimeError: the app crashed" in log
    finally:
        tsd.stop()


def test_hundreds_of_persistent_line_connections_in_one_worker(tmp_path: Path) -> None:
    tsd = start_tsd(tmp_path, {}, workers=1)
    socks = [tsd.connect(timeout_s=15) for _ in range(300)]
    try:
        for round_ in range(3):
            for number, sock in enumerate(socks):
                sock.sendall(b"frob%d.%d\n" % (number, round_))
            for number, sock in enumerate(socks):
                reply = read_exactly_until(sock, b"\n", timeout_s=15)
                assert reply == b"unknown command: frob%d.%d.  Try `help'.\n" % (number, round_)
        assert requests.get(f"{tsd.url}/api/version", timeout=5).status_code == 200
    finally:
        for sock in socks:
            sock.close()
        tsd.stop()
