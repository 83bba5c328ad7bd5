"""pytsd's plugin interface: OpenTSDB 2.4's plugin points as pluggy hooks.

What a plugin author imports::

    from plugin import AuthState, Point, Route, hookimpl

See ``plugin/README.md`` for the guide, :mod:`plugin.spec` for every hook.
"""

from plugin.spec import ROLES, AuthState, Point, Route, hookimpl, point_json

__all__ = ["ROLES", "AuthState", "Point", "Route", "hookimpl", "point_json"]
