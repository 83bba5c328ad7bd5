"""Server CPU per request through a real gunicorn: ``GET /api/version`` (what any request
costs) and ``POST /api/put`` of 50 points over 50 known series (issue 26's body).

4 keep-alive clients (``--clients``; ``bench_hbase_put.run_clients``) against 2 workers
on a fresh embedded store; the server's CPU (master, workers, helpers) is read from /proc
around each round.
Rounds of each kind alternate, so run it from two checkouts' ``bench/`` one after the other,
or give ``--rounds`` to see the spread.

    python bench/bench_request_cpu.py [--requests N] [--rounds R] [--workers W] [--clients C]
        [--access-log]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import bench_hbase_put as put
from common import pid_cpu_s, temp_storage_url
from serving import pytsd_server


async def get_all(port: int, count: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(count):
            writer.write(b"GET /api/version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
    finally:
        writer.close()


async def versions(port: int, count: int, clients: int) -> None:
    await asyncio.gather(*(get_all(port, count // clients) for _ in range(clients)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--access-log", action="store_true",
                        help="the access log on (to /dev/null), as a server runs by default")
    args = parser.parse_args()
    hour_s = int(time.time()) // 3600 * 3600 - 3600
    env = {"TSD_STORAGE": temp_storage_url(), "TSD_CORE_AUTO_CREATE_METRICS": "true",
           "TSD_STORAGE_COMPACTION_ENABLE": "false",
           **({"GUNICORN_ACCESSLOG": "/dev/null"} if args.access_log else {})}
    with pytsd_server(env, workers=args.workers) as server:
        def cpu_s() -> float:
            return sum(pid_cpu_s(pid) for pid in server.pids())

        warm = put.bodies_for(0, put.SERIES // put.POINTS_PER_REQUEST, hour_s)
        asyncio.run(put.run_clients(server.port, [warm]))
        asyncio.run(versions(server.port, 400, args.clients))
        print(f"{args.requests} requests a round, {args.clients} clients, {args.workers} workers, "
              f"load average {os.getloadavg()[0]:.1f}")
        for round_no in range(args.rounds):
            cpu, started = cpu_s(), time.perf_counter()
            asyncio.run(versions(server.port, args.requests, args.clients))
            version_s, version_cpu = time.perf_counter() - started, cpu_s() - cpu
            bodies = put.bodies_for((round_no + 1) * args.requests, args.requests, hour_s)
            chunks = [bodies[i::args.clients] for i in range(args.clients)]
            cpu, started = cpu_s(), time.perf_counter()
            asyncio.run(put.run_clients(server.port, chunks))
            put_s, put_cpu = time.perf_counter() - started, cpu_s() - cpu
            points = args.requests * put.POINTS_PER_REQUEST
            print(f"  round {round_no}: /api/version {version_cpu / args.requests * 1e6:6.1f} "
                  f"CPU-us/request ({args.requests / version_s:,.0f}/s) | /api/put "
                  f"{put_cpu / args.requests * 1e6:6.1f} CPU-us/request, "
                  f"{put_cpu / points * 1e6:5.2f}/point, {points / put_s:,.0f} points/s")


if __name__ == "__main__":
    main()
