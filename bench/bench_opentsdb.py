"""pytsd against the real OpenTSDB 2.4.1 on the project's HBase, in one command (issue 27).

Starts an OpenTSDB TSD on fresh tables of its own (``scripts/opentsdb/opentsdb.sh``, compaction
off so its rows stay one cell per point, as pytsd's do until compacted) and pytsd servers
(gunicorn) on fresh tables of the same HBase, then, every phase in alternating rounds (pytsd,
then OpenTSDB, then the next round), the same points and queries to both:

1. ingest: the line protocol (``--connections`` connections, the same ``put`` lines to each
   server, a ``version`` after each block as the acknowledgement) and ``/api/put`` (50 points
   per request over 50 series, 4 clients): points/s and CPU per point of the server, the Thrift
   gateway and the region server. OpenTSDB answers both before HBase has the points
   (asynchbase buffers them up to ``tsd.storage.flush_interval``, 1 s); pytsd answers after.
2. issue 27's query shapes over the current hour as written (200 series x 50 minutes at 10 s,
   one cell per point), over HTTP: pytsd with the hour cache off and with it on (its warm
   reads: the hour is closed), and OpenTSDB; median wall time and CPU per query of each
   process (pytsd's server, OpenTSDB's JVM, the gateway, the region server); answers compared.
3. the same queries once the hour is compacted (pytsd's compaction over both table sets: the
   bytes OpenTSDB's own compaction writes, tests/integration).

Not for CI (minutes, and it needs HBase up: ``make hbase-up``). HBase's JVMs are found by
their main classes; their CPU includes anything else using HBase meanwhile.

    python bench/bench_opentsdb.py [--hbase HOST:PORT] [--rounds N] [--runs N]
        [--opentsdb-port PORT] [--skip ingest,query] [--scan-rpc auto|native|thrift]
        [--write-rpc auto|native|thrift] [--zk HOST[:PORT]]

Both RPC settings default to pytsd's own default, ``auto``.
``--scan-rpc native`` runs pytsd's servers with ``tsd.storage.hbase.scan_rpc=native``
(data-table scans over HBase's own RPC, docs/hbase.md "Native scans") and
``tsd.storage.hbase.zk_quorum`` = ``--zk`` (default: HBase's host, port 2181).
``BENCH_OPENTSDB_NAME`` (default ``benchvs``) names OpenTSDB's run dir and table prefix.
``--write-rpc native``: ``tsd.storage.hbase.write_rpc=native`` (puts as ``Multi`` calls to the
region servers, docs/hbase.md "Native writes").
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from pathlib import Path

import bench_hbase_fresh as fresh
import bench_hbase_put as put
import requests
from common import ROOT, pid_cpu_s
from serving import pytsd_server

from app.config import env_name
from app.storage.hbase import HBaseStore
from app.tsdb.read import closed_ranges

# Its run dir and tables' prefix: two benchmarks at once on one HBase need two names.
OPENTSDB_NAME = os.environ.get("BENCH_OPENTSDB_NAME", "benchvs")
LINE_SERIES = 1000  # per connection
LINES_PER_BLOCK = 1000


class Processes:
    """CPU seconds so far of the processes a phase is measured on, by role."""

    def __init__(self, roles: dict[str, Callable[[], list[int]]]) -> None:
        self.roles = roles

    def cpu_s(self) -> dict[str, float]:
        return {role: sum(pid_cpu_s(pid) for pid in pids())
                for role, pids in self.roles.items()}


def start_opentsdb(port: int, hbase: str) -> int:
    env = {**os.environ, "OPENTSDB_NAME": OPENTSDB_NAME, "OPENTSDB_PORT": str(port),
           "OPENTSDB_TABLE_PREFIX": f"{OPENTSDB_NAME}_", "OPENTSDB_FRESH": "1",
           "OPENTSDB_THRIFT": hbase,
           "OPENTSDB_SETTINGS": "tsd.storage.enable_compaction=false"}
    subprocess.run([str(ROOT / "scripts/opentsdb/opentsdb.sh"), "start"], env=env, check=True)
    run = Path(os.environ.get("OPENTSDB_DIR", ROOT / ".opentsdb")) / "run" / OPENTSDB_NAME
    return int((run / "tsd.pid").read_text())


def stop_opentsdb() -> None:
    subprocess.run([str(ROOT / "scripts/opentsdb/opentsdb.sh"), "stop"],
                   env={**os.environ, "OPENTSDB_NAME": OPENTSDB_NAME}, check=False)


def line_blocks(round_no: int, conn: int, blocks: int) -> list[bytes]:
    """``put`` lines of one connection's 1,000 series, a point each per block, 1 s apart per
    block within the current hour, each block ending with ``version`` (its acknowledgement)."""
    hour_s = int(time.time()) // 3600 * 3600
    out = []
    for number in range(blocks):
        second = hour_s + (round_no * blocks + number) % 3600
        lines = [f"put bench.line {second} {(series * 7 + number) % 977} host=h{series:04d} "
                 f"conn=c{conn}\n" for series in range(LINES_PER_BLOCK)]
        out.append(("".join(lines) + "version\n").encode())
    return out


async def send_blocks(port: int, blocks: list[bytes]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for payload in blocks:
            writer.write(payload)
            await writer.drain()
            reply = b""
            while b"Built on" not in reply or not reply.endswith(b"\n"):
                chunk = await reader.read(65536)
                if not chunk:
                    raise RuntimeError(f"connection closed; got {reply!r}")
                reply += chunk
            if b"Built on" in reply and reply.count(b"\n") > 2:
                raise RuntimeError(f"a put was refused: {reply[:300]!r}")
    finally:
        writer.close()


def timed(send: Callable[[], None], points: int, processes: Processes, server_role: str,
          settle_s: float) -> dict[str, float]:
    """Run ``send``, wait ``settle_s``; points/s and each role's CPU microseconds per point."""
    before = processes.cpu_s()
    started = time.perf_counter()
    send()
    elapsed = time.perf_counter() - started
    time.sleep(settle_s)
    after = processes.cpu_s()
    out = {"points/s": points / elapsed}
    for role in (server_role, "gateway", "region server"):
        out[role] = (after[role] - before[role]) / points * 1e6
    return out


