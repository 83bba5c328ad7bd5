"""``?jsonp=fn`` wraps any JSON answer, errors included, as ``fn(...)`` (``HttpQuery``)."""

from __future__ import annotations

import re

from flask import Response, request

from app.api import bp

# A JavaScript identifier path such as ``cb`` or ``jQuery123.done``: nothing else is echoed.
CALLBACK = re.compile(r"[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*")


@bp.after_app_request
def wrap_jsonp(response: Response) -> Response:
    callback = request.args.get("jsonp")
    if not callback or not request.path.startswith("/api") or not response.is_json:
        return response
    if not CALLBACK.fullmatch(callback):
        return response
    response.set_data(f"{callback}(".encode() + response.get_data().rstrip() + b")")
    response.mimetype = "application/javascript"
    return response
