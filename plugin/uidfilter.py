"""Built-in UID filter ``uidfilter``: OpenTSDB's regex whitelist, a blacklist, and a
cardinality guard (a per-metric limit on new series per hour).

Enable with ``tsd.uidfilter.enable = true``. It is asked only when a *new* UID is about to
be assigned, so existing names always keep working:

* ``tsd.uidfilter.whitelist.{metric,tagk,tagv}_patterns``: a new name must match every
  pattern (searched, not anchored), as ``UniqueIdWhitelistFilter`` does;
* ``tsd.uidfilter.blacklist.{metric,tagk,tagv}_patterns``: a new name matching any is refused;
* ``tsd.uidfilter.series_limit.per_hour``: a point whose series needs a new UID is a new
  series; each metric may create that many per clock hour (per worker process).

A refused point fails on its own with a message saying which rule refused it.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from typing import Any

from plugin.spec import hookimpl

KINDS = {"metrics": "metric", "tagk": "tagk", "tagv": "tagv"}
HOUR_S = 3600


def _patterns(config: Mapping[str, Any], key: str) -> list[re.Pattern[str]]:
    delimiter = config.get("tsd.uidfilter.whitelist.delimiter") or ","
    compiled = []
    for text in filter(None, (config.get(key) or "").split(delimiter)):
        try:
            compiled.append(re.compile(text))
        except re.error as exc:
            raise ValueError(f"{key}: the pattern [{text}] does not compile: {exc}") from exc
    return compiled


class UidFilter:
    """The ``uidfilter`` plugin."""

    def __init__(self) -> None:
        self.whitelist: dict[str, list[re.Pattern[str]]] = {}
        self.blacklist: dict[str, list[re.Pattern[str]]] = {}
        self.series_limit = 0
        self._lock = threading.Lock()
        self._hour = -1
        self._new_series: dict[str, set[tuple[tuple[str, str], ...]]] = {}
        self.accepted = dict.fromkeys(KINDS, 0)
        self.rejected = dict.fromkeys(KINDS, 0)
        self.series_rejected = 0

    @hookimpl
    def pytsd_configure(self, config: Mapping[str, Any]) -> None:
        for kind, label in KINDS.items():
            self.whitelist[kind] = _patterns(
                config, f"tsd.uidfilter.whitelist.{label}_patterns")
            self.blacklist[kind] = _patterns(
                config, f"tsd.uidfilter.blacklist.{label}_patterns")
        self.series_limit = int(config.get("tsd.uidfilter.series_limit.per_hour") or 0)
        if self.series_limit < 0:
            raise ValueError("tsd.uidfilter.series_limit.per_hour must be 0 or more")

    @hookimpl
    def pytsd_allow_uid_assignment(self, kind: str, name: str, metric: str | None,
                                   tags: Mapping[str, str] | None) -> str | None:
        refusal = self._pattern_refusal(kind, name)
        if refusal is None and metric is not None and self.series_limit:
            refusal = self._series_refusal(metric, tags or {})
        with self._lock:
            (self.rejected if refusal else self.accepted)[kind] += 1
        return refusal

    @hookimpl
    def pytsd_collect_stats(self) -> list[tuple[str, int, Mapping[str, str]]]:
        rows: list[tuple[str, int, Mapping[str, str]]] = []
        for kind in KINDS:
            rows.append(("tsd.uid.filter.accepted", self.accepted[kind], {"type": kind}))
            rows.append(("tsd.uid.filter.rejected", self.rejected[kind], {"type": kind}))
        rows.append(("tsd.uid.filter.series_limited", self.series_rejected, {"type": "all"}))
        return rows

    def _pattern_refusal(self, kind: str, name: str) -> str | None:
        for pattern in self.whitelist.get(kind, ()):
            if not pattern.search(name):
                return (f"Blocked by UID filter: {KINDS[kind]} does not match the whitelist "
                        f"pattern [{pattern.pattern}]")
        for pattern in self.blacklist.get(kind, ()):
            if pattern.search(name):
                return (f"Blocked by UID filter: {KINDS[kind]} matches the blacklist "
                        f"pattern [{pattern.pattern}]")
        return None

    def _series_refusal(self, metric: str, tags: Mapping[str, str]) -> str | None:
        series = tuple(sorted(tags.items()))
        hour = int(time.time()) // HOUR_S
        with self._lock:
            if hour != self._hour:
                self._hour, self._new_series = hour, {}
            seen = self._new_series.setdefault(metric, set())
            if series in seen:
                return None  # the same new series needing its next UID
            if len(seen) >= self.series_limit:
                self.series_rejected += 1
                return (f"Blocked by UID filter: metric '{metric}' has created "
                        f"{len(seen)} new series this hour, the limit "
                        "(tsd.uidfilter.series_limit.per_hour)")
            seen.add(series)
            return None
