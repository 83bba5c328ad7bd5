"""`/api/put` on HBase against the real OpenTSDB 2.4.1, same run, alternating rounds.

Issue 27's write shape: 50 points per request spread over 50 series of the current hour, 4
(``--clients``) keep-alive clients (one asyncio loop, prebuilt requests, every answer must be
204). pytsd runs under gunicorn (2 workers) on fresh tables of the project's HBase; OpenTSDB
is a TSD you started on tables of its own (``scripts/opentsdb/opentsdb.sh start``), given by
``--opentsdb`` and, for its CPU, ``--opentsdb-pid`` (its ``run/<name>/tsd.pid``). Each round
sends both servers the same requests, pytsd first then OpenTSDB, then the next round.

Printed per round and server: points/s, and CPU per point (microseconds) of the server process
and of HBase (the Thrift gateway JVM and the HMaster JVM, which in the standalone HBase is also
the region server), read from /proc before and after. The machine is shared: the HBase CPU
includes whatever else used HBase during the round.

    python bench/bench_hbase_put.py [--hbase HOST:PORT] [--opentsdb HOST:PORT --opentsdb-pid PID]
        [--rounds N] [--requests N] [--clients N] [--writers N] [--linger-ms MS] [--appends]
        [--write-rpc thrift|native|both [--zk HOST[:PORT]]]

``--write-rpc`` is pytsd's ``tsd.storage.hbase.write_rpc``; ``both`` runs two pytsd servers on
the same tables, one per transport, and alternates them within each round (the order flipped
every round); each server's CPU is its own process tree's.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack

from common import ROOT, gunicorn_server, pid_cpu_s, tree_cpu_s

from app.storage.hbase import HBaseStore

POINTS_PER_REQUEST = 50
SERIES = 200  # each request: 50 of them, the next block of 50 for the next request


def java_pids(main_class: str) -> list[int]:
    """Processes whose command line names ``main_class`` (HBase's JVMs)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if main_class.encode() in cmdline.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


async def put_all(port: int, path: str, bodies: list[bytes]) -> None:
    """POST ``bodies`` over one keep-alive connection, one at a time; each must get a 204."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for body in bodies:
            writer.write(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         b"application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (path.encode(), len(body), body))
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 204 "):
                raise RuntimeError(f"{head!r}")
    finally:
        writer.close()


async def run_clients(port: int, chunks: list[list[bytes]], path: str = "/api/put") -> None:
    await asyncio.gather(*(put_all(port, path, chunk) for chunk in chunks))


def bodies_for(first_request: int, count: int, hour_s: int) -> list[bytes]:
    """``count`` requests; request r holds one point of 50 series at second r // 4 of the hour."""
    out = []
    for r in range(first_request, first_request + count):
        block, second = r % (SERIES // POINTS_PER_REQUEST), r // (SERIES // POINTS_PER_REQUEST)
        out.append(json.dumps([
            {"metric": "bench.put.fresh", "timestamp": hour_s + second % 3600, "value": r + i,
             "tags": {"host": f"web{block * POINTS_PER_REQUEST + i:03d}", "dc": "lga"}}
            for i in range(POINTS_PER_REQUEST)]).encode())
    return out


def timed_round(port: int, bodies: list[bytes], server_cpu: Callable[[], float],
                hbase_pids: list[int], clients: int, path: str = "/api/put",
                settle_s: float = 0.0) -> tuple[float, float, float]:
    """``(points/s, server CPU us per point, HBase CPU us per point)`` of one round."""
    points = len(bodies) * POINTS_PER_REQUEST
    cpu_before = server_cpu()
    hbase_before = sum(pid_cpu_s(pid) for pid in hbase_pids)
    started = time.perf_counter()
    asyncio.run(run_clients(port, [bodies[i::clients] for i in range(clients)], path))
    elapsed = time.perf_counter() - started
    # OpenTSDB answers before its writes reach HBase (asynchbase flushes its buffer every
    # tsd.storage.flush_interval, 1 s): wait them out so their HBase CPU counts in this round.
    time.sleep(settle_s)
    hbase_s = sum(pid_cpu_s(pid) for pid in hbase_pids) - hbase_before
    return points / elapsed, (server_cpu() - cpu_before) / points * 1e6, hbase_s / points * 1e6


def children_pids() -> set[int]:
    found: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as children:
            found.update(int(child) for child in children.read().split())
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hbase", default=os.environ.get("TSD_TEST_HBASE", "127.0.0.1:9090"))
    parser.add_argument("--opentsdb", help="HOST:PORT of a running OpenTSDB TSD")
    parser.add_argument("--opentsdb-pid", type=int, help="its JVM's pid, for its CPU")
    parser.add_argument("--opentsdb-sync", action="store_true",
                        help="OpenTSDB's /api/put?sync: answered once HBase has the points, "
                             "as pytsd always is (without it OpenTSDB answers first)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=400, help="per round and server")
    parser.add_argument("--appends", action="store_true", help="pytsd with enable_appends")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--writers", type=int, default=4,
                        help="tsd.storage.hbase.writers (0: no batching, each request's own call)")
    parser.add_argument("--linger-ms", default="1.0",
                        help="tsd.storage.hbase.write_linger_ms; a comma list: a server each")
    parser.add_argument("--write-rpc", choices=("thrift", "native", "both"), default="thrift",
                        help="pytsd's tsd.storage.hbase.write_rpc (both: a server of each)")
    parser.add_argument("--zk", default=None, help="tsd.storage.hbase.zk_quorum (default: "
                        "HBase's host, port 2181)")
    args = parser.parse_args()
    hbase_pids = java_pids("org.apache.hadoop.hbase.thrift.ThriftServer") + java_pids(
        "org.apache.hadoop.hbase.master.HMaster")
    prefix = f"benchput{uuid.uuid4().hex[:8]}_"
    env = {"TSD_STORAGE": f"hbase://{args.hbase}", "TSD_STORAGE_HBASE_TABLE_PREFIX": prefix,
           "TSD_CORE_AUTO_CREATE_METRICS": "true",
           "TSD_STORAGE_ENABLE_APPENDS": str(args.appends).lower(),
           "TSD_STORAGE_HBASE_WRITERS": str(args.writers)}
    subprocess.run([sys.executable, "-m", "app.cli", "create-tables"], env={**os.environ, **env},
                   cwd=ROOT, check=True, capture_output=True)
    hour_s = int(time.time()) // 3600 * 3600
    print(f"/api/put, {POINTS_PER_REQUEST} points per request over {POINTS_PER_REQUEST} series "
          f"of the current hour, {args.clients} clients, {args.requests} requests per round; pytsd "
          f"{args.workers} workers, writers {args.writers}, linger {args.linger_ms} ms"
          f"{', appends' if args.appends else ''}; OpenTSDB "
          f"{'?sync' if args.opentsdb_sync else 'without sync'}; HBase JVMs {hbase_pids}; "
          f"load average {os.getloadavg()[0]:.1f} (a shared machine)")
    rpcs = ("thrift", "native") if args.write_rpc == "both" else (args.write_rpc,)
    lingers = args.linger_ms.split(",")
    zk_quorum = args.zk or args.hbase.rpartition(":")[0] + ":2181"
    try:
        with ExitStack() as stack:
            servers: dict[str, tuple[int, Callable[[], float]]] = {}
            for rpc, linger in ((rpc, linger) for rpc in rpcs for linger in lingers):
                before = children_pids()
                url = stack.enter_context(gunicorn_server(
                    {**env, "TSD_STORAGE_HBASE_WRITE_RPC": rpc,
                     "TSD_STORAGE_HBASE_WRITE_LINGER_MS": linger,
                     "TSD_STORAGE_HBASE_ZK_QUORUM": zk_quorum}, workers=args.workers))
                (master,) = children_pids() - before
                label = f"{rpc} linger {linger}" if len(lingers) > 1 else rpc
                servers[label] = (int(url.rsplit(":", 1)[1]),
                                  functools.partial(tree_cpu_s, master))
            warm = bodies_for(0, SERIES // POINTS_PER_REQUEST, hour_s)
            for port, _ in servers.values():
                asyncio.run(run_clients(port, [warm]))  # UIDs and templates
            if args.opentsdb:
                asyncio.run(run_clients(int(args.opentsdb.rsplit(":", 1)[1]), [warm]))
            sent = len(warm)
            pid = args.opentsdb_pid

            def opentsdb_cpu() -> float:
                return pid_cpu_s(pid) if pid else 0.0

            for round_no in range(args.rounds):
                bodies = bodies_for(sent, args.requests, hour_s)
                sent += args.requests
                order = list(servers.items())
                results: dict[str, tuple[float, float, float]] = {}
                for rpc, (port, server_cpu) in order[::-1] if round_no % 2 else order:
                    rate, cpu, hb = timed_round(port, bodies_for(sent, args.requests, hour_s),
                                                server_cpu, hbase_pids, args.clients)
                    sent += args.requests
                    results[rpc] = rate, cpu, hb
                    print(f"round {round_no}: pytsd {rpc:<6} {rate:>9,.0f} points/s, server "
                          f"{cpu:6.1f} us/point, HBase {hb:6.1f} us/point")
                if args.opentsdb:
                    rate_o, cpu_o, hb_o = timed_round(
                        int(args.opentsdb.rsplit(":", 1)[1]), bodies, opentsdb_cpu, hbase_pids,
                        args.clients, "/api/put?sync" if args.opentsdb_sync else "/api/put",
                        settle_s=1.5)
                    print(f"round {round_no}: OpenTSDB     {rate_o:>9,.0f} points/s, server "
                          f"{cpu_o:6.1f} us/point, HBase {hb_o:6.1f} us/point")
                    for rpc, (rate, cpu, hb) in results.items():
                        print(f"round {round_no}: pytsd {rpc}/OpenTSDB {rate / rate_o:.2f}x "
                              f"points/s, {(cpu + hb) / (cpu_o + hb_o):.2f}x CPU per point")
    finally:
        host, _, port_text = args.hbase.rpartition(":")
        store = HBaseStore(host, int(port_text), prefix, timeout_ms=60_000)
        store.drop_tables()
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
