"""Issue 27: one whole-metric read of fresh rows (200 series x 300 points, one cell per point,
uncompacted) through the Thrift1 gateway (``HBaseTable.scan``) and through HBase's native RPC
(``app.storage.hbase_native``), in alternating rounds of the same run; then the query
``sum:1m-avg:fresh.cpu`` over them through the Flask app (hour cache off) with
``tsd.storage.hbase.scan_rpc`` ``thrift`` and ``native``. Prints, per transport, the median
wall time, this process's CPU, and the CPU the HBase JVMs burnt meanwhile (the master JVM,
which holds the region server, and the Thrift gateway; their pid files are in
``<hbase dir>/run``), and checks both read the same rows and answer the same JSON.

    python bench/bench_hbase_native.py [--hbase HOST:PORT] [--zk HOST[:PORT]]
        [--hbase-dir DIR] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app import create_app  # noqa: E402
from app.storage.hbase import HBaseStore  # noqa: E402
from app.storage.hbase_native.client import NativeClient  # noqa: E402
from app.storage.hbase_native.scan import TableScan  # noqa: E402
from bench.bench_hbase_fresh import load  # noqa: E402
from bench.common import pid_cpu_s  # noqa: E402

ROWS_PER_CALL = 1000


def _pid(hbase_dir: Path, name: str) -> int | None:
    try:
        return int((hbase_dir / "run" / f"{name}.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hbase", default=os.environ.get("TSD_TEST_HBASE", "127.0.0.1:9090"))
    parser.add_argument("--zk", default=None,
                        help="ZooKeeper quorum (default: HBase's host, port 2181)")
    parser.add_argument("--hbase-dir", default=str(Path(__file__).resolve().parent.parent
                                                   / ".hbase"))
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    host, _, port = args.hbase.rpartition(":")
    pids = {name: _pid(Path(args.hbase_dir), name) for name in ("master", "thrift")}
    prefix = f"native{uuid.uuid4().hex[:8]}_"
    hour_s = int(time.time()) // 3600 * 3600 - 3600
    config = {"tsd.storage": f"hbase://{args.hbase}", "tsd.storage.hbase.table_prefix": prefix,
              "tsd.storage.hbase.timeout_ms": 60_000, "tsd.core.auto_create_metrics": True}
    store = HBaseStore(host, int(port), prefix, timeout_ms=60_000, writers=0)
    native = NativeClient(args.zk or host, timeout_s=60)
    try:
        print(f"stored {load(config, hour_s):,} points, one cell each")
        table = store.table("tsdb")

        def thrift() -> list[tuple[bytes, bytes, bytes]]:
            return [(row, cells.joined_columns, cells.joined_values)
                    for row, cells in table.scan(b"", None)]

        def rpc() -> list[tuple[bytes, bytes, bytes]]:
            scan = TableScan(native, table.full_name, b"", None, [], None)
            out = []
            while not scan.finished:
                # The same row form as the Thrift path hands the reader (``row_cells``).
                for row in scan.rows(ROWS_PER_CALL):
                    cells = row.cells()
                    out.append((row.row, cells.joined_columns, cells.joined_values))
            return out

        readers: dict[str, Callable[[], list[tuple[bytes, bytes, bytes]]]] = {
            "thrift": thrift, "native": rpc}
        assert thrift() == rpc(), "the two transports read different rows"
        rows = thrift()
        print(f"{len(rows)} rows, {sum(len(r[2]) for r in rows):,} value bytes")
        print("raw scan of the whole table:")
        _rounds(readers, pids, args.runs)
        url = f"/api/query?start={hour_s}&end={hour_s + 3599}&m=sum:1m-avg:fresh.cpu"
        query_config = {**config, "tsd.query.cache.max_bytes": 0,
                        "tsd.query.split.enable": False}
        clients = {rpc_name: create_app({**query_config, "tsd.storage.hbase.scan_rpc": rpc_name,
                                         "tsd.storage.hbase.zk_quorum": args.zk or host}
                                        ).test_client() for rpc_name in ("thrift", "native")}
        answers = {name: client.get(url).get_data() for name, client in clients.items()}
        assert answers["thrift"] == answers["native"], "the two transports answered differently"
        print(f"query {url}:")
        _rounds({name: (lambda client=client: client.get(url)) for name, client in
                 clients.items()}, pids, args.runs)
    finally:
        native.close()
        store.drop_tables()
    return 0


def _rounds(readers: dict[str, Callable[[], object]], pids: dict[str, int | None],
            runs: int) -> None:
    samples: dict[str, list[dict[str, float]]] = {label: [] for label in readers}
    for _ in range(runs):
        for label, read in readers.items():
            samples[label].append(_measure(read, pids))
    for label, measured in samples.items():
        # CPU as a mean: /proc counts in clock ticks (10 ms), too coarse for one run's median.
        line = "  ".join(
            f"{key} {_median(values) if key == 'wall' else sum(values) / runs:6.1f} ms"
            for key in measured[0] for values in [[run[key] for run in measured]])
        print(f"  {label:<7} {runs} runs (wall: median, CPU: mean): {line}")


def _measure(read: Callable[[], object], pids: dict[str, int | None]) -> dict[str, float]:
    jvm_before = {name: pid_cpu_s(pid) for name, pid in pids.items() if pid}
    started, cpu = time.perf_counter(), time.process_time()
    read()
    out = {"wall": (time.perf_counter() - started) * 1000,
           "pytsd cpu": (time.process_time() - cpu) * 1000}
    for name, before in jvm_before.items():
        pid = pids[name]
        assert pid is not None
        out[f"{name} jvm cpu"] = (pid_cpu_s(pid) - before) * 1000
    out["total cpu"] = sum(value for key, value in out.items() if "cpu" in key)
    return out


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


if __name__ == "__main__":
    sys.exit(main())
