"""The hook specifications: OpenTSDB 2.4's plugin interfaces as pluggy hooks.

Each hook mirrors one OpenTSDB interface (named in its docstring). A plugin implements any of
them with ``@hookimpl``; a plugin is loaded when an OpenTSDB-style setting names it (see
``plugin/README.md``). All hooks take keyword arguments, so an implementation may accept
only the ones it needs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pluggy

PROJECT = "pytsd"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: Roles, weakest first: each one may do everything the ones before it may.
ROLES = ("read", "write", "admin")


def role_allows(granted: str, needed: str) -> bool:
    """Does ``granted`` include ``needed``? (``admin`` includes ``write`` includes ``read``)."""
    return ROLES.index(granted) >= ROLES.index(needed)


class Point(Protocol):
    """A data point as a plugin sees it (OpenTSDB's ``metric, timestamp, value, tags``).

    ``timestamp`` is in seconds or milliseconds as the client sent it (OpenTSDB's rule:
    more than 10 digits is milliseconds). Treat points as read-only.
    """

    @property
    def metric(self) -> str: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def value(self) -> int | float: ...
    @property
    def tags(self) -> Mapping[str, str]: ...


def point_json(point: Point) -> dict[str, Any]:
    """The point as ``/api/put`` takes it."""
    return {"metric": point.metric, "timestamp": point.timestamp, "value": point.value,
            "tags": dict(point.tags)}


@dataclass(frozen=True)
class AuthState:
    """Who a request or telnet connection is (OpenTSDB's ``AuthState``), and their role."""

    user: str
    role: str
    method: str = ""  # "token", "basic", ... for logs


@dataclass(frozen=True)
class Route:
    """An extra HTTP endpoint (OpenTSDB's ``HttpRpcPlugin``), served at ``/plugin/<path>``.

    ``view`` is a Flask view function; ``role`` is what a caller needs when authentication
    is on (``read`` by default, as for the built-in read endpoints).
    """

    path: str
    view: Callable[..., Any]
    methods: Sequence[str] = ("GET",)
    role: str = "read"
    endpoint: str = field(default="")


class Refused(Exception):
    """Raised by the host when a plugin refuses something; ``message`` goes to the client."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Spec:
    """The hooks pytsd calls. Every one is optional for a plugin."""

    @hookspec
    def pytsd_configure(self, config: Mapping[str, Any]) -> None:
        """Called once when the plugin is loaded (OpenTSDB's ``initialize(TSDB)``): read
        settings, validate them, raise ``ValueError`` to refuse to start."""

    @hookspec(firstresult=True)
    def pytsd_allow_data_point(self, point: Point) -> str | None:
        """``WriteableDataPointFilterPlugin#allowDataPoint``, called for every point before
        it is stored. Return a message to refuse the point (it becomes that point's error),
        or None to let it through."""

    @hookspec(firstresult=True)
    def pytsd_allow_uid_assignment(self, kind: str, name: str, metric: str | None,
                                   tags: Mapping[str, str] | None) -> str | None:
        """``UniqueIdFilterPlugin#allowUIDAssignment``: a new UID is about to be assigned to
        ``name`` of ``kind`` (``metrics``, ``tagk``, ``tagv``), for the point ``metric`` /
        ``tags`` (None when assigned through ``/api/uid/assign``). Return a message to
        refuse, None to allow."""

    @hookspec
    def pytsd_publish_points(self, points: Sequence[Point]) -> None:
        """``RTPublisher#publishDataPoint``, batched: the points a request stored. Called
        after they are stored, on the request's thread: queue, do not block."""

    @hookspec
    def pytsd_publish_annotation(self, annotation: Mapping[str, Any]) -> None:
        """``RTPublisher#publishAnnotation``: a note as ``/api/annotation`` returns it,
        after it is created or changed (deletions are not published, as in OpenTSDB)."""

    @hookspec
    def pytsd_http_routes(self) -> Sequence[Route]:
        """``HttpRpcPlugin``: extra endpoints, mounted under ``/plugin/``."""
        return ()

    @hookspec(firstresult=True)
    def pytsd_authenticate_http(self, headers: Mapping[str, str]) -> AuthState | None:
        """``Authentication#authenticateHTTP``: who sent a request with these headers,
        or None when they carry no valid credentials."""

    @hookspec(firstresult=True)
    def pytsd_authenticate_telnet(self, command: Sequence[str]) -> AuthState | None:
        """``Authentication#authenticateTelnet``: the words of a connection's first line
        (``auth <token>`` or ``auth <user> <password>``); None refuses."""

    @hookspec
    def pytsd_collect_stats(self) -> Sequence[tuple[str, int | float, Mapping[str, str]]]:
        """``collectStats``: ``(metric, value, tags)`` rows added to ``/api/stats``."""
        return ()

    @hookspec
    def pytsd_shutdown(self) -> None:
        """The worker is stopping: flush queues, close files (bounded time)."""
