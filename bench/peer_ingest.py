"""Ingest side by side with VictoriaMetrics (``bench_peer.py --only ingest``): the same points
through the line protocol and through ``/api/put``, alternating rounds, then bytes per point.

Each round sends both servers the same points: pytsd first, then VictoriaMetrics, then the
next round. pytsd's time ends when every point is acknowledged (the line protocol: a
``version`` after each block of 1,000 lines, answered once the block is stored; ``/api/put``:
its 204); VictoriaMetrics acknowledges nothing over telnet and answers ``/api/put`` before the
points are searchable, so its time ends when a query finds every point of the round (after
``/internal/force_flush``). CPU per point is each server's own (pytsd: its gunicorn master,
workers and split helpers; VictoriaMetrics: its process), read from /proc around the round.
``/api/put`` runs twice: with pytsd's default ``synchronous=FULL`` (an acknowledged point
survives power loss), then restarted on the same store with ``NORMAL`` (it survives kill -9,
which neither VictoriaMetrics, answering from memory, nor OpenTSDB, answering once queued,
promises).

The points are the last hour's (VictoriaMetrics hides the newest seconds from its queries).
Disk: pytsd's pages in use and its files (store + WAL) as written, compaction off (issue 26's
≤ 12 bytes a point for an hour not compacted yet); VictoriaMetrics' data folder after a flush.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import bench_hbase_put as put
import requests
from bench_opentsdb import send_lines
from common import pid_cpu_s
from serving import pytsd_server

LINES_PER_BLOCK = 1000
SERIES_PER_CONNECTION = 1000


def line_blocks(hour_s: int, round_no: int, conn: int, blocks: int) -> list[bytes]:
    """One connection's blocks: its 1,000 series a point each per block, 10 s apart."""
    out = []
    for number in range(blocks):
        second = hour_s + 10 * ((round_no * blocks + number) % 360)
        lines = [f"put bench_ingest {second} {(series * 7 + number) % 977}.25 "
                 f"host=h{conn}x{series:04d}\n" for series in range(SERIES_PER_CONNECTION)]
        out.append(("".join(lines) + "version\n").encode())
    return out


def put_bodies(hour_s: int, round_no: int, requests_per_round: int) -> list[bytes]:
    """``/api/put`` bodies of 50 points over 50 series (a metric of their own)."""
    first = round_no * requests_per_round
    return [body.replace(b"bench.put.fresh", b"bench_put")
            for body in put.bodies_for(first, requests_per_round, hour_s)]


def vm_points(url: str, metric: str, hour_s: int) -> int:
    requests.get(url + "/internal/force_flush", timeout=60)
    answer = requests.get(url + "/api/v1/query", params={
        "query": f'sum(count_over_time({{__name__="{metric}"}}[2h]))', "time": hour_s + 3600,
        "nocache": 1}, timeout=60).json()
    result = answer["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def until_searchable(url: str, metric: str, hour_s: int, expected: int) -> None:
    deadline = time.monotonic() + 120
    while vm_points(url, metric, hour_s) < expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"VictoriaMetrics: {metric} never reached {expected} points")
        time.sleep(0.05)


def timed_round(send: Callable[[], None], points: int, cpu_s: Callable[[], float]
                ) -> tuple[float, float]:
    """``(points/s, CPU µs per point)`` of ``send``."""
    cpu = cpu_s()
    started = time.perf_counter()
    send()
    elapsed = time.perf_counter() - started
    return points / elapsed, (cpu_s() - cpu) / points * 1e6


