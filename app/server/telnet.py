"""One line-protocol connection: frame lines, run them through the session, write the replies.

One ``handle_lines`` call at a time per connection, in the worker's thread pool, and the next
block is read only after the reply has been written and drained: a client that sends faster
than the server stores is slowed down by TCP, never buffered without bound.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from app.server.framing import MAX_LINE_BYTES, LineFramer, TooLong
from app.server.http import Connection, Context
from app.server.streams import drain, read_block

# Runs ``session.handle_lines(lines)`` off the event loop.
RunLines = Callable[[list[bytes]], Awaitable[tuple[bytes, bool]]]


async def serve_lines(conn: Connection, first: bytes, ctx: Context, run_lines: RunLines) -> None:
    framer = LineFramer(MAX_LINE_BYTES)
    timeout_s = ctx.limits.socket_timeout_s or None
    data: bytes | None = first
    while data:
        for segment in framer.feed(data):
            if not await _handle(conn, segment, run_lines, ctx):
                return
        if ctx.closing:
            return
        data = await _read_idle(conn, timeout_s)
    last = framer.finish()
    if data is not None and last:  # the client closed: its unterminated last line counts
        await _handle(conn, last, run_lines, ctx)


async def _handle(conn: Connection, segment: list[bytes] | TooLong, run_lines: RunLines,
                  ctx: Context) -> bool:
    """Execute one segment and write its reply; return whether the connection stays open."""
    if isinstance(segment, TooLong):
        reply, close = segment.reply(MAX_LINE_BYTES), False
    else:
        reply, close = await run_lines(segment)
    if reply:
        conn.writer.write(reply)
        try:
            await drain(conn.writer, ctx.limits.body_timeout_s)
        except (TimeoutError, ConnectionError):
            return False
    return not close


async def _read_idle(conn: Connection, timeout_s: float | None) -> bytes | None:
    """The next block; ``b""`` when the client closed, None when it was idle too long or failed."""
    conn.idle = True
    try:
        return await read_block(conn.reader, timeout_s)
    except (TimeoutError, ConnectionError):
        return None  # idle past tsd.core.socket.timeout: closed, as OpenTSDB does
    finally:
        conn.idle = False