def print_ingest(name: str, pytsd: dict[str, float], opentsdb: dict[str, float]) -> None:
    own = pytsd["pytsd"] + pytsd["gateway"] + pytsd["region server"]
    theirs = opentsdb["opentsdb"] + opentsdb["gateway"] + opentsdb["region server"]
    print(f"  {name:<14} pytsd {pytsd['points/s']:>9,.0f} pts/s, us/point: server "
          f"{pytsd['pytsd']:5.1f} gateway {pytsd['gateway']:5.1f} "
          f"region {pytsd['region server']:5.1f}"
          f" | OpenTSDB {opentsdb['points/s']:>9,.0f} pts/s, server {opentsdb['opentsdb']:5.1f} "
          f"gateway {opentsdb['gateway']:4.1f} region {opentsdb['region server']:5.1f} | ratio "
          f"{pytsd['points/s'] / opentsdb['points/s']:.2f}x pts/s, {own / theirs:.2f}x CPU/point")


def send_lines(blocks: list[list[bytes]], port: int) -> None:
    async def every_connection() -> None:
        await asyncio.gather(*(send_blocks(port, mine) for mine in blocks))
    asyncio.run(every_connection())


def send_puts(bodies: list[bytes], clients: int, port: int) -> None:
    asyncio.run(put.run_clients(port, [bodies[i::clients] for i in range(clients)]))


def alternate(servers: dict[str, tuple[int, float]], send: Callable[[int], None], points: int,
              processes: Processes) -> dict[str, dict[str, float]]:
    """One round: ``send`` to each server in turn, timed."""
    return {role: timed(partial(send, port), points, processes, role, settle_s)
            for role, (port, settle_s) in servers.items()}


