"""The plain-request framing (app/server/simple_http.py) against h11 itself, the oracle: a head
it reads must be read as h11 reads it, an answer it writes must be h11's bytes, and whatever
it does not read or write must be left to h11 (None)."""

from __future__ import annotations

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.server.simple_http import encode_reply, parse_head

PUT = b'[{"metric":"m","timestamp":1,"value":1,"tags":{"h":"a"}}]'


def h11_request(head: bytes, body: bytes) -> tuple[bytes, bytes, list[tuple[bytes, bytes]], int]:
    """(method, target, headers, body length) as h11 reads ``head`` + ``body``."""
    parser = h11.Connection(h11.SERVER, max_incomplete_event_size=len(head) + 1)
    parser.receive_data(head + body)
    request = parser.next_event()
    assert isinstance(request, h11.Request)
    assert request.http_version == b"1.1"
    size = 0
    while not isinstance(event := parser.next_event(), h11.EndOfMessage):
        assert isinstance(event, h11.Data), event
        size += len(event.data)
    assert parser.their_state is h11.DONE
    return request.method, request.target, list(request.headers), size


def fast_request(head: bytes) -> tuple[bytes, bytes, list[tuple[bytes, bytes]], int] | None:
    plain = parse_head(head)
    if plain is None:
        return None
    return plain.method, plain.target, plain.headers, plain.content_length


PLAIN_HEADS = [
    b"POST /api/put HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n" % len(PUT),
    b"GET /api/version HTTP/1.1\r\nHost: h\r\n\r\n",
    b"GET /api/query?start=1h-ago&m=sum:a%7Bb=*%7D HTTP/1.1\r\nhOsT:  x:80 \r\n"
    b"User-Agent: curl/8.0 (x86_64)\t\r\nAccept:\r\n\r\n",
    b"PUT /a HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nX-Empty: \r\n\r\n",
    b"POST /api/put HTTP/1.1\r\nHost: h\r\nContent-Length: 007\r\n\r\n",
    b"DELETE /api/annotation HTTP/1.1\r\nHost: h\r\nX-Obs: caf\xe9\r\n\r\n",
]

H11_HEADS = [  # each is h11's to read or refuse
    b"GET / HTTP/1.0\r\n\r\n",
    b"GET / HTTP/1.0\r\nHost: h\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n",
    b"CONNECT h:443 HTTP/1.1\r\nHost: h\r\n\r\n",
    b"GET / HTTP/1.1\r\n\r\n",  # no Host: 400
    b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",  # two: 400
    b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 3\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 123456789012345678901\r\n\r\n",
    b"GET / HTTP/1.1\nHost: h\n\n",  # bare LF line ends
    b"GET / HTTP/1.1\r\nHost: h\nX: y\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r b\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n  folded\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\nBad Name: y\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\n\r\n",
    b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n",
    b"GET /a b HTTP/1.1\r\nHost: h\r\n\r\n",
    b"GET / HTTP/2.0\r\nHost: h\r\n\r\n",
    b"G\xe9T / HTTP/1.1\r\nHost: h\r\n\r\n",
    b"GET /\xe9 HTTP/1.1\r\nHost: h\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: h\r\n",  # incomplete
]


@pytest.mark.parametrize("head", PLAIN_HEADS)
def test_a_plain_head_is_read_as_h11_reads_it(head: bytes) -> None:
    fast = fast_request(head)
    assert fast is not None
    assert fast == h11_request(head, b"x" * fast[3])


@pytest.mark.parametrize("head", H11_HEADS)
def test_any_other_head_is_left_to_h11(head: bytes) -> None:
    assert parse_head(head) is None


def test_the_values_are_what_the_client_sent_without_surrounding_space() -> None:
    plain = parse_head(PLAIN_HEADS[2])
    assert plain is not None
    assert plain.target == b"/api/query?start=1h-ago&m=sum:a%7Bb=*%7D"
    assert plain.headers == [(b"host", b"x:80"), (b"user-agent", b"curl/8.0 (x86_64)"),
                             (b"accept", b"")]


