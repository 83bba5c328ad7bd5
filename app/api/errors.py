"""The one error boundary: every failure becomes OpenTSDB's error JSON.

``{"error": {"code": N, "message": "...", "details": "..."}}`` with the matching status.
``details`` appears only when there is some; ``trace`` only with ``tsd.http.show_stack_trace``.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from flask import Flask, Response, current_app, jsonify, request
from marshmallow import ValidationError
from werkzeug.exceptions import HTTPException

from app.errors import StorageError, TsdbError
from app.observe.health import STORE_HEALTH
from app.tsdb.admission import QueryRefusedError

log = logging.getLogger(__name__)

# Messages often quote the input (a name, a pattern): never echo megabytes of it back.
MAX_ERROR_TEXT_CHARS = 2000


def clip(text: str) -> str:
    """``text`` cut to ``MAX_ERROR_TEXT_CHARS``, saying how much was left out."""
    if len(text) <= MAX_ERROR_TEXT_CHARS:
        return text
    return f"{text[:MAX_ERROR_TEXT_CHARS]}... ({len(text) - MAX_ERROR_TEXT_CHARS} more characters)"


def error_response(code: int, message: str, details: str | None = None,
                   exc: BaseException | None = None) -> Response:
    """Build an OpenTSDB error response."""
    body: dict[str, Any] = {"code": code, "message": clip(message)}
    if details:
        body["details"] = clip(details)
    if exc is not None and current_app.config["TSD"]["tsd.http.show_stack_trace"]:
        body["trace"] = "".join(traceback.format_exception(exc))
    response = jsonify({"error": body})
    response.status_code = code
    return response


def validation_details(err: ValidationError) -> str:
    """Flatten marshmallow's nested messages into one readable line."""
    parts: list[str] = []

    def walk(prefix: str, messages: Any) -> None:
        if isinstance(messages, dict):
            for key, value in messages.items():
                walk(f"{prefix}.{key}" if prefix else str(key), value)
        elif isinstance(messages, list):
            for item in messages:
                walk(prefix, item)
        else:
            parts.append(f"{prefix}: {messages}" if prefix else str(messages))

    walk("", err.messages)
    return "; ".join(parts)


def init_app(app: Flask) -> None:
    """Register the handlers on the app (so they cover every blueprint and 404s)."""

    @app.errorhandler(TsdbError)
    def handle_tsdb_error(exc: TsdbError) -> Response:
        if isinstance(exc, StorageError):
            STORE_HEALTH.failed(exc.message, exc)  # once per outage, not per request
        elif exc.code >= 500 and exc.code != 501:  # 501: a known gap, not a failure
            log.error("%s %s failed: %s", request.method, request.path, exc.message,
                      exc_info=exc)
        response = error_response(exc.code, exc.message, exc.details, exc)
        if isinstance(exc, QueryRefusedError):
            response.headers["Retry-After"] = str(exc.retry_after_s)
        return response

    @app.errorhandler(ValidationError)
    def handle_validation_error(exc: ValidationError) -> Response:
        return error_response(400, "Invalid query", validation_details(exc), exc)

    @app.errorhandler(HTTPException)
    def handle_http_exception(exc: HTTPException) -> Response:
        code = exc.code or 500
        if code == 404:
            return error_response(404, "Endpoint not found")
        if code == 405:
            return error_response(405, "Method not allowed",
                                  f"The HTTP method [{request.method}] is not permitted "
                                  "for this endpoint")
        if code == 413:
            limit = current_app.config["TSD"]["tsd.http.request.max_body_bytes"]
            return error_response(413, "The request body is too large",
                                  f"It is more than {limit} bytes "
                                  "(tsd.http.request.max_body_bytes)")
        return error_response(code, exc.name, exc.description)

    @app.errorhandler(Exception)
    def handle_unexpected(exc: Exception) -> Response:
        log.exception("%s %s failed", request.method, request.path)
        return error_response(500, str(exc) or "An unknown exception occurred", exc=exc)