def ingest(args: argparse.Namespace, pytsd_port: int, processes: Processes) -> None:
    print(f"ingest, {args.rounds} alternating rounds; load average {os.getloadavg()[0]:.1f}")
    # OpenTSDB's buffered writes reach HBase within its flush interval: wait them out.
    servers = {"pytsd": (pytsd_port, 0.0), "opentsdb": (args.opentsdb_port, 1.5)}
    for port, _ in servers.values():  # UIDs assigned before the clock
        send_lines([line_blocks(-1, conn, 1) for conn in range(args.connections)], port)
    for round_no in range(args.rounds):
        blocks = [line_blocks(round_no, conn, args.blocks) for conn in range(args.connections)]
        rows = alternate(servers, partial(send_lines, blocks),
                         args.connections * args.blocks * LINES_PER_BLOCK, processes)
        print_ingest(f"line, round {round_no}", rows["pytsd"], rows["opentsdb"])
    hour_s = int(time.time()) // 3600 * 3600
    for round_no in range(args.rounds):
        bodies = put.bodies_for(round_no * args.requests, args.requests, hour_s)
        rows = alternate(servers, partial(send_puts, bodies, args.clients),
                         args.requests * put.POINTS_PER_REQUEST, processes)
        print_ingest(f"put, round {round_no}", rows["pytsd"], rows["opentsdb"])


def query(args: argparse.Namespace, hour_s: int, urls: dict[str, str], processes: Processes,
          state: str) -> dict[str, dict[str, float]]:
    """Each query shape, ``args.runs`` alternating runs per server; print and return medians."""
    print(f"queries, {state}; load average {os.getloadavg()[0]:.1f}")
    session = requests.Session()
    medians: dict[str, dict[str, float]] = {}
    for name, expression in fresh.QUERIES.items():
        path = f"/api/query?start={hour_s}&end={hour_s + 3599}&m={expression}"
        for url in urls.values():  # UID caches, the cache-on server's entries
            assert session.get(url + path, timeout=300).status_code == 200
        walls: dict[str, list[float]] = {role: [] for role in urls}
        cpus: dict[str, list[dict[str, float]]] = {role: [] for role in urls}
        digests = {}
        for _ in range(args.runs):
            for role, url in urls.items():
                before = processes.cpu_s()
                started = time.perf_counter()
                answer = session.get(url + path, timeout=300)
                walls[role].append((time.perf_counter() - started) * 1000)
                after = processes.cpu_s()
                cpus[role].append({key: (after[key] - before[key]) * 1000 for key in after})
                digests[role] = hashlib.md5(answer.content).hexdigest()[:8]
        for role in urls:
            wall = fresh._median(walls[role])
            server = "opentsdb" if role == "opentsdb" else role
            cpu = {key: fresh._median([c[key] for c in cpus[role]])
                   for key in (server, "gateway", "region server")}
            medians.setdefault(name, {})[role] = wall
            print(f"  {name:<7} {role:<16} {wall:7.0f} ms; CPU ms: server {cpu[server]:5.0f} "
                  f"gateway {cpu['gateway']:5.0f} region {cpu['region server']:5.0f}  "
                  f"(md5 {digests[role]})")
    return medians


def print_ratios(state: str, medians: dict[str, dict[str, float]]) -> None:
    for name, walls in medians.items():
        ratios = ", ".join(f"{role} {walls[role] / walls['opentsdb']:.2f}x"
                           for role in walls if role != "opentsdb")
        print(f"  {state:<12} {name:<7} {ratios}")


