"""The put and query benchmarks on a real HBase, beside the embedded store, plus the cost of
the Thrift hop: a raw happybase scan of the rows a query reads vs the whole query.

Needs a running HBase (``make hbase-up``); its Thrift address comes from ``--hbase`` or
``TSD_TEST_HBASE`` (default 127.0.0.1:9090). Every table lives under a fresh prefix and is
dropped at the end. Without HBase it says so and exits 0, so ``make bench`` still runs.

    python bench/bench_hbase.py [--hbase HOST:PORT] [--skip-embedded] [--only query|put|hop]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import bench_put
import bench_query
import happybase
from common import percentiles_ms

from app import create_app
from app.config import load_config
from app.errors import StorageError
from app.storage.hbase import HBaseStore
from app.tsdb import TSDB

RUNS = 5
SCAN_BATCHES = (100, 300, 1000, 3000)


def hbase_store(address: str, prefix: str) -> HBaseStore:
    host, _, port = address.rpartition(":")
    return HBaseStore(host, int(port), prefix, timeout_ms=60_000)


def hbase_config(address: str, prefix: str) -> dict[str, object]:
    return {"tsd.storage": f"hbase://{address}", "tsd.storage.hbase.table_prefix": prefix,
            "tsd.storage.hbase.timeout_ms": 60_000, "tsd.core.auto_create_metrics": True}


def best_of(fn: Callable[[], Any], runs: int = RUNS) -> tuple[list[float], Any]:
    samples, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - started)
    return samples, result


def raw_scan(table: happybase.Table, start: bytes, stop: bytes, batch: int) -> tuple[int, int]:
    """Rows and value bytes of a plain happybase scan: the Thrift hop and nothing else."""
    rows = size = 0
    for _, cells in table.scan(row_start=start, row_stop=stop, columns=[b"t"],
                               batch_size=batch):
        rows += 1
        size += sum(len(value) for value in cells.values())
    return rows, size


def thrift_hop(address: str, prefix: str) -> None:
    """The first query's rows read four ways: raw happybase, pytsd's adapter, the whole query."""
    config = hbase_config(address, prefix)
    tsdb = TSDB(load_config(config, {}))
    metric_uid = tsdb.metrics.get_id("bench.cpu")
    # The day's 24 hour rows of every series: what the query scans.
    start, stop = tsdb.layout.metric_scan_range(b"", metric_uid, bench_query.START_S,
                                                bench_query.END_S - 1)
    host, _, port = address.rpartition(":")
    raw = happybase.Connection(host, int(port), timeout=60_000)
    table = raw.table(prefix + tsdb.data_table_name)
    print("Thrift hop, rows of 'sum:1m-avg:bench.cpu' (24 h x 1,000 series, compacted):")
    for batch in SCAN_BATCHES:
        samples, (rows, size) = best_of(lambda b=batch: raw_scan(table, start, stop, b), 3)
        print(f"  raw happybase scan, {batch:>4} rows/call: {percentiles_ms(samples)}; "
              f"{rows:,} rows, {size / 2**20:.1f} MiB, {rows / min(samples):,.0f} rows/s")
    raw.close()
    data = tsdb.data_table()
    samples, rows = best_of(lambda: sum(1 for _ in data.scan(row_start=start, row_stop=stop,
                                                              columns=[b"t"])), 3)
    print(f"  pytsd adapter scan (HBaseTable.scan): {percentiles_ms(samples)}; {rows:,} rows")
    client = create_app(config).test_client()
    url = (f"/api/query?start={bench_query.START_S}&end={bench_query.END_S - 1}"
           "&m=sum:1m-avg:bench.cpu")
    client.get(url)
    samples, _ = best_of(lambda: client.get(url))
    print(f"  whole query (scan + decode + engine + JSON): {percentiles_ms(samples)}")
    tsdb.close()


@contextmanager
def tables(address: str) -> Iterator[str]:
    """Fresh table prefixes, dropped again when the benchmark is done."""
    prefix = f"bench{uuid.uuid4().hex[:8]}_"
    try:
        yield prefix
    finally:
        store = hbase_store(address, prefix)
        store.drop_tables()
        store.close()


def bench_query_both(address: str, embedded: bool, hop: bool) -> None:
    if embedded:
        print("== query, embedded store")
        bench_query.main()
    with tables(address) as prefix:
        print("== query, HBase (Thrift1 on loopback)")
        bench_query.main(hbase_config(address, prefix))
        if hop:
            thrift_hop(address, prefix)


def bench_put_both(address: str, embedded: bool) -> None:
    if embedded:
        print("== put, embedded store")
        bench_put.bench_http_put()
        bench_put.bench_import()
    print("== put, HBase (Thrift1 on loopback)")
    with tables(address) as prefix:
        env = {"TSD_STORAGE": f"hbase://{address}", "TSD_STORAGE_HBASE_TABLE_PREFIX": prefix}
        bench_put.bench_http_put(env, "HBase")
    with tables(address) as prefix:
        env = {"TSD_STORAGE": f"hbase://{address}", "TSD_STORAGE_HBASE_TABLE_PREFIX": prefix}
        bench_put.bench_import(env, "HBase")


def reachable(address: str) -> bool:
    store = hbase_store(address, "")
    try:
        store.table_names()
        return True
    except StorageError as exc:
        print(f"bench_hbase: skipped, no HBase at {address}: {exc.message}")
        return False
    finally:
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hbase", default=os.environ.get("TSD_TEST_HBASE", "127.0.0.1:9090"))
    parser.add_argument("--skip-embedded", action="store_true")
    parser.add_argument("--only", choices=("query", "put", "hop"))
    args = parser.parse_args()
    if not reachable(args.hbase):
        return 0
    embedded = not args.skip_embedded
    if args.only in (None, "query", "hop"):
        bench_query_both(args.hbase, embedded and args.only != "hop", hop=args.only != "query")
    if args.only in (None, "put"):
        bench_put_both(args.hbase, embedded)
    return 0


if __name__ == "__main__":
    sys.exit(main())
