"""One HTTP/1.1 connection: read each request completely, run the app, write the answer.

Nothing reaches the app before its request is complete (nginx-style buffering), so a slow
client costs a coroutine and its buffer, never a thread. h11 parses and frames (it rejects
malformed request lines, conflicting lengths, bad chunking); this module adds the limits,
the deadlines and OpenTSDB's JSON for every error the server answers by itself.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Protocol

import h11

from app.observe.metrics import SERVER_REFUSED
from app.server.errors import HttpError, error_response
from app.server.framing import ChunkSizes, find_head_end
from app.server.settings import ServerLimits
from app.server.simple_http import encode_reply, parse_head
from app.server.streams import drain, read_block
from app.server.wsgi_bridge import Reply, Request, error_reply

WATCH_S = 0.25  # how often a running request's connection is looked at
NEVER_SET = threading.Event()  # the watch of a request whose handler does not look


class Connection(Protocol):
    """What the protocol handlers need of a connection (see worker.Conn)."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    peer: tuple[str, int]
    server: tuple[str, int]
    idle: bool


class BodyBudget:
    """Bytes of request bodies one worker holds at once, read or being read: a bound on memory
    that the per-request cap alone does not give (it multiplies by the connections)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> None:
        if self.used + size > self.limit:
            raise HttpError(503, "Service Unavailable",
                            "Too many request bodies are being received by this worker")
        self.used += size

    def give(self, size: int) -> None:
        self.used -= size


class Context(Protocol):
    """What the protocol handlers need of the worker (see worker.TsdWorker)."""

    limits: ServerLimits
    budget: BodyBudget
    closing: bool

    async def run_request(self, request: Request, peer: tuple[str, int],
                          server: tuple[str, int], watch: ClientWatch) -> Reply: ...

    def access(self, peer: str, request: Request | None, status: int, size: int,
               duration_s: float) -> None: ...


async def serve_http(conn: Connection, buffer: bytes, ctx: Context) -> None:
    """Serve requests on ``conn`` until either side closes; ``buffer`` holds bytes already read."""
    limits = ctx.limits
    while True:
        try:
            if not buffer:
                buffer = await _wait_first_byte(conn, limits.keepalive_timeout_s)
                if not buffer:
                    return  # closed, or idle past the keep-alive timeout: close silently
            parsed, buffer = await _read_request(conn, buffer, ctx)
            if parsed is None:
                return  # the client went away mid-request: nobody to answer
            request, framing = parsed
        except HttpError as exc:
            SERVER_REFUSED.labels(str(exc.code)).inc()
            answer = error_response(exc.code, exc.message, exc.details)
            ctx.access(conn.peer[0], None, exc.code, len(answer), 0.0)
            if await _send(conn, answer, limits):
                await _linger(conn)
            return
        started = time.perf_counter()
        try:
            reply = await _dispatch(conn, request, ctx)
            keep_alive = await _write_reply(conn, framing, request, reply, ctx)
        finally:
            ctx.budget.give(len(request.body))
        ctx.access(conn.peer[0], request, reply.status, len(reply.body),
                   time.perf_counter() - started)
        if not keep_alive or ctx.closing:
            return


async def _linger(conn: Connection, max_s: float = 2.0, max_bytes: int = 4 << 20) -> None:
    """After an error answer, read and drop what the client is still sending (bounded).

    Closing a socket with unread data makes the kernel send a reset, which can destroy the
    answer before the client reads it: a client uploading a body too large would see
    "connection reset" instead of the 413. nginx calls this a lingering close.
    """
    try:
        if conn.writer.can_write_eof():
            conn.writer.write_eof()
        deadline = time.monotonic() + max_s
        dropped = 0
        while dropped < max_bytes and (remaining := deadline - time.monotonic()) > 0:
            data = await read_block(conn.reader, remaining)
            if not data:
                return
            dropped += len(data)
    except (TimeoutError, ConnectionError, OSError):
        return


async def _wait_first_byte(conn: Connection, timeout_s: float) -> bytes:
    conn.idle = True
    try:
        return await read_block(conn.reader, timeout_s)
    except (TimeoutError, ConnectionError):
        return b""
    finally:
        conn.idle = False


class PlainHead:
    """A request read without h11 (app/server/simple_http.py): its head, kept to hand the
    request to h11 after all when its answer is not the plain shape."""

    def __init__(self, head: bytes) -> None:
        self.head = head

    def parser(self, body: bytes) -> h11.Connection:
        """An h11 parser that has read this request, ready for its answer."""
        parser = h11.Connection(h11.SERVER, max_incomplete_event_size=len(self.head) + 1)
        parser.receive_data(self.head + body)
        while parser.next_event() is not h11.NEED_DATA and parser.their_state is not h11.DONE:
            pass
        return parser


Framing = h11.Connection | PlainHead


async def _read_request(
    conn: Connection, buffer: bytes, ctx: Context
) -> tuple[tuple[Request, Framing] | None, bytes]:
    """The next complete request and what frames its response, and the bytes after it.

    The body's bytes are taken from ``ctx.budget``; the caller gives them back when done.
    """
    limits = ctx.limits
    deadline = time.monotonic() + limits.head_timeout_s
    while (end := find_head_end(buffer, limits.max_line_bytes, limits.max_header_bytes)) < 0:
        data = await _read(conn, deadline, "head", limits.head_timeout_s)
        if not data:
            return None, b""
        buffer += data
    plain = parse_head(buffer[:end])
    if plain is not None:
        _check_announced(plain.content_length, limits.max_body_bytes)
        body, rest = await _read_plain_body(conn, buffer[end:], plain.content_length, limits,
                                            ctx.budget)
        request = Request(plain.method.decode("ascii"), plain.target, "1.1", plain.headers,
                          body)
        return (request, PlainHead(buffer[:end])), rest
    parser = h11.Connection(h11.SERVER, max_incomplete_event_size=end + 1)
    parser.receive_data(buffer)
    event = _next_event(parser)
    if not isinstance(event, h11.Request):  # find_head_end saw a complete head
        raise HttpError(400, "Bad Request", "Malformed request head")
    if event.http_version not in (b"1.0", b"1.1"):
        raise HttpError(400, "Bad Request",
                        f"Unsupported HTTP version {event.http_version.decode('ascii')}")
    chunked = _check_length(event, limits.max_body_bytes)
    if chunked is not None:
        chunked.feed(buffer[end:])
    body = await _read_body(conn, parser, limits, ctx.budget, chunked)
    request = Request(event.method.decode("ascii"), event.target,
                      event.http_version.decode("ascii"), list(event.headers), body)
    return (request, parser), parser.trailing_data[0]


def _next_event(parser: h11.Connection) -> object:
    try:
        return parser.next_event()
    except h11.RemoteProtocolError as exc:
        raise HttpError(400, "Bad Request", str(exc)) from exc


def _check_length(event: h11.Request, max_body_bytes: int) -> ChunkSizes | None:
    """Refuse a body announced too large, or announced twice; a reader of a chunked body's
    sizes, or None when it is not chunked."""
    names = {name for name, _ in event.headers}
    if b"content-length" in names and b"transfer-encoding" in names:
        # RFC 9112 6.3: a request smuggling shape; the connection closes after the 400.
        raise HttpError(400, "Bad Request",
                        "Content-Length and Transfer-Encoding must not both be sent")
    for name, value in event.headers:
        if name == b"content-length":
            _check_announced(int(value), max_body_bytes)
    return ChunkSizes(max_body_bytes) if b"transfer-encoding" in names else None


def _check_announced(length: int, max_body_bytes: int) -> None:
    """Refuse a body whose announced length (``Content-Length``) is over the limit."""
    if length > max_body_bytes:
        raise HttpError(413, "Request Entity Too Large",
                        f"The body is {length} bytes; the limit is {max_body_bytes}")


async def _read_body(conn: Connection, parser: h11.Connection, limits: ServerLimits,
                     budget: BodyBudget, chunked: ChunkSizes | None) -> bytes:
    chunks: list[bytes] = []
    try:
        return await _read_chunks(conn, parser, limits, budget, chunks, chunked)
    except BaseException:
        budget.give(sum(len(chunk) for chunk in chunks))
        raise


async def _read_chunks(conn: Connection, parser: h11.Connection, limits: ServerLimits,
                       budget: BodyBudget, chunks: list[bytes],
                       chunked: ChunkSizes | None) -> bytes:
    deadline = time.monotonic() + limits.body_timeout_s
    size = 0
    while True:
        event = _next_event(parser)
        if event is h11.NEED_DATA:
            if parser.they_are_waiting_for_100_continue:
                continue_head = parser.send(h11.InformationalResponse(status_code=100,
                                                                      headers=[]))
                await _send(conn, continue_head or b"", limits)
            data = await _read(conn, deadline, "body", limits.body_timeout_s)
            if chunked is not None:
                chunked.feed(data)
            parser.receive_data(data)
        elif isinstance(event, h11.Data):
            size += len(event.data)
            if size > limits.max_body_bytes:
                raise HttpError(413, "Request Entity Too Large",
                                f"The body is over {limits.max_body_bytes} bytes")
            budget.take(len(event.data))
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            return b"".join(chunks)
        elif isinstance(event, h11.ConnectionClosed):
            raise ConnectionResetError("closed mid-body")


async def _read_plain_body(conn: Connection, data: bytes, length: int, limits: ServerLimits,
                           budget: BodyBudget) -> tuple[bytes, bytes]:
    """A Content-Length body, as h11 reads it (its deadline, budget and errors), and the
    bytes after it."""
    chunks: list[bytes] = []
    have = 0
    try:
        deadline = time.monotonic() + limits.body_timeout_s
        while True:
            part = data[:length - have]
            if part:
                budget.take(len(part))
                chunks.append(part)
                have += len(part)
            if have == length:
                return b"".join(chunks), data[len(part):]
            data = await _read(conn, deadline, "body", limits.body_timeout_s)
            if not data:
                raise HttpError(400, "Bad Request",
                                "peer closed connection without sending complete message body "
                                f"(received {have} bytes, expected {length})")
    except BaseException:
        budget.give(have)
        raise


async def _read(conn: Connection, deadline: float, part: str, timeout_s: float) -> bytes:
    remaining = deadline - time.monotonic()
    try:
        if remaining <= 0:
            raise TimeoutError
        return await read_block(conn.reader, remaining)
    except TimeoutError as exc:
        raise HttpError(408, "Request Timeout",
                        f"The request {part} was not received within {timeout_s:g} s") from exc


async def _dispatch(conn: Connection, request: Request, ctx: Context) -> Reply:
    watch = ClientWatch(conn)
    try:
        return await ctx.run_request(request, conn.peer, conn.server, watch)
    except HttpError as exc:  # overloaded
        SERVER_REFUSED.labels(str(exc.code)).inc()
        return error_reply(exc.code, exc.message, exc.details)
    finally:
        watch.stop()


class ClientWatch:
    """Sets ``gone`` when the client closes its connection while its request runs (as nginx
    counts a client abort), so the app can drop work nobody will read: a query still waiting
    for its lane gives up (app/tsdb/admission.py). Looked at every ``WATCH_S`` once a request
    has run that long: a timer, no task per request; armed by :meth:`start` (on the loop),
    for the requests whose handler looks (not a put the worker stores itself)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.gone = NEVER_SET
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> threading.Event:
        """Arm the watch; the event it sets."""
        self.gone = threading.Event()
        self._timer = asyncio.get_running_loop().call_later(WATCH_S, self._look)
        return self.gone

    def _look(self) -> None:
        # EOF with nothing left to read: bytes still buffered may be a pipelined request.
        if self.conn.reader.at_eof() or self.conn.writer.transport.is_closing():
            self.gone.set()
            self._timer = None
            return
        self._timer = asyncio.get_running_loop().call_later(WATCH_S, self._look)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


