"""The cost of authentication and of an enabled publisher on /api/put throughput.

One run, same data and server shape (gunicorn, 2 workers, embedded store with
``synchronous=NORMAL`` so disk flushes of a shared machine do not drown the CPU cost being
measured, 4 client threads), each variant on a fresh store: no plugins; a bearer token; basic
auth (scrypt once, then the verified-credentials cache); the JSON-lines publisher; the webhook
publisher posting to a local receiver. Two request shapes: batches of 50 points, and one point
per request (where a per-request cost such as authentication shows most). Each variant runs
``ROUNDS`` times, interleaved, and the best rate counts. Prints points/s and the change against
the baseline, then the same costs measured in-process (Flask's test client, no sockets), which
are steadier: microseconds per request for authentication, per point for the publishers.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests
from common import ROOT, gunicorn_server, temp_storage_url

from app.config import env_name
from plugin.credentials import CredentialsFile

T0 = 1_700_000_000
CLIENTS = 4
SHAPES = ((50, 20_000), (1, 2_000))  # (points per request, points sent)
ROUNDS = 2
IN_PROCESS_REQUESTS = 2_000


def point(i: int) -> dict[str, object]:
    series, step = i % 100, i // 100
    return {"metric": "bench.plugins", "timestamp": T0 + 10 * step, "value": i % 1000,
            "tags": {"host": f"web{series:03d}", "dc": "lga"}}


class Sink:
    """A local webhook receiver that counts the points it is sent."""

    def __init__(self) -> None:
        self.points = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                sink.points += len(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/put"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def run(settings: dict[str, str], headers: dict[str, str], batch: int, total: int) -> float:
    """Points/s of ``total`` points in requests of ``batch`` through a fresh server."""
    env = {"TSD_STORAGE": temp_storage_url(), "TSD_CORE_AUTO_CREATE_METRICS": "true",
           "TSD_STORAGE_SQLITE_SYNCHRONOUS": "NORMAL",
           **{env_name(key): value for key, value in settings.items()}}
    subprocess.run([sys.executable, "-m", "app.cli", "create-tables"], check=True,
                   env={**os.environ, **env}, cwd=ROOT, capture_output=True)
    bodies = [json.dumps([point(i) for i in range(start, start + batch)])
              for start in range(0, total, batch)]
    post_headers = {"Content-Type": "application/json", **headers}
    with gunicorn_server(env, workers=2) as url:
        for _ in range(4):  # warm both workers (and the basic-auth cache of each)
            response = requests.post(url + "/api/put", data=bodies[0], headers=post_headers)
            assert response.status_code == 204, response.text

        def send(chunk: list[str]) -> None:
            with requests.Session() as session:
                for body in chunk:
                    response = session.post(url + "/api/put", data=body, headers=post_headers)
                    assert response.status_code == 204, response.text

        started = time.perf_counter()
        with ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(send, [bodies[i::CLIENTS] for i in range(CLIENTS)]))
        elapsed = time.perf_counter() - started
    return total / elapsed


def variants(folder: Path, sink: Sink) -> list[tuple[str, dict[str, str], dict[str, str]]]:
    """``(label, settings by OpenTSDB key, request headers)`` of each variant."""
    creds = CredentialsFile(folder / "auth.json")
    token = creds.add_token("write", "bench")
    creds.add_user("bench", "bench-password", "write")
    auth = {"tsd.core.authentication.enable": "true",
            "tsd.core.authentication.file": str(folder / "auth.json")}
    basic = base64.b64encode(b"bench:bench-password").decode()
    publish = {"tsd.rtpublisher.enable": "true"}
    return [
        ("no plugins (baseline)", {}, {}),
        ("auth: bearer token", auth, {"Authorization": f"Bearer {token}"}),
        ("auth: basic (cached scrypt)", auth, {"Authorization": f"Basic {basic}"}),
        ("publisher: jsonl", {**publish, "tsd.rtpublisher.plugin": "jsonl",
                              "tsd.rtpublisher.jsonl.path": str(folder / "points.jsonl")}, {}),
        ("publisher: webhook", {**publish, "tsd.rtpublisher.plugin": "webhook",
                                "tsd.rtpublisher.webhook.url": sink.url}, {}),
    ]


def main(report: Callable[[str], None] = print) -> None:
    sink = Sink()
    with tempfile.TemporaryDirectory(prefix="pytsd-bench-plugins-") as tmp:
        for batch, total in SHAPES:
            cases = variants(Path(tmp) / f"b{batch}", sink)
            best = dict.fromkeys([label for label, _, _ in cases], 0.0)
            for _ in range(ROUNDS):
                for label, env, headers in cases:
                    best[label] = max(best[label], run(env, headers, batch, total))
            baseline = best[cases[0][0]]
            for label, rate in best.items():
                report(f"/api/put, {batch} point(s)/request, {CLIENTS} clients, gunicorn 2 "
                       f"workers, {label}: {rate:,.0f} points/s "
                       f"({(rate / baseline - 1) * 100:+.1f}% vs baseline, best of {ROUNDS})")
        in_process(Path(tmp) / "in-process", sink, report)
    time.sleep(1.5)  # the webhook's last flush interval
    report(f"webhook receiver got {sink.points:,} points")
    sink.server.shutdown()


def in_process(folder: Path, sink: Sink, report: Callable[[str], None]) -> None:
    """Per-request and per-point costs through Flask's test client (no sockets, no workers)."""
    from app import create_app
    from app.tsdb.schema import create_tables

    def seconds_for(settings: dict[str, str], headers: dict[str, str], path: str,
                    body: list[dict[str, object]] | None) -> float:
        app = create_app({"tsd.storage": temp_storage_url(), "tsd.core.auto_create_metrics":
                          True, "tsd.storage.sqlite.synchronous": "NORMAL", **settings})
        create_tables(app.extensions["tsdb"].store, app.extensions["tsdb"].config)
        client = app.test_client()
        client.open(path, method="POST" if body else "GET", json=body, headers=headers)
        started = time.perf_counter()
        for i in range(IN_PROCESS_REQUESTS):
            payload = [{**p, "timestamp": T0 + i} for p in body] if body else None
            response = client.open(path, method="POST" if body else "GET", json=payload,
                                   headers=headers)
            assert response.status_code in (200, 204), response.get_data(as_text=True)
        return (time.perf_counter() - started) / IN_PROCESS_REQUESTS

    cases = variants(folder, sink)
    base_request = seconds_for({}, {}, "/api/version", None)
    for label, env, headers in cases[1:3]:
        cost = seconds_for(env, headers, "/api/version", None) - base_request
        report(f"in-process, GET /api/version, {label}: +{cost * 1e6:,.0f} µs per request "
               f"(baseline {base_request * 1e6:,.0f} µs)")
    points = [point(i) for i in range(50)]
    base_put = seconds_for({}, {}, "/api/put", points)
    for label, env, headers in cases[3:]:
        cost = seconds_for(env, headers, "/api/put", points) - base_put
        report(f"in-process, /api/put of 50 points, {label}: +{cost / 50 * 1e6:,.1f} µs per "
               f"point (baseline {base_put / 50 * 1e6:,.1f} µs per point)")


if __name__ == "__main__":
    main()
