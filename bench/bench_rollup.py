"""Rollup backfill and rollup reads, on the embedded store and on HBase, in one run.

Loads ``--series`` series × ``--hours`` hours at 10 s (compacted raw rows) into each backend,
times ``compute_rollups`` (the code behind ``pytsd rollup``) into the 1-minute and 1-hour
tables, then the same downsampled queries from rollups and from raw rows (``rollup_raw``),
through the app in-process. Figures: wall and this process's CPU seconds (HBase's own CPU,
in its JVM, is not counted), medians of ``RUNS``, and the rollup/raw ratio of the same run.

    python bench/bench_rollup.py [--hbase HOST:PORT] [--series N] [--hours H] [--skip-embedded]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
from common import temp_storage_url

from app.config import load_config
from app.storage.codec_bulk import encode_series
from app.tsdb import TSDB, hour_cache
from app.tsdb.read.closed_ranges import RANGE_SETTLED_MS
from app.tsdb.rollups import compute_rollups
from app.tsdb.schema import create_tables
from app.tsdb.writer import PointWriter

RUNS = 5
STEP_S = 10
METRIC = "bench.roll"
ROLLUPS = {"aggregationIds": {"sum": 0, "count": 1, "min": 2, "max": 3}, "intervals": [
    {"table": "tsdb", "preAggregationTable": "tsdb-preagg", "interval": "1s", "rowSpan": "1h",
     "defaultInterval": True},
    {"table": "tsdb-rollup-1m", "preAggregationTable": "tsdb-rollup-agg-1m", "interval": "1m",
     "rowSpan": "1h"},
    {"table": "tsdb-rollup-1h", "preAggregationTable": "tsdb-rollup-agg-1h", "interval": "1h",
     "rowSpan": "1d"}]}
QUERIES = ["sum:{usage}1h-avg:{m}", "sum:{usage}1m-avg:{m}", "sum:{usage}1h-max:{m}{{host=*}}"]


def load(tsdb: TSDB, series: int, start_s: int, end_s: int) -> int:
    writer = PointWriter(tsdb)
    ts = np.arange(start_s, end_s, STEP_S, dtype=np.int64)
    rng = np.random.default_rng(1)
    for number in range(series):
        template = writer.row_template(METRIC, {"host": f"web{number:04d}"})
        values = np.round(rng.uniform(0, 100, ts.size), 2)
        cells = encode_series(ts, np.zeros(ts.size, np.int64), values, np.ones(ts.size, bool))
        assert cells is not None
        writer.store_cells([(writer.row_for(template, base), q, v) for base, q, v in cells])
    return series * int(ts.size)


def timed(call: Callable[[], Any]) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def run(name: str, config: dict[str, Any], series: int, hours: int) -> None:
    from app import create_app

    end_s = int(time.time()) // 86400 * 86400 - 86400  # well before the rollup horizon
    start_s = end_s - hours * 3600
    tsdb = TSDB(load_config({**config, "tsd.rollups.enable": True,
                             "tsd.rollups.config": json.dumps(ROLLUPS)}, {}))
    create_tables(tsdb.store, tsdb.config)
    try:
        wall, cpu, points = timed(lambda: load(tsdb, series, start_s, end_s))
        print(f"{name}: loaded {points:,} points in {wall:.1f} s")
        wall, cpu, stats = timed(lambda: compute_rollups(tsdb, start_s, end_s))
        print(f"{name}: backfill {stats.points_read:,} points read → {stats.cells_written:,} "
              f"cells in {wall:.1f} s wall, {cpu:.1f} s CPU: "
              f"{stats.cells_written / wall:,.0f} cells/s, {stats.cells_written / cpu:,.0f} "
              f"cells per CPU-second")
        # Closed rows are kept decoded once their newest cell is settled, closed ranges once
        # the range's newest cell is: wait for that, so both paths are measured as a
        # dashboard's refresh reads them (the first run is cold).
        time.sleep(max(hour_cache.SETTLED_MS, RANGE_SETTLED_MS) / 1000 + 1)
        app = create_app(dict(tsdb.config))
        app.extensions["tsdb"] = tsdb
        client = app.test_client()
        for template in QUERIES:
            figures = {}
            for usage in ("", "rollup_raw:"):
                m = template.format(usage=usage, m=METRIC)
                url = f"/api/query?start={start_s}&end={end_s - 1}&m={m}"
                samples = []
                for _ in range(RUNS + 1):
                    samples.append(timed(lambda: client.get(url)))  # noqa: B023
                answer = samples[-1][2]
                assert answer.status_code == 200, answer.get_data(as_text=True)[:300]
                first = samples[0][0]
                walls = [s[0] for s in samples[1:]]
                cpus = [s[1] for s in samples[1:]]
                figures[usage] = (statistics.median(walls), statistics.median(cpus), first)
            (rw, rc, r1), (aw, ac, a1) = figures[""], figures["rollup_raw:"]
            print(f"{name}: {template.format(usage='', m=METRIC):28} rollups {rw * 1e3:8.1f} ms "
                  f"({rc * 1e3:7.1f} ms CPU) | raw {aw * 1e3:8.1f} ms ({ac * 1e3:7.1f} ms CPU) "
                  f"| rollup/raw {rw / aw:5.2f}× wall, {rc / ac:5.2f}× CPU | first (cold) run "
                  f"{r1 * 1e3:.1f} vs {a1 * 1e3:.1f} ms")
    finally:
        drop = getattr(tsdb.store, "drop_tables", None)
        if drop is not None:
            drop()
        tsdb.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hbase", default=os.environ.get("TSD_TEST_HBASE", "127.0.0.1:9090"))
    parser.add_argument("--series", type=int, default=100)
    parser.add_argument("--hours", type=int, default=12)
    parser.add_argument("--skip-embedded", action="store_true")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; {args.series} series × {args.hours} h "
          f"at {STEP_S} s")
    if not args.skip_embedded:
        run("embedded", {"tsd.storage": temp_storage_url(), "tsd.core.auto_create_metrics": True},
            args.series, args.hours)
    run("hbase", {"tsd.storage": f"hbase://{args.hbase}", "tsd.core.auto_create_metrics": True,
                  "tsd.storage.hbase.table_prefix": f"benchroll{uuid.uuid4().hex[:6]}_",
                  "tsd.storage.hbase.timeout_ms": 60_000}, args.series, args.hours)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
