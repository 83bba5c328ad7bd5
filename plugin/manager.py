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
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Protocol

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


#: The setting that must name a plugin for each hook of it to run (others run for any plugin).
HOOK_SETTINGS = {
    "pytsd_allow_data_point": "tsd.timeseriesfilter.plugin",
    "pytsd_allow_uid_assignment": "tsd.uidfilter.plugin",
    "pytsd_publish_points": "tsd.rtpublisher.plugin",
    "pytsd_publish_annotation": "tsd.rtpublisher.plugin",
    "pytsd_http_routes": "tsd.http.rpc.plugins",
    "pytsd_authenticate_http": "tsd.core.authentication.plugin",
    "pytsd_authenticate_telnet": "tsd.core.authentication.plugin",
}


class PluginLoadError(TsdbError):
    """A setting names a plugin that cannot be found, imported or configured."""


class _UidMap(Protocol):
    assign_filter: Any


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
        self._roles: dict[str, set[str] | None] = {}  # plugin -> the settings naming it
        self.filters_points = self.publishes = False
        for setting, name in wanted_plugins(config):
            self.add(name, self.pm.get_plugin(name) or resolve(name, config), setting)
        self.authenticates = bool(config.get("tsd.core.authentication.enable"))
        if self._has("pytsd_shutdown"):
            atexit.register(self.shutdown)  # gunicorn workers exit through sys.exit

    def add(self, name: str, obj: Any, setting: str = "") -> None:
        """Register and configure one plugin (tests and embedders may call this too).

        A plugin acts only in the roles the settings give it: one named only as a publisher
        does not filter writes even if it has that hook. ``setting=""``: every role.
        """
        if self.pm.get_plugin(name) is not None:  # named twice: one instance, more roles
            roles = self._roles.get(name)
            if roles is not None and setting:
                roles.add(setting)
            elif roles is not None:
                self._roles[name] = None
            self._update_flags()
            return
        self._roles[name] = {setting} if setting else None
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
        self._update_flags()
        log.info("plugin %s loaded (%s)", name, setting or "added")

    def _update_flags(self) -> None:
        # Plain attributes, so the write path asks one cheap question per batch.
        self.filters_points = self._has("pytsd_allow_data_point")
        self.publishes = self._has("pytsd_publish_points")

    def names(self) -> list[str]:
        return [name for name, _ in self.pm.list_name_plugin()]

    def _has(self, hook: str) -> bool:
        return any(True for _ in self._impls(hook))

    def _impls(self, hook: str) -> Iterator[tuple[str, Any]]:
        """``(plugin name, hook implementation)`` in pluggy's call order (last registered
        first), of the plugins whose role includes this hook."""
        needed = HOOK_SETTINGS.get(hook)
        for impl in reversed(getattr(self.pm.hook, hook).get_hookimpls()):
            roles = self._roles.get(impl.plugin_name)
            if needed is None or roles is None or needed in roles:
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


@dataclass(frozen=True)
class _Point:
    metric: str
    timestamp: int
    value: int | float
    tags: Mapping[str, str]


class _Batch(Protocol):
    """What the seam reads of ``app.tsdb.points.PointBatch`` (columns, one entry a point)."""

    series: dict[Any, tuple[str, tuple[tuple[str, str], ...]]]
    series_of: list[Any]
    timestamps: list[int]
    values: list[int | float]
    errors: list[TsdbError | None]


def plugin_points(host: PluginHost, batch: _Batch, accepted: Sequence[int],
                  store: Callable[[Sequence[int]], None]) -> Sequence[int]:
    """The write path's one seam: the write filters see each accepted point of ``batch``
    (a refused one gets its error in ``batch.errors``), ``store`` writes the others, then the
    publishers get the stored ones. Returns the indexes stored."""
    if not host.filters_points and not host.publishes:
        store(accepted)
        return accepted
    tags_of: dict[Any, Mapping[str, str]] = {}
    points: dict[int, _Point] = {}
    for i in accepted:
        key = batch.series_of[i]
        metric, pairs = batch.series[key]
        tags = tags_of.get(key)
        if tags is None:
            tags = tags_of[key] = dict(pairs)
        points[i] = _Point(metric, batch.timestamps[i], batch.values[i], tags)
    if host.filters_points:
        allowed = []
        for i in accepted:
            refusal = host.refusal("pytsd_allow_data_point", point=points[i])
            if refusal:
                batch.errors[i] = BadRequestError(refusal)
            else:
                allowed.append(i)
        accepted = allowed
    store(accepted)
    host.publish_points([points[i] for i in accepted])
    return accepted
