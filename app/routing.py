"""OpenTSDB's URL routing, applied before Flask's (``HttpQuery.getQueryBaseRoute``).

OpenTSDB splits the path on ``/`` (Java's split drops trailing empty parts, so a trailing
slash changes nothing) and compares the parts lower-cased. Under ``/api`` pytsd does the
same by rewriting the path once, before routing: ``/API/Put/`` is ``/api/put``. Only
``v<digits>`` after ``/api/`` is an API version (``/api/version`` is the version endpoint).
Paths outside ``/api`` (the UI and its static files) are left as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def opentsdb_path(path: str) -> str:
    """The path Flask routes for ``path``."""
    lowered = path.lower()
    if lowered != "/api" and not lowered.startswith("/api/"):
        return path
    return lowered.rstrip("/")


class OpenTsdbPaths:
    """WSGI middleware: route ``PATH_INFO`` as :func:`opentsdb_path` says."""

    def __init__(self, app: WsgiApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        routed = opentsdb_path(path)
        if routed != path:
            environ = {**environ, "PATH_INFO": routed}
        return self.app(environ, start_response)
