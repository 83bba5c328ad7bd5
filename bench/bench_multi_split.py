"""Issue 27: a batch of one-cell rows written natively as one ``Multi`` against the same rows
split over four ``Multi`` calls in flight at once (what the write batcher did for the Thrift
gateway: a line-protocol segment of 1,000 lines became four calls of 250 rows), alternating
rounds of the same run. Prints per way the median wall time of a batch and the region
server's CPU per row (the HMaster JVM of the standalone HBase; it includes whatever else uses
HBase meanwhile).

    python bench/bench_multi_split.py [--hbase HOST:PORT] [--zk HOST[:PORT]] [--rows N]
        [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.storage.hbase import HBaseStore  # noqa: E402
from app.storage.hbase_native.client import NativeClient  # noqa: E402
from app.storage.hbase_native.multi import MultiWriter  # noqa: E402
from bench.bench_hbase_put import java_pids  # noqa: E402
from bench.common import pid_cpu_s  # noqa: E402

SPLIT = 4  # the batcher's default writers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hbase", default=os.environ.get("TSD_TEST_HBASE", "127.0.0.1:9090"))
    parser.add_argument("--zk", default=None)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    host, _, port = args.hbase.rpartition(":")
    region_server = java_pids("org.apache.hadoop.hbase.master.HMaster")
    store = HBaseStore(host, int(port), f"split{uuid.uuid4().hex[:8]}_", writers=0)
    store.create_table("d", {"t": {}})
    client = NativeClient(args.zk or f"{host}:2181")
    writer = MultiWriter(client.call, client.regions, client.zk_quorum)
    table = store.full_name("d")
    walls: dict[str, list[float]] = {"one call": [], f"{SPLIT} calls": []}
    cpu_s = dict.fromkeys(walls, 0.0)
    pool = ThreadPoolExecutor(SPLIT)
    batch = 0
    try:
        for round_no in range(args.rounds):
            ways = list(walls)
            for way in ways[::-1] if round_no % 2 else ways:
                batch += 1
                rows = [((batch * 10**6 + i).to_bytes(8, "big"), {b"t:\x00\x10": b"\x07"})
                        for i in range(args.rows)]
                before = sum(map(pid_cpu_s, region_server))
                started = time.perf_counter()
                if way == "one call":
                    writer.put(table, rows)
                else:
                    list(pool.map(lambda part: writer.put(table, part),
                                  [rows[i::SPLIT] for i in range(SPLIT)]))
                walls[way].append(time.perf_counter() - started)
                cpu_s[way] += sum(map(pid_cpu_s, region_server)) - before
        print(f"{args.rows} one-cell rows a batch, {args.rounds} rounds, load average "
              f"{os.getloadavg()[0]:.1f}")
        for way, times in walls.items():
            print(f"  {way:<8} median {statistics.median(times) * 1e3:6.2f} ms a batch, region "
                  f"server {cpu_s[way] / (args.rounds * args.rows) * 1e6:5.2f} us a row")
    finally:
        pool.shutdown()
        writer.close()
        client.close()
        store.drop_tables()
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