def h11_reply(status: int, reason: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    parser = h11.Connection(h11.SERVER)
    parser.receive_data(PLAIN_HEADS[1])
    assert isinstance(parser.next_event(), h11.Request)
    assert isinstance(parser.next_event(), h11.EndOfMessage)
    data = parser.send(h11.Response(status_code=status, reason=reason.encode("latin-1"),
                                    headers=[(n.encode("latin-1"), v.encode("latin-1"))
                                             for n, v in headers])) or b""
    if body:
        data += parser.send(h11.Data(data=body)) or b""
    data += parser.send(h11.EndOfMessage()) or b""
    assert parser.our_state is h11.DONE  # kept alive
    return data


JSON = [("Content-Type", "application/json; charset=UTF-8")]
SECURITY = [("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY")]
ERROR = b'{"error":{"code":400,"message":"One or more data points had errors"}}'
PLAIN_REPLIES = [
    (204, "NO CONTENT", SECURITY, b""),
    (204, "NO CONTENT", [("Content-Type", "text/html; charset=utf-8"), *SECURITY], b""),
    (200, "OK", [*JSON, ("Content-Length", "2"), *SECURITY], b"{}"),
    (400, "BAD REQUEST", [*JSON, ("Content-Length", str(len(ERROR)))], ERROR),
    (304, "NOT MODIFIED", [("ETag", '"x"')], b""),
    (200, "OK", [("Content-Length", "0")], b""),
    (200, "OK", [("X-Empty", ""), ("Content-Length", "1")], b"a"),
    (599, "", [("Content-Length", "1")], b"a"),
    (200, "OK", [("X", "caf\u00e9"), ("Content-Length", "0")], b""),  # latin-1 obs-text
]
H11_REPLIES = [  # h11 writes (or refuses) each
    (200, "OK", JSON, b"{}"),  # no length: chunked
    (200, "OK", [("Content-Length", "3")], b"{}"),  # h11 refuses: too short
    (200, "OK", [("Content-Length", "1")], b"{}"),
    (200, "OK", [("Content-Length", "2"), ("Content-Length", "2")], b"{}"),
    (200, "OK", [("Content-Length", "2"), ("Connection", "close")], b"{}"),
    (200, "OK", [("Transfer-Encoding", "chunked")], b"{}"),
    (200, "OK", [("Content-Length", "0"), ("Host", "h")], b""),
    (204, "NO CONTENT", [("Content-Length", "0")], b""),
    (204, "NO CONTENT", [], b"x"),
    (200, "OK", [("Bad Name", "x"), ("Content-Length", "0")], b""),
    (200, "OK", [("X", " padded"), ("Content-Length", "0")], b""),
    (200, "OK", [("X", "a\r\nb"), ("Content-Length", "0")], b""),
    (200, "OK", [("X", "\u20ac"), ("Content-Length", "0")], b""),
    (200, "\u00c9", [("Content-Length", "0")], b""),
    (101, "SWITCHING", [], b""),
    (1000, "X", [("Content-Length", "0")], b""),
]


@pytest.mark.parametrize(("status", "reason", "headers", "body"), PLAIN_REPLIES)
def test_a_plain_answer_is_h11s_bytes(status: int, reason: str, headers: list[tuple[str, str]],
                                      body: bytes) -> None:
    data = encode_reply(status, reason, headers, body)
    assert data is not None
    assert data == h11_reply(status, reason, headers, body)


def test_a_204_is_written_as_expected() -> None:
    assert encode_reply(204, "NO CONTENT", SECURITY, b"") == (
        b"HTTP/1.1 204 NO CONTENT\r\nX-Content-Type-Options: nosniff\r\n"
        b"X-Frame-Options: DENY\r\n\r\n")


@pytest.mark.parametrize(("status", "reason", "headers", "body"), H11_REPLIES)
def test_any_other_answer_is_left_to_h11(status: int, reason: str,
                                         headers: list[tuple[str, str]], body: bytes) -> None:
    assert encode_reply(status, reason, headers, body) is None


PIECES = [b"GET", b"POST", b" ", b"  ", b"/", b"/api/put", b"?a=b", b"HTTP/1.1", b"HTTP/1.0",
          b"\r\n", b"\n", b"\r", b"Host: h", b"host:h", b"Content-Length: 2", b"Content-Length: ",
          b"content-length:02", b"Content-Length: 2,2", b"Connection: close",
          b"Transfer-Encoding: chunked", b"X-A: b", b"X-A:\tb c\t", b" ", b"\t", b":",
          b"\x00", b"\xe9", b"X-B: \xff", b"Expect: 100-continue", b"CONNECT"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=14))
def test_any_head_is_read_as_h11_reads_it_or_left_to_it(pieces: list[bytes]) -> None:
    head = b"".join(pieces) + b"\r\n\r\n"
    fast = fast_request(head)
    if fast is None:
        return
    assert fast == h11_request(head, b"x" * fast[3])


REPLY_HEADERS = [("Content-Length", "2"), ("Content-Length", "0"), ("content-length", "2"),
                 ("X-A", "b"), ("X-A", ""), ("X-A", " b"), ("X A", "b"), ("Connection", "close"),
                 ("Host", "h"), ("X-A", "b\tc"), ("X-A", "\u00e9"), ("Transfer-Encoding", "x")]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([200, 204, 304, 400, 404, 500]),
       st.lists(st.sampled_from(REPLY_HEADERS), max_size=5), st.sampled_from([b"", b"{}"]))
def test_any_answer_is_h11s_bytes_or_left_to_it(status: int, headers: list[tuple[str, str]],
                                                body: bytes) -> None:
    data = encode_reply(status, "R", headers, body)
    if data is not None:
        assert data == h11_reply(status, "R", headers, body)
