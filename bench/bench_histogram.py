"""Histogram throughput: the codec, ``POST /api/histogram`` and a ``percentiles`` query.

In-process (Flask's test client over the embedded store), so the figures are pytsd's own work
per CPU-second, not the network's. Prints, best of several runs, by wall clock and by this
process's CPU time; and for comparison the numeric ``/api/put`` of as many points. Plain
script::

    python bench/bench_histogram.py [--runs 3] [--points 20000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.storage.codec_histogram import SimpleHistogram, decode_simple, encode_simple  # noqa: E402
from tests.conftest import app_over, make_tsdb  # noqa: E402

T0 = 1_356_998_400
BUCKETS = [(0.0, 1.0), (1.0, 2.5), (2.5, 5.0), (5.0, 10.0), (10.0, 25.0), (25.0, 50.0),
           (50.0, 100.0), (100.0, 250.0), (250.0, 500.0), (500.0, 1000.0)]
BATCH = 500


def best(runs: int, work: Callable[[], int]) -> tuple[float, float, int]:
    """(best wall s, best CPU s, units of work) over ``runs``."""
    walls, cpus, units = [], [], 0
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        units = work()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus), units


def report(what: str, figures: tuple[float, float, int], unit: str) -> None:
    wall, cpu, units = figures
    print(f"{what:<44} {units / wall:>10,.0f} {unit}/s wall  {units / cpu:>10,.0f} {unit}/CPU-s")


def points(n: int, hosts: int = 10) -> list[dict[str, object]]:
    return [{"metric": "bench.latency", "timestamp": T0 + i // hosts * 10,
             "tags": {"host": f"web{i % hosts:02d}"},
             "buckets": {f"{lo:g},{hi:g}": (i * 7 + k) % 50 for k, (lo, hi) in enumerate(BUCKETS)}}
            for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--points", type=int, default=20_000)
    args = parser.parse_args()

    histogram = SimpleHistogram(0)
    for k, (lo, hi) in enumerate(BUCKETS):
        histogram.add_bucket(lo, hi, k * 3)
    raw = encode_simple(histogram)
    n = 20_000
    report("codec: encode 10-bucket histograms", best(args.runs, lambda: sum(
        1 for _ in range(n) if encode_simple(histogram))), "hist")
    report("codec: decode 10-bucket histograms", best(args.runs, lambda: sum(
        1 for _ in range(n) if decode_simple(raw, 0))), "hist")

    body = points(args.points)
    numeric = [{"metric": "bench.numeric", "timestamp": p["timestamp"], "tags": p["tags"],
                "value": i} for i, p in enumerate(body)]
    with tempfile.TemporaryDirectory() as tmp:
        tsdb = make_tsdb({"tsd.storage": f"sqlite:///{tmp}/bench.db",
                          "tsd.core.auto_create_metrics": True,
                          "tsd.core.histograms.config":
                              '{"net.opentsdb.core.SimpleHistogramDecoder": 0}'})
        client = app_over(tsdb).test_client()

        def post(path: str, items: list[dict[str, object]]) -> int:
            for i in range(0, len(items), BATCH):
                response = client.post(path, data=json.dumps(items[i:i + BATCH]))
                assert response.status_code == 204, response.get_data(as_text=True)
            return len(items)

        report("POST /api/histogram (batches of 500)", best(args.runs, lambda: post(
            "/api/histogram", body)), "pts")
        report("POST /api/put, as many numeric points", best(args.runs, lambda: post(
            "/api/put", numeric)), "pts")

        def query() -> int:
            response = client.get(f"/api/query?start={T0}&end={T0 + 86400}"
                                  "&m=sum:1m-sum:percentiles[50,90,99]:bench.latency")
            assert response.status_code == 200
            return len(body)

        report("percentiles[50,90,99] 1m-sum over all", best(args.runs, query), "hist")
        tsdb.close()


if __name__ == "__main__":
    main()
