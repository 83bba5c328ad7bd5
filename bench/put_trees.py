"""`/api/put` through gunicorn, two checkouts side by side: points/s and server CPU per point
(not run by `make bench`: it needs the two checkouts).

    python bench/put_trees.py /path/to/before /path/to/after [--rounds 8]
        [--points 30000] [--workers 2] [--hbase 127.0.0.1:9090]

Each tree is served from its own folder and its own ``.venv`` (2 workers, a fresh store each,
or fresh HBase tables), both up at once; rounds alternate between them, the order flipped every
round, so a shared machine's load falls on both. 4 keep-alive clients send 50-point bodies
(``bench_put.point``); the server's CPU is its process tree's, read from ``/proc``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench_put import BATCH, point, run_clients
from common import free_port

WARM_REQUESTS = 8


def tree_cpu_s(root_pid: int) -> float:
    """CPU seconds of ``root_pid`` and its descendants (workers, split helpers)."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        ticks[int(entry.name)] = int(fields[11]) + int(fields[12])
    total = 0
    for pid, used in ticks.items():
        walk = pid
        while walk > 1 and walk != root_pid:
            walk = parents.get(walk, 0)
        if walk == root_pid:
            total += used
    return total / os.sysconf("SC_CLK_TCK")


def start(tree: str, storage: dict[str, str],
          workers: int = 2) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    folder = tempfile.mkdtemp(prefix="pytsd-trees-")
    env = {**os.environ, "PYTHONPATH": tree, "TSD_NETWORK_PORT": str(port),
           "TSD_NETWORK_WORKER_THREADS": str(workers), "GUNICORN_CMD_ARGS": "--log-level info",
           "GUNICORN_ACCESSLOG": "/dev/null", "TSD_CORE_AUTO_CREATE_METRICS": "true",
           "GUNICORN_MAX_REQUESTS": "0",  # no worker recycled mid-round: its clients would fail
           "TSD_STORAGE": f"sqlite:///{folder}/bench.db", **storage}
    python = f"{tree}/.venv/bin/python"
    subprocess.run([python, "-m", "app.cli", "create-tables"], env=env, cwd=tree, check=True,
                   capture_output=True)
    log = Path(folder) / "gunicorn.log"
    with log.open("wb") as out:
        process = subprocess.Popen([python, "-m", "gunicorn", "wsgi:application", "--config",
                                    f"{tree}/gunicorn.conf.py"], cwd=tree, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while log.read_text().count("Accepting connections in worker") < workers:
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(log.read_text())
        time.sleep(0.1)
    return process, port


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--points", type=int, default=30_000)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers of each")
    parser.add_argument("--hbase", help="host:port of HBase's Thrift server")
    args = parser.parse_args()
    trees = [args.before, args.after]
    servers = {}
    for i, tree in enumerate(trees):
        storage = {} if not args.hbase else {
            "TSD_STORAGE": f"hbase://{args.hbase}",
            "TSD_STORAGE_HBASE_TABLE_PREFIX": f"trees{os.getpid()}_{i}_"}
        servers[tree] = start(tree, storage, args.workers)
    results: dict[str, list[tuple[float, float]]] = {tree: [] for tree in trees}
    first = 0
    try:
        for round_no in range(args.rounds):
            for tree in trees if round_no % 2 == 0 else trees[::-1]:
                process, port = servers[tree]
                bodies = [json.dumps([point(i) for i in range(start_i, start_i + BATCH)]).encode()
                          for start_i in range(first, first + args.points, BATCH)]
                first += args.points
                asyncio.run(run_clients(port, [bodies[:WARM_REQUESTS]], []))
                timed = bodies[WARM_REQUESTS:]
                cpu_before, started = tree_cpu_s(process.pid), time.perf_counter()
                asyncio.run(run_clients(port, [timed[i::4] for i in range(4)], []))
                elapsed = time.perf_counter() - started
                sent = len(timed) * BATCH
                cpu_us = (tree_cpu_s(process.pid) - cpu_before) / sent * 1e6
                results[tree].append((sent / elapsed, cpu_us))
                print(f"round {round_no} {tree}: {sent / elapsed:,.0f} points/s, server CPU "
                      f"{cpu_us:.1f} µs/point, load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait()
    for tree in trees:
        rates = [rate for rate, _ in results[tree]]
        cpus = [cpu for _, cpu in results[tree]]
        print(f"{tree}: median {statistics.median(rates):,.0f} points/s "
              f"({min(rates):,.0f}–{max(rates):,.0f}), server CPU "
              f"{statistics.median(cpus):.1f} µs/point ({min(cpus):.1f}–{max(cpus):.1f})")


if __name__ == "__main__":
    main()
