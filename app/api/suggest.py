"""``/api/suggest``: names of one UID kind starting with a prefix (``SuggestRpc``).

A prefix scan of the ``tsdb-uid`` forward rows: the first ``max`` names in byte order, exactly
``max`` at most (OpenTSDB 2.0 could return one more, issue #238). An empty or missing ``q``
lists every name of the kind, Unicode names included (OpenTSDB scans only ``!``..``~``).
"""

from __future__ import annotations

from typing import Any

from flask import Response, current_app, jsonify, request

from app.api import bp
from app.api.body import json_body, param, parse_int_param, raw_body
from app.api.budget import request_budget
from app.errors import BadRequestError

DEFAULT_MAX = 25  # UniqueId.MAX_SUGGESTIONS
KINDS = ("metrics", "tagk", "tagv")


def _suggest_args() -> tuple[Any, Any, Any]:
    if request.method == "POST":
        if not raw_body().strip():
            raise BadRequestError("Missing message content",
                                  "Supply valid JSON formatted data in the body of your request")
        body = json_body()
        if not isinstance(body, dict):
            raise BadRequestError("Unable to parse the given JSON",
                                  "The suggest body must be a JSON object")
        if body.get("type") is None:
            raise BadRequestError("Missing 'type' parameter")
        return body.get("type"), body.get("q"), body.get("max")
    kind = param("type")
    if kind is None:
        raise BadRequestError("Missing parameter <code>type</code>")
    return kind, param("q"), param("max")


def parse_max(raw: Any) -> int:
    """``max``: a number (JSON or text); absent, zero or negative mean the default 25."""
    value = parse_int_param(raw, "Unable to parse 'max' as a number")
    return value if value is not None and value > 0 else DEFAULT_MAX


@bp.route("/suggest", methods=["GET", "POST"])
def suggest() -> Response:
    kind, prefix, raw_max = _suggest_args()
    if kind not in KINDS:
        raise BadRequestError(f"Invalid 'type' parameter:{kind}")
    if prefix is not None and not isinstance(prefix, str):
        raise BadRequestError("Invalid 'q' parameter", "q must be a string")
    limit = parse_max(raw_max)
    uids = current_app.extensions["tsdb"].uids[kind]
    return jsonify(uids.suggest(prefix or "", limit, request_budget()))