def pytsd_bytes(db: Path) -> tuple[int, int]:
    """``(pages in use × page size, store + WAL file sizes)``."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        page, count, free = (con.execute(f"PRAGMA {name}").fetchone()[0]
                             for name in ("page_size", "page_count", "freelist_count"))
    files = sum(p.stat().st_size for p in db.parent.glob(db.name + "*") if p.is_file())
    return (count - free) * page, files


def folder_bytes(folder: str) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def ratio_line(name: str, ours: tuple[float, float], theirs: tuple[float, float]) -> str:
    return (f"  {name:<22} pytsd {ours[0]:>9,.0f} pts/s {ours[1]:6.1f} CPU-us/pt | "
            f"VictoriaMetrics {theirs[0]:>10,.0f} pts/s {theirs[1]:5.1f} CPU-us/pt | "
            f"{ours[0] / theirs[0]:.3f}x pts/s, {ours[1] / theirs[1]:.1f}x CPU/pt")


def vm_lines(blocks_of: list[list[bytes]], peer: VmPorts, expected: int) -> None:
    send_lines_unacknowledged(blocks_of, peer.put_port)
    until_searchable(peer.url, "bench_ingest", peer.hour_s, expected)


def vm_puts(chunks: list[list[bytes]], peer: VmPorts, expected: int) -> None:
    asyncio.run(put.run_clients(peer.http_put_port, chunks))
    until_searchable(peer.url, "bench_put", peer.hour_s, expected)


def pytsd_puts(chunks: list[list[bytes]], port: int) -> None:
    asyncio.run(put.run_clients(port, chunks))


@dataclass
class VmPorts:
    url: str
    put_port: int
    http_put_port: int
    hour_s: int


def compare(env: dict[str, str], db: Path, peer: VmPorts, vm_cpu_s: Callable[[], float],
            rounds: int = 3, blocks: int = 25, connections: int = 4, put_requests: int = 1000,
            clients: int = 4) -> int:
    """Print both protocols' rounds and pytsd's bytes per point; the points sent to each."""
    hour_s = peer.hour_s
    print(f"ingest, {rounds} alternating rounds, load average {os.getloadavg()[0]:.1f}")
    with pytsd_server(env, workers=2) as server:
        def pytsd_cpu_s() -> float:
            return sum(pid_cpu_s(pid) for pid in server.pids())

        # New series' UIDs are assigned before the clock (a point of each, to both).
        warm = [line_blocks(hour_s - 86400, 0, c, 1) for c in range(connections)]
        send_lines(warm, server.port)
        send_lines_unacknowledged(warm, peer.put_port)
        stored = 0
        for round_no in range(rounds):
            blocks_of = [line_blocks(hour_s, round_no, c, blocks) for c in range(connections)]
            points = connections * blocks * LINES_PER_BLOCK
            ours = timed_round(partial(send_lines, blocks_of, server.port), points, pytsd_cpu_s)
            theirs = timed_round(partial(vm_lines, blocks_of, peer, stored + points), points,
                                 vm_cpu_s)
            stored += points
            print(ratio_line(f"line, round {round_no}", ours, theirs))
        puts = PutRounds(peer, vm_cpu_s, rounds, put_requests, clients)
        puts.compare(server.port, pytsd_cpu_s, "")
        # A read merges what is staged: the hour as a query finds it.
        requests.get(f"{server.url}/api/query?start={hour_s}&m=count:bench_ingest", timeout=600)
    # The durability VictoriaMetrics and OpenTSDB do not give (an acknowledged point
    # survives kill -9) without a disk sync per commit: the same puts with
    # synchronous=NORMAL, on the same store after the figures above.
    with pytsd_server({**env, "TSD_STORAGE_SQLITE_SYNCHRONOUS": "NORMAL"}, workers=2) as normal:
        # Warm as the first server is when its put rounds start (it has taken the line
        # rounds), VictoriaMetrics too: a round's worth of puts before the clock, into an
        # hour of the day before.
        warm_puts = put_bodies(hour_s - 86400, 0, put_requests)
        pytsd_puts([warm_puts[i::clients] for i in range(clients)], normal.port)
        puts.compare(normal.port, lambda: sum(pid_cpu_s(pid) for pid in normal.pids()),
                     " NORMAL")
        requests.get(f"{normal.url}/api/query?start={hour_s}&m=count:bench_put", timeout=600)
    in_use, files = pytsd_bytes(db)
    total = stored + puts.stored
    print(f"  disk, the current hour as written ({total:,} points): pytsd {in_use / total:.1f} "
          f"B/pt in use ({files / total:.1f} with its files and WAL)")
    return total


@dataclass
class PutRounds:
    """``/api/put`` rounds against VictoriaMetrics, numbered on from the last call's."""

    peer: VmPorts
    vm_cpu_s: Callable[[], float]
    rounds: int
    requests_per_round: int
    clients: int
    stored: int = 0  # points sent to each so far
    next_round: int = 0

    def compare(self, port: int, pytsd_cpu_s: Callable[[], float], label: str) -> None:
        for _ in range(self.rounds):
            round_no, self.next_round = self.next_round, self.next_round + 1
            bodies = put_bodies(self.peer.hour_s, round_no, self.requests_per_round)
            points = self.requests_per_round * put.POINTS_PER_REQUEST
            chunks = [bodies[i::self.clients] for i in range(self.clients)]
            ours = timed_round(partial(pytsd_puts, chunks, port), points, pytsd_cpu_s)
            theirs = timed_round(partial(vm_puts, chunks, self.peer, self.stored + points),
                                 points, self.vm_cpu_s)
            self.stored += points
            print(ratio_line(f"/api/put{label}, round {round_no}", ours, theirs))


def send_lines_unacknowledged(blocks: list[list[bytes]], port: int) -> None:
    """VictoriaMetrics' telnet put has no ``version``: the lines alone, every connection."""
    async def one(mine: list[bytes]) -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        for payload in mine:
            writer.write(payload.removesuffix(b"version\n"))
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def every() -> None:
        await asyncio.gather(*(one(mine) for mine in blocks))
    asyncio.run(every())
