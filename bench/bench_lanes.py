"""Admission lanes under load (issue 25): a real pytsd (gunicorn, 2 workers) over the demo day,
4 clients running an expensive query back to back (2 per worker: 24 h, rate, ``host=*``),
while one process samples a one-series 1 h query and another ``/api/version``. Bounded: 15 s.
``BENCH_ONE_LANE=1`` runs every query in one lane, as before. Prints the cheap query's and
/api/version's p50/p99, and how the expensive queries fared (served, or 503 with Retry-After
past ``tsd.query.max_queue_ms``).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from typing import Any

import numpy as np
import requests
from serving import VersionSampler, demo_store, pytsd_server

DURATION_S = 15.0
EXPENSIVE = "/api/query?start=24h-ago&m=sum:rate:sys.cpu.user{host=*}"
CHEAP = "/api/query?start=1h-ago&m=sum:sys.cpu.user{host=web01}"


def expensive_loop(url: str, stop: threading.Event, codes: list[int]) -> None:
    with requests.Session() as session:
        while not stop.is_set():
            codes.append(session.get(url + EXPENSIVE, timeout=60).status_code)


def cheap_sampler(url: str, stop: Any, sender: Any) -> None:
    samples = []
    with requests.Session() as session:
        while not stop.is_set():
            started = time.perf_counter()
            ok = session.get(url + CHEAP, timeout=30).status_code == 200
            samples.append((time.perf_counter() - started) if ok else float("inf"))
            stop.wait(0.02)
    sender.send(samples)


def pct_ms(samples: list[float], pct: float) -> float:
    return float(np.percentile(np.array(samples), pct) * 1000)


def main() -> None:
    # BENCH_ONE_LANE=1: every query in the one cheap lane, as before the lanes (a baseline).
    threshold = "1000000000000" if os.environ.get("BENCH_ONE_LANE") else "50000"
    settings = {"TSD_STORAGE": demo_store(), "TSD_QUERY_EXPENSIVE_POINTS": threshold}
    with pytsd_server(settings, workers=2) as server:
        stop, codes = threading.Event(), []  # type: ignore[var-annotated]
        loops = [threading.Thread(target=expensive_loop, args=(server.url, stop, codes))
                 for _ in range(4)]
        for loop in loops:
            loop.start()
        time.sleep(1.0)
        helpers_cpu_s = server.split_helpers_cpu_s()
        cheap_stop = multiprocessing.Event()
        receiver, sender = multiprocessing.Pipe(duplex=False)
        cheap = multiprocessing.Process(target=cheap_sampler,
                                        args=(server.url, cheap_stop, sender))
        with VersionSampler(server.url) as version:
            cheap.start()
            time.sleep(DURATION_S)
            cheap_stop.set()
            cheap_samples = receiver.recv()
            cheap.join()
        helpers_cpu_s = server.split_helpers_cpu_s() - helpers_cpu_s
        stop.set()
        for loop in loops:
            loop.join()
    print(f"cheap 1-series 1 h query: {len(cheap_samples)} samples, "
          f"p50 {pct_ms(cheap_samples, 50):.0f} ms, p99 {pct_ms(cheap_samples, 99):.0f} ms")
    print(f"/api/version: {len(version.samples_s)} samples, "
          f"p50 {pct_ms(version.samples_s, 50):.1f} ms, p99 {version.p99_ms():.1f} ms, "
          f"{version.failures} failures")
    print(f"expensive: {codes.count(200)} served, {codes.count(503)} refused (503), "
          f"other {len(codes) - codes.count(200) - codes.count(503)}")
    # The split helpers' CPU while sampled: how much of the expensive reads ran split.
    print(f"split helpers: {helpers_cpu_s:.1f} CPU-s in the {DURATION_S:.0f} s sampled")


if __name__ == "__main__":
    main()