def rpc_env(scan_rpc: str, write_rpc: str, zk_quorum: str) -> dict[str, str]:
    """pytsd's environment for ``tsd.storage.hbase.scan_rpc`` and ``write_rpc`` and the quorum
    (always set: the default scan_rpc, ``auto``, would read natively wherever ZooKeeper
    answers)."""
    return {env_name("tsd.storage.hbase.scan_rpc"): scan_rpc,
            env_name("tsd.storage.hbase.write_rpc"): write_rpc,
            env_name("tsd.storage.hbase.zk_quorum"): zk_quorum}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hbase", default=os.environ.get("TSD_TEST_HBASE", "127.0.0.1:9090"))
    parser.add_argument("--opentsdb-port", type=int, default=4390)
    parser.add_argument("--rounds", type=int, default=3, help="ingest rounds per protocol")
    parser.add_argument("--blocks", type=int, default=25, help="line blocks per connection")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--requests", type=int, default=400, help="/api/put requests a round")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--runs", type=int, default=7, help="runs of each query per server")
    parser.add_argument("--skip", default="", help="phases to leave out: ingest, query")
    parser.add_argument("--scan-rpc", choices=("thrift", "native", "auto"), default="auto",
                        help="pytsd's tsd.storage.hbase.scan_rpc (default: pytsd's own default)")
    parser.add_argument("--write-rpc", choices=("thrift", "native", "auto"), default="auto",
                        help="pytsd's tsd.storage.hbase.write_rpc (default: pytsd's own default)")
    parser.add_argument("--zk", default=None, help="tsd.storage.hbase.zk_quorum with "
                        "--scan-rpc or --write-rpc native (default: HBase's host)")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    host, _, port_text = args.hbase.rpartition(":")
    prefix = f"vs{uuid.uuid4().hex[:8]}_"
    hour_s = int(time.time()) // 3600 * 3600 - 3600
    config = {"tsd.storage": f"hbase://{args.hbase}", "tsd.storage.hbase.table_prefix": prefix,
              "tsd.storage.hbase.timeout_ms": 60_000, "tsd.core.auto_create_metrics": True}
    env = {"TSD_STORAGE": f"hbase://{args.hbase}", "TSD_STORAGE_HBASE_TABLE_PREFIX": prefix,
           "TSD_CORE_AUTO_CREATE_METRICS": "true",
           **rpc_env(args.scan_rpc, args.write_rpc, args.zk or host)}
    hbase_roles = {"gateway": lambda: put.java_pids("org.apache.hadoop.hbase.thrift.ThriftServer"),
                   "region server": lambda: put.java_pids("org.apache.hadoop.hbase.master.HMaster")}
    opentsdb_pid = start_opentsdb(args.opentsdb_port, args.hbase)
    opentsdb_url = f"http://127.0.0.1:{args.opentsdb_port}"
    try:
        fresh.load(config, hour_s)  # creates pytsd's tables too
        if "query" not in skip:
            fresh.OpenTSDBClient(f"127.0.0.1:{args.opentsdb_port}").load(hour_s)
        with ExitStack() as stack:
            writer = stack.enter_context(pytsd_server(env, workers=2))
            cache_off = stack.enter_context(pytsd_server(
                {**env, "TSD_QUERY_CACHE_MAX_BYTES": "0"}, workers=1))
            cache_on = stack.enter_context(pytsd_server(env, workers=1))
            roles = {"pytsd": writer.pids, "opentsdb": lambda: [opentsdb_pid], **hbase_roles}
            if "ingest" not in skip:
                ingest(args, writer.port, Processes(roles))
            if "query" in skip:
                return 0
            urls = {"pytsd cache off": cache_off.url, "pytsd cache on": cache_on.url,
                    "opentsdb": opentsdb_url}
            roles = {"pytsd cache off": cache_off.pids, "pytsd cache on": cache_on.pids,
                     "opentsdb": lambda: [opentsdb_pid], **hbase_roles}
            # A closed hour's range entry is kept once its newest cell is this old.
            time.sleep(closed_ranges.RANGE_SETTLED_MS / 1000 + 1)
            as_written = query(args, hour_s, urls, Processes(roles), "rows as written")
            fresh.compact(config, hour_s)
            fresh.compact({**config, "tsd.storage.hbase.table_prefix": f"{OPENTSDB_NAME}_"},
                          hour_s)
            compacted = query(args, hour_s, urls, Processes(roles), "rows compacted")
        print("time / OpenTSDB's (medians, same rounds):")
        print_ratios("as written", as_written)
        print_ratios("compacted", compacted)
    finally:
        stop_opentsdb()
        HBaseStore(host, int(port_text), prefix, timeout_ms=60_000).drop_tables()
    return 0


if __name__ == "__main__":
    sys.exit(main())