async def _write_reply(conn: Connection, framing: Framing, request: Request,
                       reply: Reply, ctx: Context) -> bool:
    """Write ``reply``; return whether the connection stays open for another request."""
    if isinstance(framing, PlainHead):
        if not ctx.closing and request.method != "HEAD":
            data = reply.plain or encode_reply(reply.status, reply.reason, reply.headers,
                                               reply.body)
            if data is not None:
                return await _send(conn, data, ctx.limits)
        parser = framing.parser(request.body)
    else:
        parser = framing
    headers = [(name.encode("latin-1"), value.encode("latin-1"))
               for name, value in reply.headers]
    if ctx.closing:
        headers.append((b"connection", b"close"))
    try:
        data = parser.send(h11.Response(status_code=reply.status, headers=headers,
                                        reason=reply.reason.encode("latin-1")))
        if request.method != "HEAD" and reply.body:
            data = (data or b"") + (parser.send(h11.Data(data=reply.body)) or b"")
        data = (data or b"") + (parser.send(h11.EndOfMessage()) or b"")
    except (h11.LocalProtocolError, UnicodeEncodeError, ValueError):
        await _send(conn, error_response(500, "Internal Server Error",
                                         "The handler produced an invalid response"), ctx.limits)
        return False
    if not await _send(conn, data, ctx.limits):
        return False
    return parser.our_state is h11.DONE and parser.their_state is h11.DONE


async def _send(conn: Connection, data: bytes, limits: ServerLimits) -> bool:
    """Write and wait for the client to take it (bounded): back-pressure, not buffering."""
    try:
        conn.writer.write(data)
        await drain(conn.writer, limits.body_timeout_s)
        return True
    except (TimeoutError, ConnectionError):
        return False
