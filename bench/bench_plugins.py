"""The cost of authentication and of an enabled publisher on /api/put throughput.

One run, same data and server shape (gunicorn, 2 workers, embedded store, 4 client threads),
each variant on a fresh store: no plugins; a bearer token; basic auth (scrypt once, then the
verified-credentials cache); the JSON-lines publisher; the webhook publisher posting to a
local receiver. Two request shapes: batches of 50 points, and one point per request (where a
per-request cost such as authentication shows most). Prints points/s and the change against
the baseline.
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

from plugin.credentials import CredentialsFile

T0 = 1_700_000_000
CLIENTS = 4
SHAPES = ((50, 40_000), (1, 4_000))  # (points per request, points sent)


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


def run(env: dict[str, str], headers: dict[str, str], batch: int, total: int) -> float:
    """Points/s of ``total`` points in requests of ``batch`` through a fresh server."""
    env = {"TSD_STORAGE": temp_storage_url(), "TSD_CORE_AUTO_CREATE_METRICS": "true", **env}
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
    creds = CredentialsFile(folder / "auth.json")
    token = creds.add_token("write", "bench")
    creds.add_user("bench", "bench-password", "write")
    auth = {"TSD_CORE_AUTHENTICATION_ENABLE": "true",
            "TSD_CORE_AUTHENTICATION_FILE": str(folder / "auth.json")}
    basic = base64.b64encode(b"bench:bench-password").decode()
    return [
        ("no plugins (baseline)", {}, {}),
        ("auth: bearer token", auth, {"Authorization": f"Bearer {token}"}),
        ("auth: basic (cached scrypt)", auth, {"Authorization": f"Basic {basic}"}),
        ("publisher: jsonl", {"TSD_RTPUBLISHER_ENABLE": "true", "TSD_RTPUBLISHER_PLUGIN": "jsonl",
                              "TSD_RTPUBLISHER_JSONL_PATH": str(folder / "points.jsonl")}, {}),
        ("publisher: webhook", {"TSD_RTPUBLISHER_ENABLE": "true",
                                "TSD_RTPUBLISHER_PLUGIN": "webhook",
                                "TSD_RTPUBLISHER_WEBHOOK_URL": sink.url}, {}),
    ]


def main(report: Callable[[str], None] = print) -> None:
    sink = Sink()
    with tempfile.TemporaryDirectory(prefix="pytsd-bench-plugins-") as tmp:
        for batch, total in SHAPES:
            baseline = 0.0
            for label, env, headers in variants(Path(tmp) / f"b{batch}", sink):
                rate = run(env, headers, batch, total)
                baseline = baseline or rate
                report(f"/api/put, {batch} point(s)/request, {CLIENTS} clients, gunicorn 2 "
                       f"workers, {label}: {rate:,.0f} points/s "
                       f"({(rate / baseline - 1) * 100:+.1f}% vs baseline)")
    time.sleep(1.5)  # the webhook's last flush interval
    report(f"webhook receiver got {sink.points:,} points")
    sink.server.shutdown()


if __name__ == "__main__":
    main()
