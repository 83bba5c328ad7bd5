"""Mounting the endpoints of HTTP RPC plugins (``tsd.http.rpc.plugins``) under ``/plugin/``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugin.manager import PluginHost, PluginLoadError
from plugin.spec import ROLES

if TYPE_CHECKING:
    from flask import Flask

ROUTE_ROLES = "TSD_PLUGIN_ROUTE_ROLES"  # app.config key read by app/api/security.py


def mount_routes(app: Flask, host: PluginHost) -> None:
    """Add every plugin route as ``/plugin/<path>``; remember the role each one needs.

    A view's exceptions reach the app's one error boundary like any other endpoint's:
    the client gets OpenTSDB's error JSON (500 for a plugin bug) and the log the traceback.
    """
    roles: dict[str, str] = app.config.setdefault(ROUTE_ROLES, {})
    for name, route in host.routes():
        if route.role not in ROLES:
            raise PluginLoadError(f"Plugin {name!r}: route {route.path!r} has an unknown "
                                  f"role {route.role!r}")
        endpoint = _endpoint_name(app, name, route.endpoint or route.view.__name__, route.path)
        app.add_url_rule("/plugin/" + route.path.lstrip("/"), endpoint=endpoint,
                         view_func=route.view, methods=list(route.methods))
        roles[endpoint] = route.role


def _endpoint_name(app: Flask, plugin: str, wanted: str, path: str) -> str:
    """A Flask endpoint name no other route has: ``plugin.<plugin>.<view name>``, or, for a
    lambda or a name already taken (two routes on one view function), one made from the path."""
    endpoint = f"plugin.{plugin}.{wanted}"
    if wanted.isidentifier() and endpoint not in app.view_functions:
        return endpoint
    base = f"plugin.{plugin}.path:" + (path.strip("/") or "root")
    endpoint, number = base, 1
    while endpoint in app.view_functions:
        number += 1
        endpoint = f"{base}#{number}"
    return endpoint
