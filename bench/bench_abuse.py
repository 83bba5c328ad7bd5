"""Abuse probes against a real pytsd (gunicorn, 2 workers of app.server.worker) over the demo day.

Each probe is bounded in count and time and talks to 127.0.0.1 only. Per probe it prints the
statuses the abusive client got, how long the probe took, the workers' peak RSS during it,
and the p99 (and failures) of ``/api/version`` requested every 10 ms meanwhile.
Head and body deadlines are set to 3 s here (defaults: 10 s and 60 s) to keep the run short.
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import requests
from serving import Server, VersionSampler, demo_store, pytsd_server

from app.tsdb.demo import DEMO_METRICS

HEAVY_QUERY = "start=2d-ago&" + "&".join(f"m=none:{metric}" for metric in DEMO_METRICS)
SETTINGS = {"TSD_HTTP_REQUEST_HEAD_TIMEOUT_S": "3", "TSD_HTTP_REQUEST_BODY_TIMEOUT_S": "3"}


def connect(server: Server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=15)


def status_of(sock: socket.socket) -> str:
    """The status code the server answered on ``sock`` ("closed" if it closed silently)."""
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        return type(exc).__name__
    return data.split(b" ")[1].decode() if data.startswith(b"HTTP/") else "closed"


def raw_request(server: Server, data: bytes) -> str:
    with connect(server) as sock:
        try:
            sock.sendall(data)
        except OSError:
            pass  # the server may answer and close before taking everything
        return status_of(sock)


def probe_slow_headers(server: Server) -> Counter[str]:
    socks = [connect(server) for _ in range(50)]
    for sock in socks:
        sock.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\n")
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.5):
            for sock in socks:
                try:
                    sock.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    pass

    thread = threading.Thread(target=trickle)
    thread.start()
    statuses = Counter(status_of(sock) for sock in socks)
    stop.set()
    thread.join()
    for sock in socks:
        sock.close()
    return statuses


def probe_idle_sockets(server: Server) -> Counter[str]:
    socks = [connect(server) for _ in range(200)]
    time.sleep(3)
    ok = requests.get(server.url + "/api/version", timeout=5).status_code
    for sock in socks:
        sock.close()
    return Counter({f"version {ok} with 200 idle": 1})


def probe_heavy_queries(server: Server) -> Counter[str]:
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: requests.get(f"{server.url}/api/query?{HEAVY_QUERY}",
                                                       timeout=120), range(2)))
    return Counter(f"{a.status_code} ({len(a.content) >> 20} MiB)" for a in answers)


def probe_heavy_and_slow(server: Server) -> Counter[str]:
    with ThreadPoolExecutor(2) as pool:
        slow = pool.submit(probe_slow_headers, server)
        heavy = pool.submit(probe_heavy_queries, server)
        return slow.result() + heavy.result()


def probe_long_url(server: Server) -> Counter[str]:
    return Counter([raw_request(server, b"GET /api/query?m=" + b"a" * 100_000 +
                                b" HTTP/1.1\r\nHost: x\r\n\r\n")])


def probe_bad_request_lines(server: Server) -> Counter[str]:
    lines = [b"GET\r\n\r\n", b"BLAH / HTTP/1.1 x\r\n\r\n", b"GET / HTTP/7.0\r\n\r\n",
             b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
             b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"]
    return Counter(raw_request(server, lines[n % len(lines)]) for n in range(100))


def probe_huge_headers(server: Server) -> Counter[str]:
    return Counter([raw_request(server, b"GET /api/version HTTP/1.1\r\nHost: x\r\nX-Big: " +
                                b"b" * 65536 + b"\r\n\r\n")])


def probe_big_body(server: Server) -> Counter[str]:
    head = b"POST /api/put HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (40 << 20)
    return Counter([raw_request(server, head + b"[" * (1 << 20))])


def probe_big_chunked_body(server: Server) -> Counter[str]:
    with connect(server) as sock:
        sock.sendall(b"POST /api/put HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))
        try:
            for _ in range(64):  # 64 MiB offered, over the 32 MiB cap
                sock.sendall(chunk)
        except OSError:
            pass
        return Counter([status_of(sock)])


def probe_slow_body(server: Server) -> Counter[str]:
    with connect(server) as sock:
        sock.sendall(b"POST /api/put HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n[")
        return Counter([status_of(sock)])


def probe_gzip_bomb(server: Server) -> Counter[str]:
    body = gzip.compress(b" " * (64 << 20), 9)  # 64 KiB that inflate to 64 MiB
    answer = requests.post(server.url + "/api/put", data=body, timeout=60,
                           headers={"Content-Encoding": "gzip",
                                    "Content-Type": "application/json"})
    return Counter([f"{answer.status_code} ({len(body) >> 10} KiB -> 64 MiB)"])


def probe_json_bomb(server: Server) -> Counter[str]:
    answer = requests.post(server.url + "/api/put", data=b"[" * 100_000, timeout=60)
    return Counter([str(answer.status_code)])


def probe_line_connections(server: Server) -> Counter[str]:
    socks = [connect(server) for _ in range(300)]
    got = Counter[str]()
    for round_ in range(5):
        for sock in socks:
            sock.sendall(b"frob%d\n" % round_)
        for sock in socks:
            line = b""
            while not line.endswith(b"\n"):
                line += sock.recv(4096)
            got["replied" if line.startswith(b"unknown command: frob") else "other"] += 1
    for sock in socks:
        sock.close()
    return got


PROBES: list[tuple[str, Callable[[Server], Counter[str]]]] = [
    ("50 slow-header clients", probe_slow_headers),
    ("200 idle sockets for 3 s", probe_idle_sockets),
    ("2 heavy queries (7 metrics raw, ~8 MB)", probe_heavy_queries),
    ("50 slow-header + 2 heavy queries", probe_heavy_and_slow),
    ("100 KB URL", probe_long_url),
    ("100 bad request lines", probe_bad_request_lines),
    ("64 KiB header", probe_huge_headers),
    ("40 MiB announced body", probe_big_body),
    ("64 MiB chunked body", probe_big_chunked_body),
    ("slow body", probe_slow_body),
    ("gzip body 64 KiB -> 64 MiB", probe_gzip_bomb),
    ("JSON '[' x 100000", probe_json_bomb),
    ("300 line-protocol connections x 5 lines", probe_line_connections),
]


def main() -> None:
    store = demo_store()
    with pytsd_server({"TSD_STORAGE": store, **SETTINGS}, workers=2) as server:
        print(f"{'probe':42} {'statuses':40} {'time':>8} {'peak RSS':>9} "
              f"{'version p99':>12} {'fails':>5}")
        for name, probe in PROBES:
            server.reset_peak_rss()
            with VersionSampler(server.url) as sampler:
                started = time.perf_counter()
                statuses = probe(server)
                elapsed = time.perf_counter() - started
            summary = ", ".join(f"{key} x{count}" for key, count in sorted(statuses.items()))
            print(f"{name:42} {summary:40} {elapsed:7.2f}s {server.peak_rss_mb():7.0f}MB "
                  f"{sampler.p99_ms():10.1f}ms {sampler.failures:5d}", flush=True)


if __name__ == "__main__":
    main()
