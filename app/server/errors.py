"""Protocol-level errors as OpenTSDB's JSON, built without Flask (the framing code is pure).

The body has the shape ``app/api/errors.py`` gives every API error:
``{"error": {"code": N, "message": "...", "details": "..."}}``.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any


class HttpError(Exception):
    """A request the server answers itself, before or instead of the app; always closes."""

    def __init__(self, code: int, message: str, details: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


def error_body(code: int, message: str, details: str | None = None) -> bytes:
    body: dict[str, Any] = {"code": code, "message": message}
    if details:
        body["details"] = details
    return json.dumps({"error": body}, separators=(",", ":")).encode()


def error_response(code: int, message: str, details: str | None = None) -> bytes:
    """A complete HTTP/1.1 response carrying the error, announcing that the connection closes."""
    body = error_body(code, message, details)
    head = (f"HTTP/1.1 {code} {HTTPStatus(code).phrase}\r\n"
            "Content-Type: application/json; charset=UTF-8\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n")
    return head.encode("latin-1") + body
