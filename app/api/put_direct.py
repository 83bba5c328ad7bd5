"""``POST /api/put`` stored without Flask's request cycle when nothing but the view acts on it.

Beyond storing its points, a collector's put cost ~150 µs of server CPU in Flask (a put of
~500 µs in all): the WSGI environ, the request context, and the hooks (``tsd.mode``, CORS,
security, stats, JSONP), which for the usual put decide nothing. The server
(``app/server/put_lane.py``) hands such a put's body to :meth:`DirectPuts.store` instead
(with the puts that came meanwhile: one writer call for them all), and answers Flask's own
204 when every point was stored. Every other outcome is answered by the view, from the
points already stored (``STORED_PUT``), or from the start when nothing was stored (a body
orjson does not take as it is): so the status, headers and body are always Flask's
(tests/functional/api/test_put_direct.py and tests/e2e/test_put_direct_server.py send the
same requests both ways).

Which puts skip Flask is decided here alone, from the settings once (:meth:`DirectPuts.of`)
and from the headers per request (:meth:`DirectPuts.takes`): those the hooks pass untouched.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, cast

from flask import Flask, Response

from app.api.put import StoredPut, plain_json, store_bodies, writer_of
from app.api.security import API_HEADERS
from app.api.stats import count_request
from app.errors import StorageError
from app.storage.base import FdReaders, PromptWrites, WriteBusy
from app.tsdb.writer import PointWriter

PUT_PATH = "/api/put"
# What Flask answers a put whose points were all stored: the view's ``Response(status=204)``
# (Flask's default type) with the security hook's headers for an API path.
NO_CONTENT_HEADERS: list[tuple[str, str]] = [*Response(status=204).headers.to_wsgi_list(),
                                             *API_HEADERS]
NO_CONTENT_REASON = "NO CONTENT"
JSON_TYPE = b"application/json"
# A browser's headers, which the cross-site write check looks at; and a compressed body,
# which the view inflates within its limits.
HOOKED_HEADERS = frozenset({b"origin", b"sec-fetch-site", b"content-encoding"})


class DirectPuts:
    """Puts stored for the server without Flask (module doc); built once per worker."""

    def __init__(self, writer: PointWriter) -> None:
        self.writer = writer
        store = writer.tsdb.store
        # The embedded store: a put is stored on the server's loop, and answered once the
        # disk sync that follows has it (app/storage/sqlite_sync.py).
        self.prompt_store = cast(PromptWrites, store) if store.writes_promptly else None

    @classmethod
    def of(cls, app: Any) -> DirectPuts | None:
        """None when a setting gives Flask's hooks a say in every put: authentication (any
        authenticating plugin), CORS, a read-only TSD (``tsd.mode=ro``: 404); or when ``app``
        is not pytsd's."""
        if not isinstance(app, Flask) or "tsdb" not in app.extensions:
            return None
        config = app.config["TSD"]
        if (app.extensions["tsdb"].plugins.authenticates or config["tsd.mode"] == "ro"
                or config["tsd.http.request.enable_cors"]):
            return None
        return cls(writer_of(app.extensions))

    @staticmethod
    def takes(headers: list[tuple[bytes, bytes]]) -> bool:
        """Whether the hooks pass a put with these headers (names lower-cased) untouched: a
        JSON body or an untyped one, not compressed, no browser's ``Origin`` or
        ``Sec-Fetch-Site`` (security.guard_write)."""
        for name, value in headers:
            if name in HOOKED_HEADERS:
                return False
            # Werkzeug's mimetype: the type before any parameter, stripped, lower-cased.
            if name == b"content-type" and value.partition(b";")[0].strip().lower() != JSON_TYPE:
                return False
        return True

    def store(self, bodies: list[bytes]) -> list[StoredPut | None]:
        """The points of each body (a request's), stored by one writer call; per body its
        outcome (on a store failure, the failure, for the view to raise), or None when
        nothing of it was stored and the view must read it itself."""
        parsed = [plain_json(body) for body in bodies]
        # Not plain JSON, or no point at all: the view's own messages.
        points = [body if isinstance(body, list) else [body] for body in parsed if body]
        stored = iter(self._store_points(points))
        return [next(stored) if body else None for body in parsed]

    def store_promptly(self, bodies: list[bytes]) -> list[StoredPut | None] | None:
        """:meth:`store` as prompt writes (``prompt_store`` is set); None when another writer
        was under way (``WriteBusy``): the bodies are to be stored by a thread that waits
        (a cell written twice is written the same). The points are durable once
        :meth:`durable` is done."""
        assert self.prompt_store is not None
        try:
            with self.prompt_store.prompt():
                return self.store(bodies)
        except WriteBusy:
            return None

    def durable(self) -> Future[None]:
        """Done when what :meth:`store_promptly` stored is on disk."""
        assert self.prompt_store is not None
        return self.prompt_store.durable()

    def read_syncs_on(self, readers: FdReaders) -> None:
        """The server's loop learns of the disk's syncs itself (PromptWrites)."""
        assert self.prompt_store is not None
        self.prompt_store.read_syncs_on(readers)

    @staticmethod
    def unsynced(stored: list[StoredPut | None], error: BaseException) -> list[StoredPut | None]:
        """The outcomes of prompt writes whose disk sync failed: none is known stored."""
        failure = StorageError("The embedded store could not sync its disk", str(error))
        return [None if outcome is None else StoredPut(outcome.raw_points, [], failure)
                for outcome in stored]

    def _store_points(self, points: list[list[Any]]) -> list[StoredPut]:
        try:
            return store_bodies(self.writer, points)
        except WriteBusy:
            raise  # a prompt write's: stored again, by a thread that waits
        except StorageError as exc:  # the store's, not a body's: the view raises it for each
            return [StoredPut(raw_points, [], exc) for raw_points in points]
        except Exception as exc:
            if len(points) == 1:
                return [StoredPut(points[0], [], exc)]
        # Something in one body failed them all: each alone (a point written twice is
        # written the same), so that only that request fails, as without the group.
        return [self._store_points([raw_points])[0] for raw_points in points]

    @staticmethod
    def answered(elapsed_ms: float) -> None:
        """Count a put answered 204 here, as Flask's stats hook counts its requests."""
        count_request(PUT_PATH, PUT_PATH, 204, elapsed_ms)
