"""The front door of a real server (issue 25): first-byte timeout, per-address caps, the
request-smuggling shape, absurd chunk sizes, and 2,000 silent sockets that must not keep a
new client out. Loopback only, bounded."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
import requests

from tests.e2e.tsd_process import (
    TsdProcess,
    read_exactly_until,
    read_response,
    read_until_closed,
    start_tsd,
)

SETTINGS = {
    "tsd.server.first_byte_timeout_s": 1,
    "tsd.core.socket.timeout": 60,  # established line-protocol connections: a minute idle
    "tsd.http.request.body_timeout_s": 30,
    "tsd.http.request.max_body_bytes": 100_000,
    "tsd.core.connections.per_ip_limit": 40,
    "tsd.http.request.enable_cors": "true",
    "tsd.http.request.cors_domains": "http://grafana.example:3000",
    "tsd.core.auto_create_metrics": "true",
}


@pytest.fixture(scope="module")
def tsd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TsdProcess]:
    server = start_tsd(tmp_path_factory.mktemp("door"), SETTINGS, workers=1)
    yield server
    server.stop()


def test_a_silent_connection_is_closed_after_the_first_byte_timeout(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        started = time.monotonic()
        assert read_until_closed(sock, timeout_s=10) == b""
        assert 0.8 < time.monotonic() - started < 5  # 1 s, not the 60 s of socket.timeout


def test_an_established_line_connection_keeps_its_own_idle_timeout(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        sock.sendall(b"version\n")
        assert b"built at revision" in read_exactly_until(sock, b"\n")
        time.sleep(2.0)  # twice the first-byte timeout: still open
        sock.sendall(b"help\n")
        assert read_exactly_until(sock, b"\n").startswith(b"available commands:")


def test_content_length_with_transfer_encoding_is_400_and_closes(tsd: TsdProcess) -> None:
    smuggled = b"GET /api/version HTTP/1.1\r\nHost: x\r\n\r\n"
    with tsd.connect() as sock:
        sock.sendall(b"POST /api/put HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled)
        raw = read_until_closed(sock)
    assert raw.startswith(b"HTTP/1.1 400 "), raw[:200]
    assert raw.count(b"HTTP/1.1 ") == 1, raw  # the smuggled request was never served
    assert b"Content-Length and Transfer-Encoding" in raw


def test_an_absurd_chunk_size_is_413_at_once(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        started = time.monotonic()
        sock.sendall(b"POST /api/put HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % (1 << 80) + b"[")
        status, _, body = read_response(sock)
        assert time.monotonic() - started < 3  # not the 30 s body timeout
    assert status == 413, body
    assert b"larger than the body limit" in body


def test_a_chunk_size_over_the_limit_is_413_before_its_bytes(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        sock.sendall(b"POST /api/put HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"%x\r\n" % 100_001)
        status, _, _ = read_response(sock)
    assert status == 413


def test_a_same_origin_write_passes_the_cors_list(tsd: TsdProcess) -> None:
    # What a browser on the UI sends: Origin is the server's own, as the Host header says.
    point = {"metric": "door.m", "timestamp": 1_700_000_000, "value": 1, "tags": {"host": "a"}}
    own = requests.post(tsd.url + "/api/put", json=point, headers={"Origin": tsd.url},
                        timeout=10)
    assert own.status_code == 204, own.text
    foreign = requests.post(tsd.url + "/api/put", json=point,
                            headers={"Origin": "http://evil.example"}, timeout=10)
    assert foreign.status_code == 403
    assert foreign.json()["error"]["message"] == "CORS domain not allowed"


def test_connections_per_address_are_capped(tsd: TsdProcess) -> None:
    held = [tsd.connect() for _ in range(40)]
    try:
        for sock in held:  # each sends a byte: they are clients, not silent sockets
            sock.sendall(b"v")
        with tsd.connect() as extra:
            extra.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\n\r\n")
            status, _, body = read_response(extra)
        assert status == 503
        assert b"Too many connections from this address" in body
    finally:
        for sock in held:
            sock.close()
    # The address is served again once the server has seen them close.
    deadline = time.monotonic() + 10
    while True:
        with tsd.connect() as again:
            again.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\n\r\n")
            if read_response(again)[0] == 200:
                break
        assert time.monotonic() < deadline, "still refused 10 s after the 40 closed"
        time.sleep(0.05)


def test_two_thousand_silent_sockets_do_not_keep_a_new_client_out(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    # The silent ones are held for the whole test (30 s first-byte timeout): the new clients
    # are served while all 2,000 are open, not because they were closed. Before: past the
    # connection limit new clients got 503; with the accept pauses, the first waited ~20 s.
    server = start_tsd(tmp_path_factory.mktemp("silent"),
                       {"tsd.server.first_byte_timeout_s": 30, "tsd.core.socket.timeout": 300},
                       workers=2)
    silent: list[socket.socket] = []
    try:
        for _ in range(2000):
            silent.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        started = time.monotonic()
        for _ in range(20):
            with server.connect(timeout_s=20) as sock:
                sock.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\n\r\n")
                status, _, _ = read_response(sock, timeout_s=20)
                assert status == 200
        # Behind 2,000 connections in the accept queue: 2-3 s on the loaded test machine.
        assert time.monotonic() - started < 15
    finally:
        for sock in silent:
            sock.close()
        server.stop()


def test_dropcaches_is_refused_in_ro_mode_on_both_protocols(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """A read-only server: the line protocol answers ``dropcaches`` as an unknown command
    (as ``put``) and HTTP has no such route; a read-write one drops them on both."""
    for mode, line_reply, status in (
            ("ro", b"unknown command: dropcaches.  Try `help'.\n", 404),
            ("rw", b"Caches dropped.\n", 200)):
        server = start_tsd(tmp_path_factory.mktemp(mode), {**SETTINGS, "tsd.mode": mode},
                           workers=1)
        try:
            with server.connect() as sock:
                sock.sendall(b"dropcaches\n")
                assert read_exactly_until(sock, b"\n") == line_reply
            assert requests.get(server.url + "/api/dropcaches", timeout=10).status_code == status
        finally:
            server.stop()
