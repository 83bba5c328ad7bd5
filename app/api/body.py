"""Reading request bodies the way OpenTSDB does (gzip, empty bodies, JSON errors)."""

from __future__ import annotations

import json
import zlib
from typing import Any

from flask import current_app, request

from app.errors import BadRequestError, TsdbError

# Bytes handed to the inflater per step: memory follows this, not the body's inflated size.
INFLATE_STEP_BYTES = 1 << 20
# zlib's window bits: gzip framing, and zlib framing (what ``Content-Encoding: deflate`` means).
GZIP_WBITS = 16 + zlib.MAX_WBITS
DEFLATE_WBITS = zlib.MAX_WBITS


class BodyTooLargeError(TsdbError):
    """A request body over a configured cap."""

    code = 413


def raw_body() -> bytes:
    """The request body, inflated when ``Content-Encoding: gzip`` (or deflate).

    The inflated size is capped by ``tsd.http.request.max_inflated_bytes``, checked while
    inflating, so a small bomb never expands in memory past the cap.
    """
    data = request.get_data(cache=True)
    encoding = (request.headers.get("Content-Encoding") or "").lower().strip()
    if encoding not in ("gzip", "deflate"):
        return data
    cached = request.environ.get("pytsd.inflated")
    if cached is None:
        cap = current_app.config["TSD"]["tsd.http.request.max_inflated_bytes"]
        wbits = GZIP_WBITS if encoding == "gzip" else DEFLATE_WBITS
        cached = request.environ["pytsd.inflated"] = inflate(data, wbits, cap)
    return bytes(cached)  # already bytes; keeps mypy's type


def inflate(data: bytes, wbits: int, cap_bytes: int) -> bytes:
    """Inflate ``data`` (gzip members may be concatenated), refusing past ``cap_bytes``."""
    out = bytearray()
    rest = data
    try:
        while rest:
            inflater = zlib.decompressobj(wbits)
            pending = rest
            while pending and not inflater.eof:
                room = cap_bytes - len(out) + 1
                out += inflater.decompress(pending, min(room, INFLATE_STEP_BYTES))
                if len(out) > cap_bytes:
                    raise BodyTooLargeError(
                        "The request body is too large once decompressed",
                        f"It inflates to more than {cap_bytes} bytes "
                        "(tsd.http.request.max_inflated_bytes)")
                pending = inflater.unconsumed_tail
            if not inflater.eof:
                raise BadRequestError("Unable to decompress the request body",
                                      "The compressed stream ends early")
            rest = inflater.unused_data if wbits == GZIP_WBITS else b""
    except zlib.error as exc:
        raise BadRequestError("Unable to decompress the request body", str(exc)) from exc
    return bytes(out)


def parse_json(text: str) -> Any:
    """``json.loads`` with OpenTSDB's message; nesting too deep for the parser is a 400 too."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRequestError("Unable to parse the given JSON", str(exc)) from exc
    except RecursionError:
        raise BadRequestError("Unable to parse the given JSON",
                              "The JSON is nested too deeply") from None


def json_body(require_container: bool = True) -> Any:
    """Parse the body as JSON with OpenTSDB's messages for the usual mistakes."""
    text = raw_body().decode("utf-8", errors="replace").strip()
    if not text:
        raise BadRequestError("Missing request content")
    if require_container and text[0] not in "{[":
        raise BadRequestError("The JSON must start as an object or an array")
    return parse_json(text)


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
