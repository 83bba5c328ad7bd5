"""A live "last hour" panel: the open hour read while points keep arriving.

200 series written at 10 s from the start of the current hour (at most 50 minutes back) until
now, one cell per point (as ``/api/put`` and the line protocol write them); then, round after
round, a new point in every series and ``sum:1m-avg`` over the hour, with the hour cache on
and off in alternating rounds (two apps over the same tables, in one process). The open hour's
rows can be neither found in the cache nor kept there, so the two should cost the same
(docs/cache.md). Prints each mode's median wall time and the ratio on/off.

    python bench/bench_live_hour.py [--hbase HOST:PORT] [--rounds N] [--m M]

Without ``--hbase`` the embedded store (a temporary file); with it, tables under a fresh
prefix, dropped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from typing import Any

from common import temp_storage_url

from app import create_app
from app.storage.hbase import HBaseStore
from app.tsdb.schema import create_tables
from app.tsdb.writer import DataPoint, PointWriter

SERIES = 200
STEP_S = 10
BATCH = 5000


def points(first_s: int, last_s: int) -> list[DataPoint]:
    return [DataPoint("live.m", ts, float(ts % 97), {"host": f"h{n:03d}"})
            for ts in range(first_s, last_s, STEP_S) for n in range(SERIES)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hbase", help="HOST:PORT of the HBase Thrift gateway")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--m", default="sum:1m-avg:live.m",
                        help="the panel's m= (e.g. with a wildcard: sum:1m-avg:live.m{host=h0*})")
    args = parser.parse_args()
    prefix = f"live{uuid.uuid4().hex[:8]}_"
    config: dict[str, Any] = {"tsd.core.auto_create_metrics": True,
                              "tsd.query.split.enable": False}
    if args.hbase:
        config.update({"tsd.storage": f"hbase://{args.hbase}",
                       "tsd.storage.hbase.table_prefix": prefix})
    else:
        config["tsd.storage"] = temp_storage_url()
    apps = {"cache on": create_app(config),
            "cache off": create_app({**config, "tsd.query.cache.max_bytes": 0})}
    tsdb = apps["cache on"].extensions["tsdb"]
    try:
        create_tables(tsdb.store, tsdb.config)
        writer = PointWriter(tsdb)
        now_s = int(time.time())
        hour_s = now_s - now_s % 3600
        loaded = points(max(hour_s, now_s - 3000), now_s)
        for at in range(0, len(loaded), BATCH):
            assert not any(writer.write(loaded[at:at + BATCH]))
        print(f"{len(loaded):,} points of the open hour ({SERIES} series)")
        url = f"/api/query?start={hour_s}&m={args.m}"
        walls: dict[str, list[float]] = {mode: [] for mode in apps}
        clients = {mode: app.test_client() for mode, app in apps.items()}
        ts_s = now_s
        for _ in range(args.rounds):
            for mode, client in clients.items():
                ts_s += 1
                assert not any(writer.write(points(ts_s, ts_s + 1)))
                started = time.perf_counter()
                assert client.get(url).status_code == 200
                walls[mode].append((time.perf_counter() - started) * 1000)
        medians = {mode: statistics.median(values[1:]) for mode, values in walls.items()}
        for mode, median in medians.items():
            print(f"{mode:<10} wall median {median:6.0f} ms  {[round(w) for w in walls[mode]]}")
        print(f"cache on / cache off: {medians['cache on'] / medians['cache off']:.2f}")
    finally:
        if args.hbase:
            host, _, port = args.hbase.rpartition(":")
            HBaseStore(host, int(port), prefix).drop_tables()
    return 0


if __name__ == "__main__":
    sys.exit(main())
