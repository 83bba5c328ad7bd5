"""Write throughput: /api/put in batches of 50 through a real gunicorn, and `pytsd import`.

Prints points/s for each path. Data: 100 series of 10-second points.

The 4 clients are 4 keep-alive connections driven by one asyncio loop that sends prebuilt
HTTP/1.1 requests and reads each answer's status line and headers (every one must be 204).
It shares the 2 cores with the server, so it is kept light: the ``requests`` threads used
before cost about 0.55 ms of CPU per request, more than a third of the server's own.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
import tempfile
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

PUT_POINTS = 300_000  # 3 merges of staged cells per worker at least: a steady state
IMPORT_POINTS = 1_000_000
BATCH = 50
T0 = 1_700_000_000


def point(i: int) -> dict[str, object]:
    series, step = i % 100, i // 100
    return {"metric": "bench.put", "timestamp": T0 + 10 * step, "value": i % 1000,
            "tags": {"host": f"web{series:03d}", "dc": "lga"}}


async def put_all(port: int, bodies: list[bytes], latencies_s: list[float]) -> None:
    """POST ``bodies`` to ``/api/put`` over one keep-alive connection, one at a time."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for body in bodies:
            started = time.perf_counter()
            writer.write(b"POST /api/put HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         b"application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 204 "):
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                raise RuntimeError(f"{head!r} {await reader.readexactly(length)!r}")
            latencies_s.append(time.perf_counter() - started)
    finally:
        writer.close()


async def run_clients(port: int, chunks: list[list[bytes]], latencies_s: list[float]) -> None:
    await asyncio.gather(*(put_all(port, chunk, latencies_s) for chunk in chunks))


def bench_http_put(storage_env: dict[str, str] | None = None,
                   label: str = "embedded store") -> None:
    """``storage_env``: TSD_STORAGE (and e.g. a table prefix) of another store."""
    env = {"TSD_STORAGE": temp_storage_url(), **(storage_env or {}),
           "TSD_CORE_AUTO_CREATE_METRICS": "true"}
    subprocess.run([sys.executable, "-m", "app.cli", "create-tables"], env={**os.environ, **env},
                   cwd=ROOT, check=True, capture_output=True)
    bodies = [json.dumps([point(i) for i in range(start, start + BATCH)]).encode()
              for start in range(0, PUT_POINTS, BATCH)]
    idle_cpu_s = idle_server_cpu_s(env)
    cpu_before = children_cpu_s()
    latencies_s: list[float] = []
    with gunicorn_server(env, workers=2) as url:
        assert requests.post(url + "/api/put", data=bodies[0]).status_code == 204
        port = int(url.rsplit(":", 1)[1])
        steady_before = descendants_cpu_s()
        client_before = time.process_time()
        started = time.perf_counter()
        clients = 4
        asyncio.run(run_clients(port, [bodies[1:][i::clients] for i in range(clients)],
                                latencies_s))
        elapsed = time.perf_counter() - started
        client_cpu_s = time.process_time() - client_before
        steady_cpu_s = descendants_cpu_s() - steady_before
    busy_cpu_s = children_cpu_s() - cpu_before - idle_cpu_s
    sent = PUT_POINTS - BATCH
    ms = np.array(latencies_s) * 1000
    print(f"/api/put, batches of {BATCH}, 4 clients, gunicorn 2 workers, {label}: "
          f"{sent / elapsed:,.0f} points/s ({sent} points in {elapsed:.2f}s, load average "
          f"{os.getloadavg()[0]:.1f}); request p50 {np.percentile(ms, 50):.1f} ms, "
          f"p99 {np.percentile(ms, 99):.1f} ms; server CPU {busy_cpu_s:.1f} s in all: "
          f"{PUT_POINTS / busy_cpu_s:,.0f} points per CPU second; {steady_cpu_s:.1f} s while "
          f"timed: {sent / steady_cpu_s:,.0f} points per CPU second; the client's own CPU "
          f"{client_cpu_s:.1f} s")


def bench_import(storage_env: dict[str, str] | None = None,
                 label: str = "embedded store") -> None:
    path = os.path.join(tempfile.mkdtemp(prefix="pytsd-bench-"), "points.txt.gz")
    with gzip.open(path, "wt") as out:
        for i in range(IMPORT_POINTS):
            series, step = i % 100, i // 100
            out.write(f"bench.import {T0 + 10 * step} {i % 1000} host=web{series:03d} dc=lga\n")
    env = {**os.environ, "TSD_STORAGE": temp_storage_url(), **(storage_env or {})}
    subprocess.run([sys.executable, "-m", "app.cli", "create-tables"], env=env, cwd=ROOT,
                   check=True, capture_output=True)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "app.cli", "import", "--auto-metric",
                           "--no-progress", path], env=env, cwd=ROOT, check=True,
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    print(f"pytsd import (gzip, {IMPORT_POINTS:,} points, whole process), {label}: "
          f"{IMPORT_POINTS / elapsed:,.0f} points/s; it reported: {done.stdout.strip()}")


def hbase_env() -> dict[str, str] | None:
    """``--hbase host:port``: also measure on that HBase (Thrift), in fresh tables."""
    if "--hbase" not in sys.argv:
        return None
    address = sys.argv[sys.argv.index("--hbase") + 1]
    return {"TSD_STORAGE": f"hbase://{address}",
            "TSD_STORAGE_HBASE_TABLE_PREFIX": f"bench{os.getpid()}_{int(time.time())}_"}


if __name__ == "__main__":
    hbase = hbase_env()
    if hbase is not None:
        bench_http_put(hbase, label=f"HBase {hbase['TSD_STORAGE']}")
        sys.exit(0)
    bench_http_put(label="embedded store, synchronous=FULL (default)")
    bench_http_put({"TSD_STORAGE_SQLITE_SYNCHRONOUS": "NORMAL", "TSD_STORAGE": temp_storage_url()},
                   label="embedded store, synchronous=NORMAL")
    bench_import()
