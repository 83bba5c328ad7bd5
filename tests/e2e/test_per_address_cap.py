"""``tsd.core.connections.per_ip_limit`` counts one address's connections over the whole
server, not per worker (issue 25): a real 2-worker server, whose workers are seen taking
connections in the kernel's tables; counted per worker, the same client held twice the cap."""

from __future__ import annotations

import os
import signal
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_server_accept import holder_of, wait_until_all_accept, worker_pids
from tests.e2e.tsd_process import (
    TsdProcess,
    read_exactly_until,
    read_response,
    read_until_closed,
    start_tsd,
)

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")

LIMIT = 6
SETTINGS = {"tsd.core.connections.per_ip_limit": LIMIT, "tsd.server.first_byte_timeout_s": 1,
            "tsd.http.request.head_timeout_s": 2}
REFUSED_LINE = b"error: too many connections from this address\n"


@pytest.fixture(scope="module")
def tsd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TsdProcess]:
    server = start_tsd(tmp_path_factory.mktemp("per-ip"), SETTINGS, workers=2)
    try:
        wait_until_all_accept(server, 2)
        yield server
    finally:
        server.stop()


def try_to_hold(tsd: TsdProcess) -> socket.socket | None:
    """A line-protocol connection that was served (kept open), or None when it was refused
    (and closed by the server, so it no longer counts)."""
    sock = tsd.connect(timeout_s=10)
    sock.sendall(b"version\n")
    first = read_exactly_until(sock, b"\n", timeout_s=10)
    if first.startswith(b"pytsd "):
        if b"Built on" not in first:  # the version's second line
            read_exactly_until(sock, b"Built on", timeout_s=10)
        return sock
    assert first == REFUSED_LINE, first
    assert read_until_closed(sock, timeout_s=10) == b""
    sock.close()
    return None


def hold_all_you_can(tsd: TsdProcess, attempts: int) -> tuple[list[socket.socket], int]:
    """One connection after another: those served, and how many were refused."""
    held: list[socket.socket] = []
    refused = 0
    for _ in range(attempts):
        sock = try_to_hold(tsd)
        if sock is None:
            refused += 1
        else:
            held.append(sock)
    return held, refused


def wait_until_served(tsd: TsdProcess, timeout_s: float = 10.0) -> socket.socket:
    """The server counts a close once its worker sees it: retry a moment."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sock = try_to_hold(tsd)
        if sock is not None:
            return sock
        time.sleep(0.05)
    raise AssertionError(f"no connection served within {timeout_s} s")


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def test_one_address_holds_at_most_the_limit_over_both_workers(tsd: TsdProcess) -> None:
    held, refused = hold_all_you_can(tsd, 3 * LIMIT)
    try:
        # Counted per worker, each of the two workers held LIMIT: 2 * LIMIT in all.
        assert (len(held), refused) == (LIMIT, 2 * LIMIT)
        holders = holder_of(tsd, held)
        assert len(holders) == LIMIT
        assert set(holders.values()) == set(worker_pids(tsd))  # both workers hold some
        with tsd.connect() as extra:  # HTTP is refused as before
            extra.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\n\r\n")
            status, _, body = read_response(extra)
        assert status == 503
        assert b"Too many connections from this address" in body
    finally:
        close_all(held)
    # Once they are closed, the address gets its LIMIT connections again.
    held = [wait_until_served(tsd)]
    try:
        more, refused = hold_all_you_can(tsd, LIMIT)
        held += more
        assert (len(held), refused) == (LIMIT, 1)
    finally:
        close_all(held)


def test_a_connection_stops_counting_however_it_ends(tsd: TsdProcess) -> None:
    ending: list[socket.socket] = []
    silent = tsd.connect()  # closed by the server after the 1 s first-byte timeout
    bad = tsd.connect()  # the request-smuggling shape: 400, and the server closes
    bad.sendall(b"POST /api/put HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    quitter = tsd.connect()  # the line protocol's exit
    quitter.sendall(b"version\nexit\n")
    reset = tsd.connect()  # the client resets the connection (RST, not FIN)
    reset.sendall(b"version\n")
    read_exactly_until(reset, b"Built on")
    timed = tsd.connect()  # an HTTP head never finished (the head timeout: 408)
    timed.sendall(b"GET /api/version HTTP/1.1\r\n")
    ending += [silent, bad, quitter, timed]
    try:
        reset.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        reset.close()
        assert read_until_closed(silent, timeout_s=10) == b""
        assert read_until_closed(bad).startswith(b"HTTP/1.1 400 ")
        assert b"built at revision" in read_until_closed(quitter)
        assert read_until_closed(timed).startswith(b"HTTP/1.1 408 ")
    finally:
        close_all(ending)
    held = [wait_until_served(tsd)]
    try:
        more, refused = hold_all_you_can(tsd, LIMIT)
        held += more
        assert (len(held), refused) == (LIMIT, 1)
    finally:
        close_all(held)


def test_a_killed_workers_connections_stop_counting(tmp_path: Path) -> None:
    tsd = start_tsd(tmp_path, SETTINGS, workers=2)
    held: list[socket.socket] = []
    try:
        wait_until_all_accept(tsd, 2)
        held, _ = hold_all_you_can(tsd, LIMIT)
        holders = holder_of(tsd, held)
        victim = min(holders.values())
        survivors = [sock for sock in held if holders[sock.getsockname()[1]] != victim]
        assert 0 < len(survivors) < LIMIT
        os.kill(victim, signal.SIGKILL)  # no graceful exit: it clears nothing itself
        close_all([sock for sock in held if sock not in survivors])
        held = survivors
        # Had the dead worker's counts stayed, the address would still be at its limit.
        held.append(wait_until_served(tsd, timeout_s=30))
        more, _ = hold_all_you_can(tsd, LIMIT)
        held += more
        assert len(held) == LIMIT
    finally:
        close_all(held)
        tsd.stop()
