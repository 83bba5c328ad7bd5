"""The plugin host: finds the plugins the settings name, registers them, calls their hooks.

One host per :class:`~app.tsdb.TSDB`, so one per gunicorn worker. Each hook is called plugin
by plugin, so one plugin's exception is logged with its name and handled by the policy of
that hook (a filter that fails refuses, a publisher that fails is skipped) instead of
escaping into the request.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from importlib import metadata
from typing import Any, Protocol, TypeVar

import pluggy

from app.errors import BadRequestError, TsdbError
from plugin.spec import PROJECT, AuthState, Point, Refused, Route, Spec

log = logging.getLogger(__name__)

#: The entry-point group third-party packages register their plugins under.
ENTRY_POINT_GROUP = "pytsd.plugins"

#: The built-in plugins, by the name settings use for them.
BUILTINS = {
    "auth": "plugin.auth:TokenAuthentication",
    "uidfilter": "plugin.uidfilter:UidFilter",
    "webhook": "plugin.publisher:WebhookPublisher",
    "jsonl": "plugin.publisher:JsonLinesPublisher",
}

#: OpenTSDB's plugin settings: (enable key or None, key naming the plugins).
PLUGIN_KEYS = (
    ("tsd.core.authentication.enable", "tsd.core.authentication.plugin"),
    ("tsd.uidfilter.enable", "tsd.uidfilter.plugin"),
    ("tsd.timeseriesfilter.enable", "tsd.timeseriesfilter.plugin"),
    ("tsd.rtpublisher.enable", "tsd.rtpublisher.plugin"),
    (None, "tsd.http.rpc.plugins"),
)


class PluginLoadError(TsdbError):
    """A setting names a plugin that cannot be found, imported or configured."""


class _UidMap(Protocol):
    assign_filter: Any


P = TypeVar("P", bound=Point)


def split_names(text: str | None) -> list[str]:
    return [name.strip() for name in (text or "").split(",") if name.strip()]


def wanted_plugins(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(setting, plugin name)`` for every plugin the settings enable, in load order."""
    wanted: list[tuple[str, str]] = []
    for enable_key, plugin_key in PLUGIN_KEYS:
        if enable_key is not None and not config.get(enable_key):
            continue
        names = split_names(config.get(plugin_key))
        if enable_key is not None and not names:
            raise PluginLoadError(f"{enable_key} is true but {plugin_key} names no plugin")
        wanted += [(plugin_key, name) for name in names]
    return wanted


