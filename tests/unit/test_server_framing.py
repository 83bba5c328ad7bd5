"""The pure parts of the serving model: line framing, head limits, error bodies, WSGI bridge."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from app.server.errors import HttpError, error_body, error_response
from app.server.framing import LineFramer, TooLong, find_head_end
from app.server.settings import is_heavy
from app.server.wsgi_bridge import Request, build_environ, call_app


def lines_of(segments: list[Any]) -> list[Any]:
    return [seg if isinstance(seg, list) else ("too long", seg.length) for seg in segments]


def test_framer_splits_strips_cr_and_keeps_partial_lines() -> None:
    framer = LineFramer(10)
    assert lines_of(framer.feed(b"ab\r\ncd\nef")) == [[b"ab", b"cd"]]
    assert lines_of(framer.feed(b"g\r")) == []
    assert lines_of(framer.feed(b"\n\n")) == [[b"efg", b""]]
    assert framer.finish() == []


def test_framer_reports_long_lines_in_order_and_resumes() -> None:
    framer = LineFramer(10)
    assert lines_of(framer.feed(b"ok1\n" + b"x" * 11 + b"\nok2\n")) == [
        [b"ok1"], ("too long", 11), [b"ok2"]]
    assert lines_of(framer.feed(b"y" * 12)) == [("too long", 12)]  # reported once...
    assert lines_of(framer.feed(b"y" * 50)) == []  # ...and discarded up to its end
    assert lines_of(framer.feed(b"yy\nok3\npart")) == [[b"ok3"]]
    assert framer.finish() == [b"part"]


def test_framer_limit_is_inclusive_and_cr_does_not_count() -> None:
    framer = LineFramer(4)
    assert lines_of(framer.feed(b"abcd\r")) == []  # 5 bytes may still be "abcd\r\n"
    assert lines_of(framer.feed(b"\nabcde\n")) == [[b"abcd"], ("too long", 5)]
    assert isinstance(framer.feed(b"abcdef")[0], TooLong)


def test_head_end_and_limits() -> None:
    assert find_head_end(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody", 100, 100) == 27
    assert find_head_end(b"GET / HTTP/1.0\n\n", 100, 100) == 16
    assert find_head_end(b"GET / HTTP/1.1\r\nHost: x\r\n", 100, 100) == -1
    with pytest.raises(HttpError) as url:
        find_head_end(b"GET /" + b"a" * 200, 100, 100)  # no line end needed to know
    assert url.value.code == 414
    with pytest.raises(HttpError) as headers:
        find_head_end(b"GET / HTTP/1.1\r\nX: " + b"b" * 200, 100, 100)
    assert headers.value.code == 431


def test_error_body_and_response_are_opentsdb_json() -> None:
    assert json.loads(error_body(413, "Too big", "over 5")) == {
        "error": {"code": 413, "message": "Too big", "details": "over 5"}}
    assert json.loads(error_body(400, "Bad")) == {"error": {"code": 400, "message": "Bad"}}
    raw = error_response(431, "Request Header Fields Too Large")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert b"Content-Length: %d" % len(body) in head and b"Connection: close" in head


def test_heavy_paths_are_the_queries() -> None:
    assert is_heavy("/api/query") and is_heavy("/API/Query/") and is_heavy("/api/query/exp")
    assert is_heavy("/q") and is_heavy("/api/search/lookup")
    assert not is_heavy("/api/version") and not is_heavy("/api/queryx") and not is_heavy("/")


def test_environ_follows_pep_3333() -> None:
    request = Request("POST", b"/api/put%2Fx?summary&a=%20", "1.1",
                      [(b"host", b"h"), (b"content-type", b"application/json"),
                       (b"x-a", b"1"), (b"x-a", b"2"), (b"transfer-encoding", b"chunked")],
                      b"[]")
    environ = build_environ(request, ("10.0.0.1", 5000), ("127.0.0.1", 4242))
    assert environ["PATH_INFO"] == "/api/put/x" and environ["QUERY_STRING"] == "summary&a=%20"
    assert environ["CONTENT_TYPE"] == "application/json" and environ["CONTENT_LENGTH"] == "2"
    assert environ["HTTP_X_A"] == "1,2" and "HTTP_TRANSFER_ENCODING" not in environ
    assert environ["wsgi.input"].read() == b"[]" and environ["REMOTE_ADDR"] == "10.0.0.1"


def crashing_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    raise RuntimeError("boom")


def app_without_start(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    return [b"x"]


def hello_app(environ: dict[str, Any], start_response: Any) -> Any:
    write = start_response("201 Created", [("X-A", "1")])
    write(b"he")
    return io.BytesIO(b"llo")  # has close(): the bridge must call it


def test_call_app_collects_the_answer_and_crashes_become_json_500() -> None:
    environ = build_environ(Request("GET", b"/", "1.1", [], b""), ("a", 1), ("b", 2))
    reply = call_app(hello_app, environ)
    assert (reply.status, reply.reason, reply.headers, reply.body) == (
        201, "Created", [("X-A", "1")], b"hello")
    for app in (crashing_app, app_without_start):
        crashed = call_app(app, environ)
        assert crashed.status == 500
        assert json.loads(crashed.body)["error"]["message"] == "Internal Server Error"
