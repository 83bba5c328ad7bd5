"""Call a WSGI app on a fully buffered request and collect its whole answer (runs in a thread)."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes

from app.server.errors import error_body

log = logging.getLogger(__name__)


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass
class Request:
    method: str
    target: bytes
    http_version: str  # "1.1"
    headers: list[tuple[bytes, bytes]]  # names lower-cased
    body: bytes


@dataclass
class Reply:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    plain: bytes | None = None  # its bytes to a plain request (simple_http), when known


def build_environ(request: Request, peer: tuple[str, int], server: tuple[str, int],
                  url_scheme: str = "http") -> dict[str, Any]:
    """PEP 3333's environ for ``request`` (strings are latin-1 decoded bytes, as it requires)."""
    path, _, query = request.target.partition(b"?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
        "RAW_URI": request.target.decode("latin-1"),
        "QUERY_STRING": query.decode("latin-1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": f"HTTP/{request.http_version}",
        "REMOTE_ADDR": str(peer[0]),
        "REMOTE_PORT": str(peer[1]),
        "CONTENT_LENGTH": str(len(request.body)),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": url_scheme,
        "wsgi.input": io.BytesIO(request.body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    for name, value in request.headers:
        key = name.decode("latin-1").upper().replace("-", "_")
        text = value.decode("latin-1")
        if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            if key == "CONTENT_TYPE":
                environ[key] = text
            continue  # the length is the buffered body's (a chunked body had none)
        if key == "TRANSFER_ENCODING":
            continue  # the body is already de-chunked
        key = "HTTP_" + key
        environ[key] = f"{environ[key]},{text}" if key in environ else text
    return environ


def call_app(app: WsgiApp, environ: dict[str, Any]) -> Reply:
    """Run the app to completion; a crash becomes OpenTSDB's JSON 500, never a half answer."""
    try:
        return _call(app, environ)
    except Exception:
        log.exception("%s %s crashed", environ["REQUEST_METHOD"], environ["PATH_INFO"])
        return crash_reply()


def crash_reply() -> Reply:
    return error_reply(500, "Internal Server Error", "The request handler failed")


def error_reply(code: int, message: str, details: str | None = None) -> Reply:
    return Reply(code, message, [("Content-Type", "application/json; charset=UTF-8")],
                 error_body(code, message, details))


def _call(app: WsgiApp, environ: dict[str, Any]) -> Reply:
    started: list[Any] = []
    written: list[bytes] = []

    def start_response(status: str, headers: list[tuple[str, str]],
                       exc_info: Any = None) -> Callable[[bytes], None]:
        if exc_info is not None and started:
            raise exc_info[1].with_traceback(exc_info[2])
        started[:] = [status, headers]
        return written.append

    result = app(environ, start_response)
    try:
        chunks = written + [bytes(chunk) for chunk in result]
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    if not started:
        raise RuntimeError("the WSGI app returned without calling start_response")
    code, _, reason = started[0].partition(" ")
    return Reply(int(code), reason, list(started[1]), b"".join(chunks))
