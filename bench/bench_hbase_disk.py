"""Bytes per point on HBase's disk, per column-family compression, after a flush and a major
compaction: what `pytsd create-tables`' default layout saves over uncompressed tables.

The same points (SERIES series x HOURS hours at 10 s, gauges with two decimals, as the
telnet `put` writes them) go into one data table per (compression, row shape): one cell per
point (what `/api/put` and the line protocol write, the current hour before compaction) and
one compacted column per hour row (what compaction and `pytsd import` leave). Each table is
flushed (disable + enable closes its region, which writes its memstore to a store file),
major-compacted through Thrift, and its store files are summed on disk, so this needs an
HBase whose root directory is local (the development HBase: `--hbase-dir`, default
`.hbase/run/data/hbase`). Every table lives under a fresh prefix and is dropped at the end.

    python bench/bench_hbase_disk.py [--hbase HOST:PORT] [--hbase-dir DIR] [--codecs GZ,NONE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

import numpy as np

from app.config import load_config
from app.storage.hbase import HBaseStore
from app.tsdb import TSDB
from app.tsdb.points import PointBatch
from app.tsdb.schema import create_tables, data_family_options
from app.tsdb.writer import PointWriter

SERIES = 200
HOURS = 6
STEP_S = 10
START_S = 1_700_000_000 - 1_700_000_000 % 3600
POINTS_PER_BATCH = 20_000


def config_for(address: str, prefix: str, data_table: str, codec: str) -> dict[str, object]:
    return {"tsd.storage": f"hbase://{address}", "tsd.storage.hbase.table_prefix": prefix,
            "tsd.storage.hbase.timeout_ms": 120_000, "tsd.core.auto_create_metrics": True,
            "tsd.storage.hbase.data_table": data_table, "tsd.storage.hbase.compression": codec}


def load(tsdb: TSDB, compact_rows: bool) -> int:
    """The data set, written in time order across series as collectors send it."""
    writer = PointWriter(tsdb, plugins=False)
    rng = np.random.default_rng(1)
    values = np.round(rng.uniform(0, 100, (SERIES, HOURS * 3600 // STEP_S)), 2)
    tags = [(("host", f"web{n:04d}"), ("dc", f"dc{n % 4}")) for n in range(SERIES)]
    batch, total = PointBatch(), 0
    for hour in range(HOURS):
        steps = range(hour * 3600 // STEP_S, (hour + 1) * 3600 // STEP_S)
        for series in range(SERIES):
            for step in steps:
                batch.add(series, "bench.disk", tags[series], START_S + step * STEP_S,
                          float(values[series, step]))
            if len(batch) >= POINTS_PER_BATCH:
                total += writer.write_batch(batch, compact_rows=compact_rows)
                batch = PointBatch()
        # A compacted row holds one hour of one series: flush whole hours.
        total += writer.write_batch(batch, compact_rows=compact_rows)
        batch = PointBatch()
    return total


def store_bytes(hbase_dir: Path, full_name: str) -> tuple[int, int]:
    """(store files, bytes) of a table's data family on disk."""
    namespace, _, table = full_name.rpartition(":")
    files = [p for p in (hbase_dir / "data" / (namespace or "default") / table).glob("*/t/*")
             if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def flush_and_compact(store: HBaseStore, hbase_dir: Path, full: bytes) -> int:
    store.call("flush", lambda c: c.disableTable(full))
    store.call("flush", lambda c: c.enableTable(full))
    store.call("compact", lambda c: c.majorCompact(full))
    # majorCompact is asynchronous: wait for one store file per region, stable in size.
    last, stable = (-1, -1), 0
    for _ in range(240):
        time.sleep(0.5)
        now = store_bytes(hbase_dir, full.decode())
        stable = stable + 1 if now == last and now[0] == 1 else 0
        if stable >= 4:
            break
        last = now
    return last[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hbase", default=os.environ.get("TSD_TEST_HBASE", "127.0.0.1:9090"))
    parser.add_argument("--hbase-dir", type=Path, default=Path(".hbase/run/data/hbase"))
    parser.add_argument("--codecs", default="GZ,SNAPPY,NONE")
    args = parser.parse_args()
    if not (args.hbase_dir / "data").is_dir():
        print(f"no HBase root directory at {args.hbase_dir} (--hbase-dir)")
        return 0
    prefix = f"disk{uuid.uuid4().hex[:8]}_"
    host, _, port = args.hbase.rpartition(":")
    store = HBaseStore(host, int(port), prefix, timeout_ms=120_000)
    print(f"{SERIES} series x {HOURS} h at {STEP_S} s = {SERIES * HOURS * 360:,} points, "
          "gauges with 2 decimals (4-byte floats)")
    print(f"{'compression':<12} {'row shape':<28} {'bytes':>11} {'bytes/point':>12}")
    try:
        for codec in args.codecs.split(","):
            for compact_rows in (False, True):
                table = f"d_{codec.lower()}_{'compacted' if compact_rows else 'cells'}"
                tsdb = TSDB(load_config(config_for(args.hbase, prefix, table, codec), {}))
                create_tables(tsdb.store, tsdb.config)
                assert data_family_options(tsdb.config)["compression"] == codec
                points = load(tsdb, compact_rows)
                size = flush_and_compact(store, args.hbase_dir, store.full_name(table))
                shape = "one column per hour row" if compact_rows else "one cell per point"
                print(f"{codec:<12} {shape:<28} {size:>11,} {size / points:>12.2f}",
                      flush=True)
    finally:
        store.drop_tables()
    return 0


if __name__ == "__main__":
    sys.exit(main())
