"""The HTTP API through a real gunicorn (2 workers) over the embedded store."""

from __future__ import annotations

import gzip
import json
import time
from concurrent.futures import ThreadPoolExecutor

import requests

T0 = 1_600_000_000


def test_put_then_query_round_trip(live_server: str) -> None:
    points = [{"metric": "e2e.roundtrip", "timestamp": T0 + 10 * i, "value": i,
               "tags": {"host": "a"}} for i in range(30)]
    response = requests.post(f"{live_server}/api/put", data=json.dumps(points), timeout=30)
    assert response.status_code == 204
    query = requests.get(f"{live_server}/api/query", timeout=30, params={
        "start": T0, "end": T0 + 3600, "m": "sum:e2e.roundtrip{host=a}"})
    assert query.status_code == 200
    [series] = query.json()
    assert series["tags"] == {"host": "a"}
    assert series["dps"] == {str(T0 + 10 * i): i for i in range(30)}


def test_gzip_put_and_bad_input_are_opentsdb_errors(live_server: str) -> None:
    body = gzip.compress(json.dumps({"metric": "e2e.gzip", "timestamp": T0, "value": 1.5,
                                     "tags": {"host": "a"}}).encode())
    ok = requests.post(f"{live_server}/api/put?summary", data=body, timeout=30,
                       headers={"Content-Encoding": "gzip"})
    assert (ok.status_code, ok.json()) == (200, {"failed": 0, "success": 1})
    bad = requests.get(f"{live_server}/api/query?start=1h-ago&m=sum:no.such.metric", timeout=30)
    assert bad.status_code == 400
    assert bad.headers["Content-Type"].startswith("application/json")
    assert bad.json()["error"]["message"] == "No such name for 'metrics': 'no.such.metric'"
    missing = requests.get(f"{live_server}/api/nope", timeout=30)
    assert missing.status_code == 404
    assert missing.json() == {"error": {"code": 404, "message": "Endpoint not found"}}


def test_concurrent_writers_on_two_workers_lose_nothing(live_server: str) -> None:
    """Four clients write 2,000 points of new series at once; every point is then readable."""
    def write(client: int) -> None:
        with requests.Session() as session:
            for batch in range(10):
                points = [{"metric": "e2e.concurrent", "timestamp": T0 + batch * 50 + i,
                           "value": client * 1000 + batch * 50 + i,
                           "tags": {"client": f"c{client}", "batch": f"b{batch}"}}
                          for i in range(50)]
                response = session.post(f"{live_server}/api/put", data=json.dumps(points),
                                        timeout=60)
                assert response.status_code == 204, response.text

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, range(4)))
    time.sleep(0.1)
    query = requests.get(f"{live_server}/api/query", timeout=60, params={
        "start": T0, "end": T0 + 3600, "m": "none:e2e.concurrent"})
    assert query.status_code == 200
    series = query.json()
    assert len(series) == 40
    assert sum(len(s["dps"]) for s in series) == 2000
