"""Reading request bodies the way OpenTSDB does (gzip, empty bodies, JSON errors)."""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

from flask import request

from app.errors import BadRequestError


def raw_body() -> bytes:
    """The request body, inflated when ``Content-Encoding: gzip`` (or deflate)."""
    data = request.get_data(cache=True)
    encoding = (request.headers.get("Content-Encoding") or "").lower()
    try:
        if encoding == "gzip":
            return gzip.decompress(data)
        if encoding == "deflate":
            return zlib.decompress(data)
    except (OSError, zlib.error, EOFError) as exc:
        raise BadRequestError("Unable to decompress the request body", str(exc)) from exc
    return data


def json_body(require_container: bool = True) -> Any:
    """Parse the body as JSON with OpenTSDB's messages for the usual mistakes."""
    text = raw_body().decode("utf-8", errors="replace").strip()
    if not text:
        raise BadRequestError("Missing request content")
    if require_container and text[0] not in "{[":
        raise BadRequestError("The JSON must start as an object or an array")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRequestError("Unable to parse the given JSON", str(exc)) from exc


def has_param(name: str) -> bool:
    """OpenTSDB's flags are presence-based: ``?summary`` and ``?summary=false`` both count."""
    return name in request.args


def param(name: str) -> str | None:
    """A query-string parameter; the last one wins when repeated (``getQueryStringParam``)."""
    values = request.args.getlist(name)
    return values[-1] if values else None


def parse_int_param(raw: Any, message: str) -> int | None:
    """An integer given as query-string text or a JSON number; None when absent or empty.

    Anything else (a float, a boolean, text that is not an integer) is a 400 with ``message``.
    """
    if raw is None or raw == "":
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise BadRequestError(message)
    try:
        return int(raw)
    except ValueError:
        raise BadRequestError(message) from None
