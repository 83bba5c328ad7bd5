"""CORS for ``/api/*``, for Grafana's browser ("direct") access (``RpcHandler#applyCorsConfig``).

Off unless ``tsd.http.request.enable_cors``. Then a request carrying an ``Origin`` in
``tsd.http.request.cors_domains`` (comma-separated, case-insensitive, or ``*``) gets that origin
echoed in ``Access-Control-Allow-Origin``, the allowed methods and headers, and (pytsd,
``tsd.http.request.cors_credentials``) ``Access-Control-Allow-Credentials: true``, which a
browser needs to send Grafana's ``Authorization`` header or cookies. With ``*`` any origin is
answered ``Access-Control-Allow-Origin: *`` and never with credentials (pytsd; OpenTSDB
echoes the origin). A preflight ``OPTIONS``
is answered 200 with no body. A request whose ``Origin`` is the server's own is not a
cross-origin request: it is served whatever the list says. Differences from OpenTSDB: an
origin not in the list gets a 403 (OpenTSDB sends the error with status 200), and
responses carry ``Vary: Origin``.
"""

from __future__ import annotations

from functools import lru_cache

from flask import Response, current_app, g, request

from app.api import bp
from app.errors import MethodNotAllowedError, TsdbError

ALLOWED_METHODS = "GET, POST, PUT, DELETE"


class CorsForbiddenError(TsdbError):
    code = 403


def _domains() -> frozenset[str] | None:
    """The allowed origins, upper-cased, or None when CORS is off."""
    config = current_app.config["TSD"]
    if not config["tsd.http.request.enable_cors"]:
        return None
    return _parse_domains(config["tsd.http.request.cors_domains"] or "")


@lru_cache(maxsize=8)
def _parse_domains(domains: str) -> frozenset[str]:
    """The setting's list, parsed once (every request reads it)."""
    return frozenset(d.strip().upper() for d in domains.split(",") if d.strip())


def same_origin(origin: str) -> bool:
    """Whether ``origin`` is this server's own (scheme ignored: behind a TLS proxy the
    scheme differs while the host is the same)."""
    host = origin.split("://", 1)[-1].rstrip("/").lower()
    return origin != "null" and host == request.host.lower()


@bp.before_app_request
def _check_origin() -> Response | None:
    if not request.path.startswith("/api"):
        return None
    domains = _domains()
    # request.headers' value, without an exception when it is absent (API clients).
    origin = request.environ.get("HTTP_ORIGIN", "")
    if request.method != "OPTIONS" and (domains is None or not origin or same_origin(origin)):
        return None  # browsers send Origin on same-origin POSTs too: the UI's own writes
    if domains is None or not origin:
        raise MethodNotAllowedError(
            "Method not allowed", "The HTTP method [OPTIONS] is not permitted "
            + ("(CORS is off: tsd.http.request.enable_cors)" if domains is None
               else "without an Origin header"))
    if "*" not in domains and origin.upper() not in domains:
        raise CorsForbiddenError("CORS domain not allowed",
                                 f"The domain [{origin}] is not permitted access")
    g.cors_origin = origin
    if request.method == "OPTIONS":
        return Response(status=200)
    return None


@bp.after_app_request
def _add_headers(response: Response) -> Response:
    if not request.path.startswith("/api") or _domains() is None:
        return response
    response.vary.add("Origin")
    origin = g.get("cors_origin")
    if origin:
        config = current_app.config["TSD"]
        listed = origin.upper() in (_domains() or frozenset())
        # `*` lets any page read answers, so never with credentials (a hostile page would
        # read with the victim's login): only an origin listed by name gets those.
        response.headers["Access-Control-Allow-Origin"] = origin if listed else "*"
        response.headers["Access-Control-Allow-Methods"] = ALLOWED_METHODS
        response.headers["Access-Control-Allow-Headers"] = config["tsd.http.request.cors_headers"]
        if listed and config["tsd.http.request.cors_credentials"]:
            response.headers["Access-Control-Allow-Credentials"] = "true"
    return response
