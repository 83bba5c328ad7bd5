"""``tsd.mode``: a read-only TSD serves no writes, a write-only one no reads (``RpcManager``).

OpenTSDB simply does not register those endpoints, so they answer 404 "Endpoint not found".
"""

from __future__ import annotations

from flask import current_app, request

from app.api import bp
from app.errors import NotFoundError

# First path segment after /api (or /api/v1) -> the modes that serve it.
# dropcaches is an admin action: a read-only TSD refuses it too.
WRITE_ENDPOINTS = frozenset({"put", "rollup", "annotation", "annotations", "uid", "dropcaches",
                             "histogram", "tree"})
READ_ENDPOINTS = frozenset({"query", "search", "suggest"})


def endpoint_segment(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        parts = parts[1:]
    if parts[:1] == ["v1"]:
        parts = parts[1:]
    return parts[0].lower() if parts else ""


@bp.before_request
def enforce_mode() -> None:
    mode = current_app.config["TSD"]["tsd.mode"]
    segment = endpoint_segment(request.path)
    if (mode == "ro" and segment in WRITE_ENDPOINTS) or (mode == "wo" and
                                                         segment in READ_ENDPOINTS):
        raise NotFoundError("Endpoint not found", f"tsd.mode is {mode}")
