"""A real gunicorn: a plain ``POST /api/put`` (stored by the worker without Flask's request
cycle, app/server/put_lane.py) answers the same bytes as the same request through Flask
(a query-string target, which the worker leaves to Flask), whatever the body; it is logged
and counted like any request."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest
import requests

from tests.e2e.tsd_process import TsdProcess, read_exactly_until, start_tsd

NOW_S = int(time.time()) // 3600 * 3600
LOGGED_204 = '"POST /api/put HTTP/1.1" 204 0 '  # the access log's request, status, size


def point(value: object, host: str = "a", metric: str = "put.direct",
          timestamp: int = NOW_S) -> dict[str, object]:
    return {"metric": metric, "timestamp": timestamp, "value": value, "tags": {"host": host}}


BODIES = {
    "clean": json.dumps([point(1), point(2.5, "b")]).encode(),
    "one object": json.dumps(point(3)).encode(),
    "a bad value": json.dumps([point(4), point("x", "c")]).encode(),
    "an unknown metric": json.dumps([point(5), point(6, metric="not.assigned")]).encode(),
    "a timestamp too large": json.dumps([point(7, timestamp=10**14)]).encode(),
    "no point": b"[]",
    "not JSON": b"[{\"metric\"",
    "twenty digits": json.dumps([point(10**20)]).encode(),
}


@pytest.fixture(scope="module")
def tsd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TsdProcess]:
    server = start_tsd(tmp_path_factory.mktemp("put-direct"),
                       {"tsd.core.auto_create_metrics": "false"})
    assigned = requests.post(f"{server.url}/api/uid/assign", json={"metric": ["put.direct"]},
                             timeout=30)
    assert assigned.status_code == 200, assigned.text
    yield server
    server.stop()


def exchange(sock: socket.socket, target: bytes, body: bytes,
             content_type: bytes = b"application/json") -> bytes:
    """One request on a keep-alive connection; the answer's exact bytes."""
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: tsd\r\nContent-Type: %s\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (target, content_type, len(body), body))
    head = read_exactly_until(sock, b"\r\n\r\n")
    head, _, rest = head.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        rest += sock.recv(65536)
    return head + b"\r\n\r\n" + rest


@pytest.mark.parametrize("name", sorted(BODIES))
def test_the_same_bytes_as_flask_answers(tsd: TsdProcess, name: str) -> None:
    with tsd.connect() as sock:
        direct = exchange(sock, b"/api/put", BODIES[name])
        through_flask = exchange(sock, b"/api/put?", BODIES[name])
    assert direct == through_flask
    assert direct.startswith(b"HTTP/1.1 204 " if name in ("clean", "one object")
                             else b"HTTP/1.1 400 ")


def test_a_refused_content_type_is_flasks_415(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        answer = exchange(sock, b"/api/put", BODIES["clean"], b"text/plain")
    assert answer.startswith(b"HTTP/1.1 415 ")


def stat(url: str, metric: str, **tags: str) -> float:
    found = [float(s["value"]) for s in requests.get(f"{url}/api/stats", timeout=30).json()
             if s["metric"] == metric and all(s["tags"].get(k) == v for k, v in tags.items())]
    return sum(found)


def test_direct_puts_are_logged_and_counted(tsd: TsdProcess) -> None:
    logged = tsd.log.read_text().count(LOGGED_204)
    requests_before = stat(tsd.url, "tsd.http.requests", endpoint="/api/put", status="204")
    points_before = stat(tsd.url, "tsd.datapoints.added")
    with tsd.connect() as sock:
        for number in range(3):
            body = json.dumps([point(number, f"log{number}"), point(number, "log")]).encode()
            assert exchange(sock, b"/api/put", body).startswith(b"HTTP/1.1 204 ")
    assert stat(tsd.url, "tsd.http.requests", endpoint="/api/put", status="204") \
        - requests_before == 3
    assert stat(tsd.url, "tsd.datapoints.added") - points_before == 6
    deadline = time.monotonic() + 10
    while tsd.log.read_text().count(LOGGED_204) < logged + 3:
        assert time.monotonic() < deadline, tsd.log.read_text()[-3000:]
        time.sleep(0.1)
