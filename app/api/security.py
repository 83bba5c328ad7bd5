"""Access control and safe defaults for every HTTP request, in one place.

* **Authorization**: with ``tsd.core.authentication.enable``, every request (API, UI pages,
  static files, ``/plugin/``; only CORS preflights are exempt) must carry credentials an
  authentication plugin accepts, and their role must include the role the endpoint needs
  (:func:`required_role`, the one registry). 401 with ``WWW-Authenticate: Basic`` (so a
  browser shows its login prompt), 403 when the role is too weak.
* **Cross-site writes** (CSRF): a request that writes must send its body as
  ``application/json`` (a form or ``text/plain`` body is what a hostile page can send
  without CORS), and a browser request from another origin that CORS does not allow is
  refused.
* **Security headers** on every response: ``nosniff``, no framing, and a strict CSP.
"""

from __future__ import annotations

from functools import lru_cache

from flask import Flask, Response, current_app, g, request

from app.api.cors import same_origin
from app.api.errors import error_response
from app.errors import TsdbError
from plugin.http import ROUTE_ROLES
from plugin.spec import AuthState, role_allows

#: Endpoints that need the admin role: (path after /api, verb or None for any verb).
ADMIN_ENDPOINTS = (
    ("dropcaches", None),
    ("uid/assign", None),
    ("annotation/bulk", "DELETE"),
    ("annotations/bulk", "DELETE"),
    ("query", "DELETE"),
    ("uid/rename", None),
    *((f"uid/{meta}", verb) for meta in ("uidmeta", "tsmeta")
      for verb in ("POST", "PUT", "DELETE")),
)
#: First path segments under /api whose non-GET verbs change data.
WRITE_SEGMENTS = frozenset({"put", "annotation", "annotations", "uid", "tree", "rollup",
                            "histogram"})
JSON_TYPES = frozenset({"application/json"})
REALM = 'Basic realm="pytsd", charset="UTF-8"'
UI_CSP = ("default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'self'; "
          "form-action 'self'; frame-ancestors 'none'")
API_CSP = "default-src 'none'; frame-ancestors 'none'"


class UnsupportedMediaTypeError(TsdbError):
    code = 415


class ForbiddenError(TsdbError):
    code = 403


def api_path(path: str) -> str | None:
    """``/api/v1/uid/assign`` -> ``uid/assign``; None outside ``/api``."""
    parts = [p for p in path.lower().split("/") if p]
    if parts[:1] != ["api"]:
        return None
    parts = parts[2:] if parts[1:2] == ["v1"] else parts[1:]
    return "/".join(parts)


def effective_method() -> str:
    """The verb, with OpenTSDB's ``method_override`` for GET."""
    method = request.method
    if method != "GET" or not request.environ.get("QUERY_STRING"):
        return method  # the override applies to GET alone, and needs a query string
    override = (request.args.get("method_override") or "").strip().upper()
    return override or method


def required_role(method: str, path: str, endpoint: str | None = None) -> str:
    """The role a request needs: ``read``, ``write`` or ``admin``."""
    if endpoint and endpoint in current_app.config.get(ROUTE_ROLES, {}):
        return str(current_app.config[ROUTE_ROLES][endpoint])
    return _path_role(method, path)


@lru_cache(maxsize=256)
def _path_role(method: str, path: str) -> str:
    """The role by verb and path alone (pure, so every request to a path shares one answer;
    bounded: any path may come)."""
    rest = api_path(path)
    if rest is None:
        return "read"  # UI pages and static files
    for prefix, verb in ADMIN_ENDPOINTS:
        if (rest == prefix or rest.startswith(prefix + "/")) and verb in (None, method):
            return "admin"
    if rest.split("/")[0] in WRITE_SEGMENTS and method not in ("GET", "HEAD", "OPTIONS"):
        return "write"
    return "read"


def current_auth() -> AuthState | None:
    """Who sent this request (None when authentication is off)."""
    return g.get("tsd_auth")


def require_role(role: str) -> None:
    """For views that learn from the body what a request does (``"delete": true``)."""
    state = current_auth()
    if current_app.extensions["tsdb"].plugins.authenticates and (
            state is None or not role_allows(state.role, role)):
        raise ForbiddenError("Forbidden", f"This request needs the {role} role")


def _unauthorized(details: str) -> Response:
    response = error_response(401, "Unauthorized", details)
    response.headers["WWW-Authenticate"] = REALM
    return response


def check_access() -> Response | None:
    """Authenticate and authorize (runs after CORS, which answers preflights itself)."""
    plugins = current_app.extensions["tsdb"].plugins
    if not plugins.authenticates or request.method == "OPTIONS":
        return None
    state = plugins.authenticate("pytsd_authenticate_http", headers=request.headers)
    if state is None:
        return _unauthorized("Send an API token (Authorization: Bearer, X-TSD-Token) or "
                             "basic auth credentials")
    g.tsd_auth = state
    needed = required_role(effective_method(), request.path, request.endpoint)
    if not role_allows(state.role, needed):
        raise ForbiddenError("Forbidden", f"{state.user} has the {state.role} role; "
                             f"this request needs {needed}")
    return None


def check_cross_site_write() -> None:
    """Every request that writes goes through :func:`guard_write`."""
    if required_role(effective_method(), request.path, request.endpoint) != "read":
        guard_write()


def guard_write() -> None:
    """Refuse what a hostile page could send: a non-JSON body, a foreign origin."""
    require_json_body()
    # The environ's values are what request.headers gives, without an exception per absent
    # header (the usual case for an API client).
    environ = request.environ
    origin = environ.get("HTTP_ORIGIN")
    fetch_site = environ.get("HTTP_SEC_FETCH_SITE", "")
    foreign = (origin is not None and not same_origin(origin)) or fetch_site in (
        "cross-site", "same-site")
    if foreign and not g.get("cors_origin"):
        raise ForbiddenError("Cross-site request refused",
                             f"A write from origin [{origin or fetch_site}] needs that origin in "
                             "tsd.http.request.cors_domains")


def require_json_body() -> None:
    """A body must be JSON (gzip or deflate of it is fine) or untyped: 415 otherwise."""
    if not request.content_length and "chunked" not in request.environ.get(
            "HTTP_TRANSFER_ENCODING", "").lower():
        return
    # No Content-Type at all is allowed: forms and text/plain, what a hostile page can send
    # without CORS, always have one (and browsers add Origin, checked above).
    if request.mimetype and request.mimetype not in JSON_TYPES:
        raise UnsupportedMediaTypeError(
            "Unsupported media type",
            f"Send the body as Content-Type: application/json, not "
            f"[{request.mimetype or 'none'}] (curl: -H 'Content-Type: application/json')")


SECURITY_HEADERS = (("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"),
                    ("Referrer-Policy", "same-origin"))
API_HEADERS = (*SECURITY_HEADERS, ("Content-Security-Policy", API_CSP))
UI_HEADERS = (*SECURITY_HEADERS, ("Content-Security-Policy", UI_CSP))


def add_security_headers(response: Response) -> Response:
    """Each of the headers above unless the view set it (``setdefault``'s meaning, with one
    look at the response's header names rather than an exception per absent one)."""
    headers = response.headers
    wanted = API_HEADERS if request.path.startswith(("/api", "/plugin")) else UI_HEADERS
    present = {name.lower() for name, _ in headers}
    headers.extend([(name, value) for name, value in wanted
                    if name.lower() not in present])
    return response


def init_app(app: Flask) -> None:
    """Register the checks after CORS (so preflights are answered before authentication)."""
    app.before_request(check_access)
    app.before_request(check_cross_site_write)
    app.after_request(add_security_headers)
