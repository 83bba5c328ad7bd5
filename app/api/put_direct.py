"""``POST /api/put`` stored without Flask's request cycle when nothing but the view acts on it.

Beyond storing its points, a collector's put cost ~300 µs of server CPU in Flask: the WSGI
environ, the request context, and the hooks (``tsd.mode``, CORS, security, stats, JSONP),
which for the usual put decide nothing. The server (``app/server/put_lane.py``) hands such a
put's body to :meth:`DirectPuts.store` instead, and answers Flask's own 204 when every point
was stored. Every other outcome is answered by the view, from the points already stored
(``STORED_PUT``), or from the start when nothing was stored (a body orjson does not take as
it is): so the status, headers and body are always Flask's (tests/functional/api/
test_put_direct.py sends the same requests both ways).

Which puts skip Flask is decided here alone, from the settings once (:meth:`DirectPuts.of`)
and from the headers per request (:meth:`DirectPuts.takes`): those the hooks pass untouched.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, Response

from app.api.put import StoredPut, plain_json, store_points, writer_of
from app.api.security import API_HEADERS
from app.api.stats import count_request
from app.tsdb.points import PointBatch
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

    def store(self, body: bytes) -> StoredPut | None:
        """The body's points, stored (or the store's failure, for the view to raise); None
        when nothing was stored and the view must read the body itself."""
        parsed = plain_json(body)
        if not parsed:
            return None  # not plain JSON, or no point at all: the view's messages
        raw_points = parsed if isinstance(parsed, list) else [parsed]
        try:
            return store_points(self.writer, raw_points)
        except Exception as exc:  # the view raises it, so Flask's handler answers it
            return StoredPut(raw_points, PointBatch(wide_floats=True), 0, exc)

    @staticmethod
    def answered(elapsed_ms: float) -> None:
        """Count a put answered 204 here, as Flask's stats hook counts its requests."""
        count_request(PUT_PATH, PUT_PATH, 204, elapsed_ms)
