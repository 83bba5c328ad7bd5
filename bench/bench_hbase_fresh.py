"""The current hour on HBase, before compaction: 200 series x 50 minutes at 10 s written one
cell per point (as the line protocol and `/api/put` write them), read by the query shapes of
issue 27 with the hour cache off (and on: ``--cache-on``), or, with ``--compacted``, the
same hour once compacted. Prints wall and client CPU per query (the rest of the wall time is
the Thrift gateway and the region server) and, with ``--profile``, the top costs of one run
of each query under cProfile.

Needs a running HBase (``make hbase-up``); ``--hbase`` or ``TSD_TEST_HBASE`` (default
127.0.0.1:9090). The tables live under a fresh prefix and are dropped at the end.

    python bench/bench_hbase_fresh.py [--hbase HOST:PORT] [--profile] [--runs N]
        [--filters-off] [--cache-on] [--compacted] [--opentsdb HOST:PORT
        [--opentsdb-prefix PREFIX]] [query ...]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import os
import pstats
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import requests

from app import create_app
from app.config import load_config
from app.storage.hbase import HBaseStore
from app.tsdb import TSDB
from app.tsdb.compaction import compact_table
from app.tsdb.points import PointBatch
from app.tsdb.read import closed_ranges
from app.tsdb.schema import create_tables
from app.tsdb.writer import PointWriter

SERIES = 200
STEPS = 300  # 50 minutes at 10 s
QUERIES = {
    "sum": "sum:1m-avg:fresh.cpu",
    "dc": "sum:1m-avg:fresh.cpu{dc=*}",
    "regexp": "sum:fresh.cpu{host=regexp(web00[01].)}",  # 20 of 200 series
    "one": "none:fresh.cpu{host=web0007}",
    "dc1": "sum:1m-avg:fresh.cpu{dc=dc1}",  # a literal on a key that does not sort first
    "count": "sum:1h-count:fresh.cpu",
}


def points(hour_s: int) -> Iterator[tuple[int, dict[str, str], int, float]]:
    """``(series, tags, timestamp, value)`` in time order, across series, as collectors send
    them."""
    rng = np.random.default_rng(1)
    for step in range(STEPS):
        for series in range(SERIES):
            yield (series, {"host": f"web{series:04d}", "dc": f"dc{series % 4}"},
                   hour_s + step * 10, float(round(rng.uniform(0, 100), 2)))


def load(config: dict[str, object], hour_s: int) -> int:
    tsdb = TSDB(load_config(config, {}))
    create_tables(tsdb.store, tsdb.config)
    batch = PointBatch()
    for series, tags, timestamp, value in points(hour_s):
        batch.add(series, "fresh.cpu", tuple(tags.items()), timestamp, value)
    return PointWriter(tsdb, plugins=False).write_batch(batch)


def compact(config: dict[str, object], hour_s: int) -> None:
    """Rewrite every row of the (closed) hour as one compacted cell, as OpenTSDB's compaction
    does: pytsd's compacted cells are OpenTSDB's bytes (tests/integration), so OpenTSDB's
    tables compacted this way read as after its own compaction."""
    tsdb = TSDB(load_config(config, {}))
    stats = compact_table(tsdb.data_table(), tsdb.layout, now_s=hour_s + 7200)
    print(f"compacted {config['tsd.storage.hbase.table_prefix']}: {stats}")


class OpenTSDBClient:
    """A running OpenTSDB TSD, asked over HTTP (pytsd is asked through Flask's test client:
    no HTTP, so OpenTSDB's figures carry a local round trip more)."""

    def __init__(self, address: str) -> None:
        self.url = f"http://{address}"
        self.session = requests.Session()

    def load(self, hour_s: int) -> None:
        """The same points through its ``/api/put`` (one cell each; start the TSD with
        ``tsd.storage.enable_compaction=false`` so they stay uncompacted)."""
        batch: list[dict[str, object]] = []
        for _, tags, timestamp, value in points(hour_s):
            batch.append({"metric": "fresh.cpu", "timestamp": timestamp, "value": value,
                          "tags": tags})
            if len(batch) == 5000:  # ?sync waits ~1 s a request (the flush interval)
                self._put(batch)
                batch = []
        if batch:
            self._put(batch)

    def _put(self, batch: list[dict[str, object]]) -> None:
        answer = self.session.post(f"{self.url}/api/put?sync", json=batch, timeout=60)
        assert answer.status_code == 204, answer.text

    def get(self, path: str) -> Any:
        answer = self.session.get(self.url + path, timeout=120)
        answer.data = answer.content  # as Flask's test response
        return answer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hbase", default=os.environ.get("TSD_TEST_HBASE", "127.0.0.1:9090"))
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--filters-off", action="store_true",
                        help="also run each query with tsd.storage.hbase.scan_filters off, "
                             "in alternating rounds")
    parser.add_argument("--cache-on", action="store_true",
                        help="also run each query with the hour cache on (its default size), "
                             "in alternating rounds (its warm reads: the hour is closed)")
    parser.add_argument("--opentsdb", help="HOST:PORT of a running OpenTSDB TSD (compaction "
                        "off) to load the same points into and ask in the same rounds")
    parser.add_argument("--opentsdb-prefix", default="lead_",
                        help="that TSD's table prefix (OPENTSDB_TABLE_PREFIX), for --compacted")
    parser.add_argument("--compacted", action="store_true",
                        help="compact the hour first (pytsd's compaction, on OpenTSDB's tables "
                        "too: the same bytes OpenTSDB's own compaction writes) and read "
                        "compacted rows instead")
    parser.add_argument("queries", nargs="*", default=list(QUERIES))
    args = parser.parse_args()
    prefix = f"fresh{uuid.uuid4().hex[:8]}_"
    hour_s = int(time.time()) // 3600 * 3600 - 3600
    config = {"tsd.storage": f"hbase://{args.hbase}", "tsd.storage.hbase.table_prefix": prefix,
              "tsd.storage.hbase.timeout_ms": 60_000, "tsd.core.auto_create_metrics": True,
              "tsd.query.cache.max_bytes": 0, "tsd.query.split.enable": False}
    host, _, port = args.hbase.rpartition(":")
    try:
        print(f"stored {load(config, hour_s):,} points, one cell each")
        # With --filters-off, rounds alternate between the two settings in the same run.
        modes = {"filters on": True, "filters off": False} if args.filters_off else {"": True}
        clients: dict[str, Any] = {
            label: create_app({**config, "tsd.storage.hbase.scan_filters": on}).test_client()
            for label, on in modes.items()}
        if args.cache_on:  # the same, the hour cache on
            cached = {key: value for key, value in config.items()
                      if key != "tsd.query.cache.max_bytes"}
            clients["cache on"] = create_app(cached).test_client()
        if args.opentsdb:
            opentsdb = OpenTSDBClient(args.opentsdb)
            opentsdb.load(hour_s)
            clients["opentsdb"] = opentsdb
        if args.compacted:
            compact(config, hour_s)
            if args.opentsdb:
                compact({**config, "tsd.storage.hbase.table_prefix": args.opentsdb_prefix},
                        hour_s)
        if args.cache_on:
            # A closed hour's range entry is kept once its newest cell is this old: read the
            # hour as a dashboard finds it (before, every cached read stamps it twice).
            time.sleep(closed_ranges.RANGE_SETTLED_MS / 1000 + 1)
        for name in args.queries:
            url = f"/api/query?start={hour_s}&end={hour_s + 3599}&m={QUERIES[name]}"
            for client in clients.values():
                assert client.get(url).status_code == 200  # UID caches warm
            walls: dict[str, list[float]] = {label: [] for label in clients}
            cpus: dict[str, list[float]] = {label: [] for label in clients}
            digests = {}
            for _ in range(args.runs):
                for label, client in clients.items():
                    started, cpu = time.perf_counter(), time.process_time()
                    response = client.get(url)
                    walls[label].append((time.perf_counter() - started) * 1000)
                    cpus[label].append((time.process_time() - cpu) * 1000)
                    digests[label] = hashlib.md5(response.data).hexdigest()[:10]
            for label in clients:
                print(f"{name:<7} {label:<11} wall median {_median(walls[label]):6.0f} ms, "
                      f"client CPU median {_median(cpus[label]):5.0f} ms  "
                      f"(answer md5 {digests[label]})")
            client = next(iter(clients.values()))
            if args.profile:
                profile = cProfile.Profile()
                profile.runcall(client.get, url)
                pstats.Stats(profile).sort_stats("tottime").print_stats(12)
    finally:
        HBaseStore(host, int(port), prefix).drop_tables()
    return 0


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


if __name__ == "__main__":
    sys.exit(main())
