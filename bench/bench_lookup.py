"""Suggest, lookup and last-point latency on a metric with 100k series (embedded SQLite store).

Generates ``bench.cpu{host=h0000..h0999, cpu=0..99}`` (100,000 series) with one point per series
in each of ``--hours`` hour rows, written straight through ``PointWriter`` into a temp store,
then times requests through the Flask app in-process (JSON encoding included, no sockets) and
prints p50/p95 wall-clock latency per request, and the median CPU time. Plain script::

    python bench/bench_lookup.py [--hours 3] [--runs 15]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from common import percentiles_ms, temp_storage_url  # also puts the repo root on sys.path

from app import create_app  # noqa: E402
from app.tsdb.writer import DataPoint, PointWriter  # noqa: E402
from tests.conftest import make_tsdb  # noqa: E402

HOSTS, CPUS = 1000, 100
BATCH = 50_000


def generate(writer: PointWriter, hours: int, end_s: int) -> int:
    """One point per series per hour for ``hours`` hours before ``end_s``; returns points."""
    first_hour = end_s - end_s % 3600 - (hours - 1) * 3600
    batch: list[DataPoint] = []
    count = 0
    for hour in range(hours):
        ts = first_hour + hour * 3600
        for host in range(HOSTS):
            tags_host = f"h{host:04d}"
            for cpu in range(CPUS):
                batch.append(DataPoint("bench.cpu", ts, host + cpu, {"host": tags_host,
                                                                      "cpu": str(cpu)}))
                if len(batch) >= BATCH:
                    count += _write(writer, batch)
                    batch = []
    return count + _write(writer, batch)


def _write(writer: PointWriter, batch: list[DataPoint]) -> int:
    errors = [e for e in writer.write(batch) if e]
    if errors:
        raise SystemExit(f"generation failed: {errors[0]}")
    return len(batch)


def timed(call: Callable[[], object], runs: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU seconds per call (CPU time shows the cost on a busy machine)."""
    call()  # warm the UID caches and SQLite's page cache
    wall, cpu = [], []
    for _ in range(runs):
        started, started_cpu = time.perf_counter(), time.process_time()
        call()
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hours", type=int, default=3)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()

    config = {"tsd.storage": temp_storage_url("lookup.db"), "tsd.core.auto_create_metrics": True}
    tsdb = make_tsdb(config)
    now_s = int(time.time())
    started = time.perf_counter()
    points = generate(PointWriter(tsdb), args.hours, now_s)
    print(f"generated {HOSTS * CPUS:,} series x {args.hours} h = {points:,} rows "
          f"in {time.perf_counter() - started:.1f} s")

    app = create_app(config)
    app.extensions["tsdb"] = tsdb
    client = app.test_client()
    last_hour = now_s - now_s % 3600
    cases = [
        ("suggest tagv q=h05 (max 25)", "/api/suggest?type=tagv&q=h05"),
        ("suggest tagv q= max=1000", "/api/suggest?type=tagv&q=&max=1000"),
        ("suggest metrics q=bench", "/api/suggest?type=metrics&q=bench&max=1000"),
        ("lookup m=bench.cpu (limit 25)", "/api/search/lookup?m=bench.cpu"),
        ("lookup {cpu=7} limit=1000: 1,000 series", "/api/search/lookup?m=bench.cpu{cpu=7}"
         "&limit=1000"),
        ("lookup {host=h0500}: 100 series, whole history",
         "/api/search/lookup?m=bench.cpu{host=h0500}&limit=1000"),
        ("lookup {host=h0500} start=last hour",
         f"/api/search/lookup?m=bench.cpu{{host=h0500}}&limit=1000&start={last_hour}"),
        ("lookup {host=h05*} limit=1000", "/api/search/lookup?m=bench.cpu{host=h05*}"
         "&limit=1000"),
        ("last bench.cpu{host=h0500} back_scan=1: 100 series",
         "/api/query/last?timeseries=bench.cpu{host=h0500}&back_scan=1"),
        ("last 1 tsuid back_scan=24",
         "/api/query/last?tsuids=000001000001000001000002000002&back_scan=24"),
    ]
    for label, url in cases:
        response = client.get(url)
        assert response.status_code == 200, (url, response.get_data(as_text=True)[:200])
        body = response.get_json()
        size = len(body["results"]) if isinstance(body, dict) else len(body)
        runs = args.runs if "whole history" not in label else max(3, args.runs // 3)
        wall, cpu = timed(lambda url=url: client.get(url), runs)
        print(f"{label:<52} {size:>5} items  {percentiles_ms(wall)}  "
              f"(cpu p50 {sorted(cpu)[len(cpu) // 2] * 1000:.2f} ms)")


if __name__ == "__main__":
    main()
