"""The access log's line for each HTTP request, written through gunicorn's access logger.

``Logger.info`` spent ~25 µs a request, a tenth of a plain put's whole server CPU: most of
it looking up the caller's file and line in the stack (``findCaller``) and formatting the
arguments into the line. The line is made here once, and its record handed to the logger's
``handle``, so gunicorn's handlers (its file, syslog, the reopen on ``USR1``) and any filter
still see every line as before.
"""

from __future__ import annotations

import logging

from app.server.wsgi_bridge import Request

URI_CHARS = 1024  # a request line may be 8 KB: the log is not the place to replay it
HEADER_CHARS = 256


class AccessLog:
    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger

    def request(self, peer: str, request: Request, status: int, size: int,
                duration_s: float) -> None:
        referer = user_agent = b"-"
        for name, value in request.headers:
            if name == b"referer":
                referer = value
            elif name == b"user-agent":
                user_agent = value
        target = request.target[:URI_CHARS].decode("latin-1")
        self._write(f'{peer} "{request.method} {target} HTTP/{request.http_version}" '
                    f'{status} {size} {int(duration_s * 1000)}ms '
                    f'"{referer[:HEADER_CHARS].decode("latin-1")}" '
                    f'"{user_agent[:HEADER_CHARS].decode("latin-1")}"')

    def refused(self, peer: str, status: int, size: int) -> None:
        """A request answered before it was read (a protocol error, a limit)."""
        self._write(f'{peer} "-" {status} {size} 0ms "-" "-"')

    def _write(self, line: str) -> None:
        logger = self.logger
        if logger.isEnabledFor(logging.INFO):
            logger.handle(logger.makeRecord(logger.name, logging.INFO, __file__, 0, line, (),
                                            None))
