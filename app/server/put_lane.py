"""``POST /api/put`` answered without the WSGI app when storing its points is all it asks.

The worker hands a complete request here when :meth:`PutLane.takes` it: the plain target
(no query string such as ``?details``, ``?summary``, ``?sync``; no other spelling of the
path) and headers Flask's hooks would pass untouched (app/api/put_direct.py decides those,
and which settings allow it at all). :meth:`PutLane.answer` runs in the request pool: the
points are stored, and the answer is Flask's 204, or, for any other outcome, the app's own
answer to the request told what was already stored. The access log, body limits and the
request queue are the server's, as for every request.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from app.api.put import STORED_PUT
from app.api.put_direct import NO_CONTENT_HEADERS, NO_CONTENT_REASON, PUT_PATH, DirectPuts
from app.query.budget import CLIENT_GONE
from app.server.wsgi_bridge import Reply, Request, WsgiApp, build_environ, call_app

PUT_TARGET = PUT_PATH.encode("ascii")


class PutLane:
    """The worker's direct puts (module doc)."""

    def __init__(self, app: WsgiApp, direct: DirectPuts) -> None:
        self.app = app
        self.direct = direct

    @classmethod
    def of(cls, app: Any) -> PutLane | None:
        """None when every put must go through the app (a setting: app/api/put_direct.py)."""
        direct = DirectPuts.of(app)
        return None if direct is None else cls(app, direct)

    def takes(self, request: Request) -> bool:
        return (request.target == PUT_TARGET and request.method == "POST"
                and self.direct.takes(request.headers))

    def answer(self, request: Request, peer: tuple[str, int], server: tuple[str, int],
               gone: threading.Event) -> Reply:
        """Store the request's points and answer it (in a thread: the store commits)."""
        started = time.perf_counter()
        stored = self.direct.store(request.body)
        if stored is not None and stored.complete:
            self.direct.answered((time.perf_counter() - started) * 1000)
            return Reply(204, NO_CONTENT_REASON, NO_CONTENT_HEADERS, b"")
        environ = build_environ(request, peer, server)
        environ[CLIENT_GONE] = gone
        if stored is not None:
            environ[STORED_PUT] = stored
        return call_app(self.app, environ)
