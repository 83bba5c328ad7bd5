"""Line-protocol ingest through a real pytsd (gunicorn, the project's worker, 2 workers).

1. Throughput: 4 persistent connections, each sending blocks of 1,000 ``put`` lines, each
   block followed by ``version``: the answer to ``version`` acknowledges every point before
   it (a block's puts are stored before the next command runs). Prints points/s and the
   p50/p99 latency of one block's acknowledgement.
2. Soak (``--soak``): 200 persistent connections writing for 60 s (blocks of 50 lines, then
   ``version``) while one client times ``/api/version``; afterwards every acknowledged point
   is counted in the store itself.

3. In process (``--in-process``): the same blocks parsed and written by one thread, no server,
   printing the CPU per point of parsing, of the writer and staging, and of the staging merges;
   ``--per-point`` writes them without blocks (``put_many``: a Python object per cell), the
   path before issue 26, for an A/B in the same conditions.

Usage: ``python bench/bench_ingest.py [--soak] [--seconds 60] [--connections 200]``, or
``--hbase host:port`` for the throughput run on HBase (in fresh tables of a random prefix), or
``--in-process [--per-point] [--peer-blocks] [--blocks 25]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
import time

import numpy as np
import requests
from common import (
    ROOT,
    children_cpu_s,
    descendants_cpu_s,
    gunicorn_server,
    idle_server_cpu_s,
    temp_storage_url,
)

T0 = 1_700_000_000
SERIES_PER_CONNECTION = 1000


def block(conn: int, start: int, lines: int) -> bytes:
    """Lines ``start .. start + lines`` of connection ``conn``: 1,000 series, 10 s apart."""
    out = []
    for i in range(start, start + lines):
        series, step = i % SERIES_PER_CONNECTION, i // SERIES_PER_CONNECTION
        out.append(f"put bench.ingest {T0 + 10 * step} {i % 977} host=h{series:04d} "
                   f"conn=c{conn:03d}\n")
    return ("".join(out) + "version\n").encode()


async def writer(port: int, conn: int, blocks: int, lines: int, stop_at: float | None,
                 latencies_s: list[float], payloads: list[bytes] | None = None) -> int:
    """Send blocks until ``blocks`` are done or ``stop_at``; return the points acknowledged.

    ``payloads``: the blocks, built beforehand (the client then costs little CPU).
    """
    reader, stream = await asyncio.open_connection("127.0.0.1", port)
    acknowledged = 0
    number = 0
    while number < blocks and (stop_at is None or time.monotonic() < stop_at):
        payload = payloads[number] if payloads else block(conn, number * lines, lines)
        started = time.perf_counter()
        stream.write(payload)
        await stream.drain()
        reply = b""
        while not reply.endswith(b"\n") or b"Built on" not in reply:
            chunk = await reader.read(65536)
            if not chunk:
                raise RuntimeError(f"connection {conn} closed; got {reply!r}")
            reply += chunk
        if not reply.startswith(b"pytsd"):
            raise RuntimeError(f"a put was refused: {reply[:200]!r}")
        latencies_s.append(time.perf_counter() - started)
        acknowledged += lines
        number += 1
    stream.write(b"exit\n")
    await stream.drain()
    stream.close()
    return acknowledged


async def run_writers(port: int, connections: int, blocks: int, lines: int,
                      seconds: float | None, latencies_s: list[float],
                      payloads: list[list[bytes]] | None = None) -> int:
    stop_at = None if seconds is None else time.monotonic() + seconds
    counts = await asyncio.gather(*(writer(port, c, blocks, lines, stop_at, latencies_s,
                                           payloads[c] if payloads else None)
                                    for c in range(connections)))
    return sum(counts)


def stored_points(storage_url: str) -> int:
    """Points in the store, counted from its cells (each point is one cell here)."""
    sys.path.insert(0, str(ROOT))
    from app.config import load_config
    from app.tsdb import TSDB

    tsdb = TSDB(load_config({"tsd.storage": storage_url}, environ={}))
    count = sum(len(cells) for _, cells in tsdb.data_table().scan())
    tsdb.close()
    return count


def percentiles(samples_s: list[float]) -> str:
    ms = np.array(samples_s) * 1000
    return f"p50 {np.percentile(ms, 50):.1f} ms, p99 {np.percentile(ms, 99):.1f} ms"


def prepare(env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "app.cli", "create-tables"], env={**os.environ, **env},
                   cwd=ROOT, check=True, capture_output=True)


def bench_throughput(label: str, sync: str, connections: int = 4, blocks: int = 50,
                     lines: int = 1000, storage_env: dict[str, str] | None = None) -> None:
    storage = temp_storage_url()
    env = {"TSD_STORAGE": storage, "TSD_CORE_AUTO_CREATE_METRICS": "true",
           "TSD_STORAGE_SQLITE_SYNCHRONOUS": sync, **(storage_env or {})}
    prepare(env)
    idle_cpu_s = idle_server_cpu_s(env)
    cpu_before = children_cpu_s()
    with gunicorn_server(env, workers=2) as url:
        port = int(url.rsplit(":", 1)[1])
        warm: list[float] = []
        asyncio.run(run_writers(port, connections, 1, lines, None, warm))  # UIDs assigned
        payloads = [[block(c, n * lines, lines) for n in range(blocks)]
                     for c in range(connections)]  # built before the clock starts
        latencies: list[float] = []
        steady_before = descendants_cpu_s()
        started = time.perf_counter()
        sent = asyncio.run(run_writers(port, connections, blocks, lines, None, latencies,
                                       payloads))
        elapsed = time.perf_counter() - started
        steady_cpu_s = descendants_cpu_s() - steady_before
    busy_cpu_s = children_cpu_s() - cpu_before - idle_cpu_s
    print(f"line protocol, {connections} connections, blocks of {lines}, {label}: "
          f"{sent / elapsed:,.0f} points/s ({sent:,} points in {elapsed:.1f} s, load average "
          f"{os.getloadavg()[0]:.1f}); block acknowledged in {percentiles(latencies)}; "
          f"server CPU {busy_cpu_s:.1f} s in all: "
          f"{(sent + connections * lines) / busy_cpu_s:,.0f} points per CPU second "
          f"(new series and UIDs included); {steady_cpu_s:.1f} s while timed: "
          f"{sent / steady_cpu_s:,.0f} points per CPU second (known series)")


def bench_soak(seconds: float, connections: int, lines: int = 50) -> None:
    storage = temp_storage_url()
    env = {"TSD_STORAGE": storage, "TSD_CORE_AUTO_CREATE_METRICS": "true"}
    prepare(env)
    version_s: list[float] = []
    with gunicorn_server(env, workers=2) as url:
        port = int(url.rsplit(":", 1)[1])
        done = threading.Event()

        def poll_version() -> None:
            with requests.Session() as session:
                while not done.is_set():
                    started = time.perf_counter()
                    assert session.get(url + "/api/version", timeout=30).status_code == 200
                    version_s.append(time.perf_counter() - started)
                    time.sleep(0.1)

        poller = threading.Thread(target=poll_version)
        poller.start()
        latencies: list[float] = []
        cpu_before = descendants_cpu_s()
        started = time.perf_counter()
        acknowledged = asyncio.run(run_writers(port, connections, 10**9, lines, seconds,
                                               latencies))
        elapsed = time.perf_counter() - started
        server_cpu_s = descendants_cpu_s() - cpu_before
        done.set()
        poller.join()
    stored = stored_points(storage)
    print(f"soak: {connections} persistent connections for {elapsed:.0f} s: "
          f"{acknowledged:,} points acknowledged ({acknowledged / elapsed:,.0f}/s), "
          f"{stored:,} stored{'' if stored == acknowledged else ' -- MISMATCH'}; "
          f"block of {lines} acknowledged in {percentiles(latencies)}; "
          f"/api/version meanwhile: {percentiles(version_s)}, {len(version_s)} requests; "
          f"server CPU {server_cpu_s:.1f} s: {acknowledged / server_cpu_s:,.0f} points per CPU "
          f"second; load average {os.getloadavg()[0]:.1f}")


def bench_in_process(blocks: int, per_point: bool, connections: int = 4,
                     lines: int = 1000, peer_blocks: bool = False) -> None:
    """Parse and write ``blocks`` blocks of each connection in this thread: CPU per point."""
    sys.path.insert(0, str(ROOT))
    import tempfile

    from app.config import load_config
    from app.lineproto.parse import PutParser
    from app.storage import sqlite_write
    from app.tsdb import TSDB, writer
    from app.tsdb.points import PointBatch
    from app.tsdb.schema import create_tables

    if per_point:
        writer.BLOCK_MIN_POINTS = 10**9
    folder = tempfile.mkdtemp(prefix="pytsd-bench-")
    tsdb = TSDB(load_config({"tsd.storage": f"sqlite:///{folder}/ingest.db",
                             "tsd.core.auto_create_metrics": True}, environ={}))
    create_tables(tsdb.store, tsdb.config)
    point_writer = writer.PointWriter(tsdb)
    parsers = [PutParser() for _ in range(connections)]

    if peer_blocks:  # bench_peer's blocks: decimal values (4-byte floats), the last hour
        import peer_ingest
        hour_s = int(time.time()) // 3600 * 3600 - 3600
        made = [peer_ingest.line_blocks(hour_s, 0, conn, blocks + 1)
                for conn in range(connections)]
        payloads = {(conn, n): made[conn][n].splitlines()[:-1]
                    for n in range(blocks + 1) for conn in range(connections)}
    else:
        payloads = {(conn, n): block(conn, n * lines, lines).splitlines()[:-1]  # no `version`
                    for n in range(blocks + 1) for conn in range(connections)}

    def parse(conn: int, number: int) -> PointBatch:
        batch = PointBatch()
        parsers[conn].add_lines(payloads[(conn, number)], batch)
        return batch

    for conn in range(connections):  # new series and UIDs, untimed
        point_writer.write_batch(parse(conn, 0))
    merge_s = [0.0]
    merge = sqlite_write.merge_staged

    def timed_merge(*args: object, **kwargs: object) -> None:
        started = time.process_time()
        merge(*args, **kwargs)  # type: ignore[arg-type]
        merge_s[0] += time.process_time() - started

    sqlite_write.merge_staged = timed_merge  # type: ignore[assignment]
    started = time.process_time()
    batches = [parse(conn, n) for n in range(1, blocks + 1) for conn in range(connections)]
    parse_s = time.process_time() - started
    started = time.process_time()
    for batch in batches:
        point_writer.write_batch(batch)
    tsdb.data_table().row(b"")  # the last staged cells merged
    write_s = time.process_time() - started - merge_s[0]
    points = blocks * connections * lines
    print(f"in process, {'per-point cells (put_many)' if per_point else 'blocks'}"
          f"{' of bench_peer' if peer_blocks else ''}, "
          f"{points:,} points: CPU per point: parse {parse_s / points * 1e6:.2f} us, "
          f"write and stage {write_s / points * 1e6:.2f} us, merge {merge_s[0] / points * 1e6:.2f}"
          f" us (load average {os.getloadavg()[0]:.1f})")
    tsdb.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--soak", action="store_true")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--hbase", metavar="HOST:PORT", help="measure on this HBase (Thrift)")
    parser.add_argument("--in-process", action="store_true")
    parser.add_argument("--per-point", action="store_true")
    parser.add_argument("--blocks", type=int, default=25)
    parser.add_argument("--peer-blocks", action="store_true",
                        help="--in-process with bench_peer's blocks (decimal values)")
    args = parser.parse_args()
    if args.in_process:
        bench_in_process(args.blocks, args.per_point, peer_blocks=args.peer_blocks)
    elif args.hbase:
        prefix = f"bench{os.getpid()}_{int(time.time())}_"
        bench_throughput(f"HBase {args.hbase}", "FULL", blocks=20, storage_env={
            "TSD_STORAGE": f"hbase://{args.hbase}", "TSD_STORAGE_HBASE_TABLE_PREFIX": prefix})
    elif args.soak:
        bench_soak(args.seconds, args.connections)
    else:
        bench_throughput("embedded store, synchronous=FULL (default)", "FULL")
        bench_throughput("embedded store, synchronous=NORMAL", "NORMAL")