def _entry_points(plugin_path: str) -> dict[str, metadata.EntryPoint]:
    """Entry points of the group, from the environment and from ``tsd.core.plugin_path``."""
    found = {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    for folder in split_names(plugin_path):
        for dist in metadata.distributions(path=[folder]):
            for ep in dist.entry_points:
                if ep.group == ENTRY_POINT_GROUP:
                    found[ep.name] = ep
    return found


def _import_target(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


def resolve(name: str, config: Mapping[str, Any]) -> Any:
    """The plugin object a setting names: a built-in, an entry point, or ``module[:attr]``.

    A class is instantiated with no arguments (its ``pytsd_configure`` gets the settings).
    """
    plugin_path = config.get("tsd.core.plugin_path") or ""
    for folder in split_names(plugin_path):
        if folder not in sys.path:
            sys.path.append(folder)
    try:
        if name in BUILTINS:
            obj = _import_target(BUILTINS[name])
        else:
            entry_points = _entry_points(plugin_path)
            obj = entry_points[name].load() if name in entry_points else _import_target(name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise PluginLoadError(f"Cannot load plugin {name!r}: {exc}") from exc
    return obj() if isinstance(obj, type) else obj


class PluginHost:
    """The registered plugins of one process and the guarded calls into them."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config
        self.pm = pluggy.PluginManager(PROJECT)
        self.pm.add_hookspecs(Spec)
        self.errors = 0  # plugin exceptions caught, for /api/stats
        self._lock = threading.Lock()
        for setting, name in wanted_plugins(config):
            self.add(name, resolve(name, config), setting)
        # Plain attributes, so the write path asks one cheap question per batch.
        self.filters_points = self._has("pytsd_allow_data_point")
        self.publishes = self._has("pytsd_publish_points")
        self.authenticates = bool(config.get("tsd.core.authentication.enable"))
        if self._has("pytsd_shutdown"):
            atexit.register(self.shutdown)  # gunicorn workers exit through sys.exit

    def add(self, name: str, obj: Any, setting: str = "") -> None:
        """Register and configure one plugin (tests and embedders may call this too)."""
        if self.pm.get_plugin(name) is not None:
            return  # named twice (e.g. publisher and rpc): one instance
        try:
            self.pm.register(obj, name=name)
        except (ValueError, pluggy.PluginValidationError) as exc:
            raise PluginLoadError(f"Plugin {name!r} ({setting}): {exc}") from exc
        configure = getattr(obj, "pytsd_configure", None)
        if configure is not None:
            try:
                configure(config=self.config)
            except Exception as exc:
                raise PluginLoadError(f"Plugin {name!r} refused its settings: {exc}") from exc
        self.filters_points = self._has("pytsd_allow_data_point")
        self.publishes = self._has("pytsd_publish_points")
        log.info("plugin %s loaded (%s)", name, setting or "added")

    def names(self) -> list[str]:
        return [name for name, _ in self.pm.list_name_plugin()]

    def _has(self, hook: str) -> bool:
        return bool(getattr(self.pm.hook, hook).get_hookimpls())

    def _impls(self, hook: str) -> Iterator[tuple[str, Any]]:
        """``(plugin name, bound function)`` in pluggy's call order (last registered first)."""
        for impl in reversed(getattr(self.pm.hook, hook).get_hookimpls()):
            yield impl.plugin_name, impl

    def _call(self, impl: Any, **kwargs: Any) -> Any:
        return impl.function(**{arg: kwargs[arg] for arg in impl.argnames})

    def _failed(self, name: str, hook: str) -> None:
        with self._lock:
            self.errors += 1
        log.exception("plugin %s failed in %s", name, hook)

    # --- filters: a failing plugin refuses (fail closed) ------------------------------------

    def refusal(self, hook: str, **kwargs: Any) -> str | None:
        """The first refusal message of ``hook``'s plugins, or None when all allow."""
        for name, impl in self._impls(hook):
            try:
                message = self._call(impl, **kwargs)
            except Exception:
                self._failed(name, hook)
                return f"Plugin {name} failed; see the TSD logs"
            if message:
                return str(message)
        return None

    def attach_uid_filter(self, uid_maps: Iterable[_UidMap]) -> None:
        """Have the UID maps ask the UID filters before assigning (``UniqueId``'s seam)."""
        if self._has("pytsd_allow_uid_assignment"):
            for uid_map in uid_maps:
                uid_map.assign_filter = self._uid_filter

    def _uid_filter(self, kind: str, name: str, metric: str | None,
                    tags: Mapping[str, str] | None) -> None:
        try:
            self.check_uid_assignment(kind, name, metric, tags)
        except Refused as exc:
            raise BadRequestError(exc.message) from None

    def check_uid_assignment(self, kind: str, name: str, metric: str | None = None,
                             tags: Mapping[str, str] | None = None) -> None:
        """Raise :class:`Refused` when a UID filter refuses assigning ``name``."""
        message = self.refusal("pytsd_allow_uid_assignment", kind=kind, name=name,
                               metric=metric, tags=tags)
        if message:
            raise Refused(f"Failed to assign ID for kind='{kind}' name='{name}': {message}")

    # --- publishers and stats: a failing plugin is skipped ----------------------------------

    def broadcast(self, hook: str, **kwargs: Any) -> list[Any]:
        results = []
        for name, impl in self._impls(hook):
            try:
                result = self._call(impl, **kwargs)
            except Exception:
                self._failed(name, hook)
                continue
            if result is not None:
                results.append(result)
        return results

    def publish_points(self, points: Sequence[Point]) -> None:
        if points and self.publishes:
            self.broadcast("pytsd_publish_points", points=points)

    def publish_annotation(self, annotation: Mapping[str, Any]) -> None:
        self.broadcast("pytsd_publish_annotation", annotation=annotation)

    def stats(self) -> list[tuple[str, int | float, Mapping[str, str]]]:
        rows: list[tuple[str, int | float, Mapping[str, str]]] = [
            ("tsd.plugin.errors", self.errors, {"type": "all"})]
        for result in self.broadcast("pytsd_collect_stats"):
            rows += list(result)
        return rows

    def routes(self) -> list[tuple[str, Route]]:
        """``(plugin name, route)`` of every HTTP RPC plugin."""
        found = []
        for name, impl in self._impls("pytsd_http_routes"):
            try:
                found += [(name, route) for route in self._call(impl) or ()]
            except Exception:
                self._failed(name, "pytsd_http_routes")
        return found

    def shutdown(self) -> None:
        self.broadcast("pytsd_shutdown")

    # --- authentication: a failing plugin authenticates no one ------------------------------

    def authenticate(self, hook: str, **kwargs: Any) -> AuthState | None:
        for name, impl in self._impls(hook):
            try:
                state = self._call(impl, **kwargs)
            except Exception:
                self._failed(name, hook)
                return None
            if state is not None:
                return state
        return None


def plugin_points(host: PluginHost, points: Sequence[P],
                  write: Callable[[Sequence[P]], list[str | None]]) -> list[str | None]:
    """The write path's one seam: filter each point, ``write`` the allowed ones, publish the
    stored ones. Returns one error message (or None) per point, in order."""
    if not host.filters_points and not host.publishes:
        return write(points)
    errors: list[str | None] = [None] * len(points)
    allowed: list[int] = []
    for i, point in enumerate(points):
        refusal = (host.refusal("pytsd_allow_data_point", point=point)
                   if host.filters_points else None)
        if refusal:
            errors[i] = refusal
        else:
            allowed.append(i)
    written = write([points[i] for i in allowed])
    stored = []
    for i, error in zip(allowed, written):
        errors[i] = error
        if error is None:
            stored.append(points[i])
    host.publish_points(stored)
    return errors
