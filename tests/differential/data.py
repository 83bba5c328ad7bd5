"""The seeded data set of the differential suite: the same points go to every server.

Integers, floats, series mixing both, ragged timestamps with gaps, counters with resets,
millisecond timestamps (several points in one second), tag sets of different shapes and an
upper-case tag value. UIDs are assigned up front in a fixed order (``/api/uid/assign``
answers one name at a time on both servers), so every table set gets the same UIDs and the
TSUIDs of the two servers' answers compare byte for byte.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

T0 = 1357084800  # 2013-01-02T00:00:00Z
SPAN_S = 6 * 3600
METRIC_PREFIX = "df."


@dataclass(frozen=True)
class Series:
    metric: str
    tags: dict[str, str]
    kind: str  # int | float | mixed | counter | ms


@dataclass
class DataSet:
    series: list[Series]
    points: list[dict[str, Any]]
    annotations: list[dict[str, Any]] = field(default_factory=list)

    def uid_order(self) -> dict[str, list[str]]:
        """Names in first-seen order per UID kind (the order they are assigned in)."""
        order: dict[str, list[str]] = {"metric": [], "tagk": [], "tagv": []}
        for series in self.series:
            names = [("metric", series.metric)]
            for key, value in sorted(series.tags.items()):
                names += [("tagk", key), ("tagv", value)]
            for kind, name in names:
                if name not in order[kind]:
                    order[kind].append(name)
        return order

    def tsuid(self, series: Series) -> str:
        order = self.uid_order()
        uid = {kind: {name: i + 1 for i, name in enumerate(names)}
               for kind, names in order.items()}
        pairs = sorted((uid["tagk"][k], uid["tagv"][v]) for k, v in series.tags.items())
        return f"{uid['metric'][series.metric]:06X}" + "".join(f"{k:06X}{v:06X}" for k, v in pairs)


def _series() -> list[Series]:
    m = METRIC_PREFIX
    out = [Series(m + "int", {"host": h, "dc": dc}, "int")
           for h, dc in (("web01", "lga"), ("web02", "lga"), ("web03", "sjc"), ("web01", "sjc"),
                         ("web02", "sjc"))]
    out += [Series(m + "float", {"host": h, "dc": "lga"}, "float") for h in ("web01", "web02")]
    out += [Series(m + "mixed", {"host": h}, "mixed") for h in ("web01", "web02")]
    out += [Series(m + "counter", {"host": h}, "counter") for h in ("web01", "web02")]
    out += [Series(m + "ms", {"host": h}, "ms") for h in ("web01", "web02")]
    out += [Series(m + "sparse", {"host": "web01", "env": "prod"}, "int"),
            Series(m + "sparse", {"host": "web02"}, "float"),
            Series(m + "sparse", {"host": "WEB04", "env": "dev"}, "int")]
    # large values: products overflow to Infinity (OpenTSDB's 400 "Got Infinity")
    out += [Series(m + "big", {"host": h}, "big") for h in ("web01", "web02")]
    return out


def _timestamps(rng: random.Random, step_s: int, ms: bool) -> list[int]:
    """Ragged timestamps with a few gaps, in ms when ``ms``."""
    stamps: list[int] = []
    t = T0 + rng.randrange(step_s)
    while t < T0 + SPAN_S:
        if rng.random() < 0.04:  # a gap of up to 40 minutes
            t += rng.randrange(600, 2400)
        stamps.append(t)
        t += step_s + rng.randrange(-step_s // 3, step_s // 3 + 1)
    if not ms:
        return stamps
    out = []
    for s in stamps:
        out.append(s * 1000 + rng.randrange(1000))
        if rng.random() < 0.2:  # a second point in the same second
            out.append(s * 1000 + 999 - rng.randrange(100))
    return sorted(set(out))


def _values(rng: random.Random, kind: str, count: int) -> list[int | float]:
    if kind == "int":
        return [rng.randrange(-50, 1000) for _ in range(count)]
    if kind == "float":
        return [round(rng.uniform(-10, 500), 3) for _ in range(count)]
    if kind == "mixed":
        return [rng.randrange(0, 300) if rng.random() < 0.5 else round(rng.uniform(0, 300), 2)
                for _ in range(count)]
    if kind == "counter":
        values: list[int | float] = []
        current = rng.randrange(1000)
        for _ in range(count):
            current = rng.randrange(50) if rng.random() < 0.03 else current + rng.randrange(200)
            values.append(current)
        return values
    if kind == "big":
        return [float(f"{rng.randrange(1, 10)}e{rng.randrange(100, 200)}") for _ in range(count)]
    return [rng.randrange(0, 100) for _ in range(count)]  # ms


def build(seed: int) -> DataSet:
    rng = random.Random(seed)
    series = _series()
    points = []
    for s in series:
        step_s = 600 if s.metric.endswith(("sparse", "big")) else 120
        stamps = _timestamps(rng, step_s, s.kind == "ms")
        for ts, value in zip(stamps, _values(rng, s.kind, len(stamps)), strict=True):
            points.append({"metric": s.metric, "timestamp": ts, "value": value,
                           "tags": dict(s.tags)})
    data = DataSet(series, points)
    data.annotations = _annotations(rng, data)
    return data


def _annotations(rng: random.Random, data: DataSet) -> list[dict[str, Any]]:
    notes: list[dict[str, Any]] = []
    for s in data.series[:3] + data.series[7:8]:
        start = T0 + rng.randrange(SPAN_S - 3600)
        notes.append({"tsuid": data.tsuid(s), "startTime": start, "endTime": start + 600,
                      "description": f"note on {s.metric}", "notes": "n",
                      "custom": {"owner": "diff"}})
    for i in range(2):
        start = T0 + 1800 + i * 7200
        notes.append({"startTime": start, "description": f"global {i}", "notes": ""})
    return notes
