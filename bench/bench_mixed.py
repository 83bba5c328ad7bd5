"""A Grafana-like mixed load on a real pytsd (gunicorn, 2 workers) over the demo day.

8 clients on keep-alive connections; each request is a dashboard panel query (80%: POST
/api/query as Grafana's datasource sends it, 1 h / 6 h / 24 h ranges, 1m-5m downsampling,
``host=*`` group-by) or a 50-point /api/put (20%). Bounded: 15 s or 4,000 requests per client,
whichever comes first. Prints req/s, p50/p99 per kind, and errors; the ``/api/version`` p99
sampled meanwhile shows what a light request sees under that load.
"""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import requests
from serving import VersionSampler, demo_store, pytsd_server

from app.tsdb.demo import DEMO_METRICS

CLIENTS = 8
DURATION_S = 15.0
MAX_REQUESTS = 4000
RANGES = [("1h-ago", "1m-avg"), ("6h-ago", "5m-avg"), ("24h-ago", "5m-avg")]


def query_body(rng: random.Random) -> str:
    start, downsample = rng.choice(RANGES)
    return json.dumps({"start": start, "msResolution": False, "globalAnnotations": True,
                       "queries": [{"metric": rng.choice(DEMO_METRICS), "aggregator": "avg",
                                    "downsample": downsample, "tags": {"host": "*"}}]})


def put_body(client: int, number: int) -> str:
    now = int(time.time())
    return json.dumps([{"metric": "bench.mixed", "timestamp": now - 50 + i,
                        "value": number * 50 + i,
                        "tags": {"host": f"c{client}", "n": str(number % 100)}}
                       for i in range(50)])


def client(url: str, number: int, deadline: float) -> dict[str, list[float] | int]:
    rng = random.Random(number)
    samples: dict[str, list[float] | int] = {"query": [], "put": [], "errors": 0}
    with requests.Session() as session:
        for request in range(MAX_REQUESTS):
            if time.monotonic() > deadline:
                break
            kind = "put" if rng.random() < 0.2 else "query"
            body = put_body(number, request) if kind == "put" else query_body(rng)
            started = time.perf_counter()
            try:
                answer = session.post(f"{url}/api/{kind}", data=body, timeout=30,
                                      headers={"Content-Type": "application/json"})
                ok = answer.status_code in (200, 204)
            except requests.RequestException:
                ok = False
            elapsed = time.perf_counter() - started
            samples[kind].append(elapsed)  # type: ignore[union-attr]
            samples["errors"] += not ok  # type: ignore[operator]
    return samples


def main() -> None:
    store = demo_store()
    with pytsd_server({"TSD_STORAGE": store, "TSD_CORE_AUTO_CREATE_METRICS": "true"},
                      workers=2) as server:
        deadline = time.monotonic() + DURATION_S
        started = time.perf_counter()
        with VersionSampler(server.url, interval_s=0.05) as sampler, \
                ThreadPoolExecutor(CLIENTS) as pool:
            results = list(pool.map(lambda n: client(server.url, n, deadline), range(CLIENTS)))
        elapsed = time.perf_counter() - started
    total = sum(len(r["query"]) + len(r["put"]) for r in results)  # type: ignore[arg-type]
    errors = sum(int(r["errors"]) for r in results)  # type: ignore[call-overload]
    print(f"mixed load: {CLIENTS} clients, {elapsed:.1f} s, {total} requests, "
          f"{total / elapsed:.0f} req/s, {errors} errors")
    for kind in ("query", "put"):
        ms = np.array([s for r in results for s in r[kind]]) * 1000  # type: ignore[union-attr]
        print(f"  {kind:5} n={ms.size:5d}  p50 {np.percentile(ms, 50):7.1f} ms  "
              f"p99 {np.percentile(ms, 99):7.1f} ms")
    print(f"  /api/version meanwhile: p99 {sampler.p99_ms():.1f} ms, "
          f"{sampler.failures} failures")


if __name__ == "__main__":
    main()
