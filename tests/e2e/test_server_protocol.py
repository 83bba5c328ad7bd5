"""The serving model at the byte level: a real gunicorn with pytsd's worker, raw sockets.

Every error the server answers by itself is OpenTSDB's JSON with the right status; the line
protocol shares the HTTP port; lines are framed as OpenTSDB frames them (or better).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.tsd_process import (
    TsdProcess,
    free_port,
    read_exactly_until,
    read_response,
    read_until_closed,
    start_tsd,
)

LIMITS = {
    "tsd.core.socket.timeout": 2,
    "tsd.core.connections.limit": 20,
    "tsd.http.request.max_body_bytes": 100_000,
    "tsd.http.request.max_line_bytes": 2000,
    "tsd.http.request.max_header_bytes": 4000,
    "tsd.http.request.head_timeout_s": 1,
    "tsd.http.request.body_timeout_s": 1,
    "tsd.http.keepalive_timeout_s": 1,
    "tsd.core.auto_create_metrics": "true",
}
UNKNOWN = b"unknown command: %s.  Try `help'.\n"


@pytest.fixture(scope="module")
def tsd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TsdProcess]:
    telnet_port = free_port()
    server = start_tsd(tmp_path_factory.mktemp("protocol"),
                       {**LIMITS, "tsd.network.telnet_port": telnet_port})
    server.telnet_port = telnet_port  # type: ignore[attr-defined]
    yield server
    server.stop()


def assert_json_error(raw: bytes, code: int, message: str) -> dict[str, object]:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {code} ".encode()), raw[:300]
    assert b"content-type: application/json" in head.lower()
    assert b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == code and error["message"] == message, error
    return dict(error)


# ---- protocol errors: always JSON, never gunicorn's HTML ---------------------------------

def test_bad_request_line_is_400_json(tsd: TsdProcess) -> None:
    for line in (b"GET\r\n\r\n", b"BLAH / HTTP/1.1 x\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n"):
        with tsd.connect() as sock:
            sock.sendall(line)
            assert_json_error(read_until_closed(sock), 400, "Bad Request")


def test_long_url_is_414_json_without_waiting_for_the_line_end(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        sock.sendall(b"GET /api/version?" + b"a" * 3000)  # no end of line yet
        error = assert_json_error(read_until_closed(sock), 414, "Request-URI Too Long")
    assert "2000 bytes" in str(error["details"])


def test_huge_headers_are_431_json(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        sock.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 5000)
        assert_json_error(read_until_closed(sock), 431, "Request Header Fields Too Large")


def test_announced_body_over_the_cap_is_413_before_it_is_sent(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        sock.sendall(b"POST /api/put HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100001\r\n\r\n")  # and not one byte of the body
        assert_json_error(read_until_closed(sock), 413, "Request Entity Too Large")


def test_chunked_body_over_the_cap_is_413(tsd: TsdProcess) -> None:
    chunk = b"x" * 30_000
    with tsd.connect() as sock:
        sock.sendall(b"POST /api/put HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(4):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        assert_json_error(read_until_closed(sock), 413, "Request Entity Too Large")


def test_expect_100_continue_then_body(tsd: TsdProcess) -> None:
    body = json.dumps({"metric": "proto.expect", "timestamp": 1_600_000_000, "value": 1,
                       "tags": {"host": "a"}}).encode()
    with tsd.connect() as sock:
        sock.sendall(b"POST /api/put HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body))
        assert read_exactly_until(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 100 ")
        sock.sendall(body)
        status, _, _ = read_response(sock)
    assert status == 204


def test_slow_head_is_408_json(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        sock.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        raw = read_until_closed(sock, timeout_s=10)
    assert_json_error(raw, 408, "Request Timeout")
    assert 0.5 < time.monotonic() - started < 5


def test_slow_body_is_408_json(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        sock.sendall(b"POST /api/put HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n[{")
        assert_json_error(read_until_closed(sock, timeout_s=10), 408, "Request Timeout")


def test_connections_over_the_limit_get_503_json(tsd: TsdProcess) -> None:
    held = [tsd.connect() for _ in range(20)]
    try:
        for sock in held:  # every one accepted and counted
            sock.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(sock)[0] == 200
        with tsd.connect() as extra:
            extra.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\n\r\n")
            assert_json_error(read_until_closed(extra), 503, "Service Unavailable")
        with tsd.connect() as extra:
            extra.sendall(b"version\n")
            assert read_until_closed(extra) == b"error: too many connections\n"
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    with tsd.connect() as sock:  # room again once they are gone
        sock.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(sock)[0] == 200


# ---- keep-alive ---------------------------------------------------------------------------

def test_keep_alive_serves_several_requests_then_times_out(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        for _ in range(3):
            sock.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\n\r\n")
            status, headers, body = read_response(sock)
            assert status == 200 and json.loads(body)["version"] == "2.4.1"
            assert headers.get("connection") != "close"
        # pipelined: two requests in one packet, two answers in order
        sock.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /api/nope HTTP/1.1\r\nHost: x\r\n\r\n")
        first = read_exactly_until(sock, b"Endpoint not found", timeout_s=5)
        assert first.startswith(b"HTTP/1.1 200 ") and b"HTTP/1.1 404 " in first
        started = time.monotonic()
        assert b"HTTP/" not in read_until_closed(sock, timeout_s=10)  # idle: closed, silently
    assert time.monotonic() - started < 5


def test_http_1_0_closes_after_the_answer(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        sock.sendall(b"GET /api/version HTTP/1.0\r\n\r\n")
        raw = read_until_closed(sock)
    assert raw.startswith(b"HTTP/1.1 200 ") and b'"version":"2.4.1"' in raw


# ---- one port, two protocols; line framing ------------------------------------------------

def test_line_protocol_and_http_share_the_port(tsd: TsdProcess) -> None:
    with tsd.connect() as lines, tsd.connect() as http:
        lines.sendall(b"put proto.sniff 1600000000 1 host=a\nfrob x\n")
        reply = read_exactly_until(lines, UNKNOWN % b"frob")
        http.sendall(b"GET /api/version HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, _ = read_response(http)
    assert b"HTTP/" not in reply  # the session answered the put line, not an HTTP parser
    assert status == 200


def test_telnet_port_speaks_only_the_line_protocol(tsd: TsdProcess) -> None:
    port = tsd.telnet_port  # type: ignore[attr-defined]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /api/version HTTP/1.1\r\nfrob\n")
        reply = read_exactly_until(sock, UNKNOWN % b"frob")
    assert reply == UNKNOWN % b"GET" + UNKNOWN % b"frob"


def test_lines_split_across_blocks_and_crlf(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        sock.sendall(b"fro")
        time.sleep(0.2)
        sock.sendall(b"b1\r\nfrob2\nfr")
        expected = UNKNOWN % b"frob1" + UNKNOWN % b"frob2"
        assert read_exactly_until(sock, UNKNOWN % b"frob2") == expected
        time.sleep(0.2)
        sock.sendall(b"ob3\r\n")
        assert read_exactly_until(sock, b"\n") == UNKNOWN % b"frob3"


def test_too_long_line_is_answered_and_the_next_lines_still_count(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        sock.sendall(b"frob1\n" + b"x" * 700)
        time.sleep(0.1)
        sock.sendall(b"y" * 700 + b"\nfrob2\n")  # 1400 bytes in all, across two blocks
        reply = read_exactly_until(sock, UNKNOWN % b"frob2")
        sock.sendall(b"z" * 1025 + b"\nfrob3\n")  # too long within one block
        reply += read_exactly_until(sock, UNKNOWN % b"frob3")
    error = b"error: line too long (over 1024 bytes); discarded\n"
    assert reply == (UNKNOWN % b"frob1" + error + UNKNOWN % b"frob2"
                     + error + UNKNOWN % b"frob3")


def test_line_of_exactly_1024_bytes_is_accepted(tsd: TsdProcess) -> None:
    word = b"q" * 1024
    with tsd.connect() as sock:
        sock.sendall(word + b"\r\n")
        assert read_exactly_until(sock, b"\n") == UNKNOWN % word


def test_exit_closes_and_later_lines_are_not_run(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        sock.sendall(b"frob1\nexit\nfrob2\n")
        assert read_until_closed(sock) == UNKNOWN % b"frob1"


def test_unterminated_last_line_still_runs_at_close(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        sock.sendall(b"frob1\nfrob2")
        sock.shutdown(socket.SHUT_WR)
        assert read_until_closed(sock) == UNKNOWN % b"frob1" + UNKNOWN % b"frob2"


def test_idle_line_connection_is_closed(tsd: TsdProcess) -> None:
    with tsd.connect() as sock:
        sock.sendall(b"frob\n")
        started = time.monotonic()
        assert read_until_closed(sock, timeout_s=10) == UNKNOWN % b"frob"
    assert 1.5 < time.monotonic() - started < 6  # tsd.core.socket.timeout = 2


def test_many_persistent_line_connections(tsd: TsdProcess, tmp_path: Path) -> None:
    del tmp_path
    socks = [tsd.connect() for _ in range(15)]  # under this server's limit of 20
    try:
        for round_ in range(3):
            for number, sock in enumerate(socks):
                sock.sendall(b"frob%d.%d\n" % (number, round_))
            for number, sock in enumerate(socks):
                assert read_exactly_until(sock, b"\n") == UNKNOWN % b"frob%d.%d" % (number,
                                                                                  round_)
    finally:
        for sock in socks:
            sock.close()
