"""The data of the rollup differential test, and its rollups computed the plain way.

The rollups OpenTSDB is given through ``/api/rollup`` are computed here with ordinary Python
(group by interval start, sum/count/min/max), independently of pytsd's numpy code, so the two
tables meet only in storage. Float values are multiples of 1/4, so every sum is exact in any
order and the bytes must agree exactly.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

DAY_S = 86400
HOUR_S = 3600
# Two hours either side of a UTC midnight three days ago: 1-hour rollup rows (a day each) on
# both sides, well before any rollup horizon.
MIDNIGHT_S = int(time.time()) // DAY_S * DAY_S - 3 * DAY_S
START_S = MIDNIGHT_S - 2 * HOUR_S
END_S = MIDNIGHT_S + 2 * HOUR_S
AGGREGATION_IDS = {"sum": 0, "count": 1, "min": 2, "max": 3}
ROLLUP_INTERVALS = {"1m": (60, "1h"), "1h": (3600, "1d")}
SERIES = [
    ("roll.int", {"host": "a", "dc": "x"}), ("roll.int", {"host": "b", "dc": "x"}),
    ("roll.int", {"host": "c", "dc": "y"}),
    ("roll.float", {"host": "a", "dc": "x"}), ("roll.float", {"host": "b", "dc": "y"}),
    ("roll.mixed", {"host": "a", "dc": "x"}), ("roll.mixed", {"host": "b", "dc": "y"}),
]


def rollup_config(table_prefix: str, rollup_prefix: str) -> dict[str, Any]:
    """2.4's ``tsd.rollups.config``: a 1 s default (the raw table), 1 m and 1 h rollups.

    ``table_prefix`` is prepended to every table name (OpenTSDB names whole HBase tables;
    pytsd prefixes them itself); ``rollup_prefix`` tells one server's rollup tables apart."""
    def name(table: str) -> str:
        return f"{table_prefix}{rollup_prefix}{table}"

    intervals = [{"table": f"{table_prefix}tsdb", "preAggregationTable": name("preagg"),
                  "interval": "1s", "rowSpan": "1h", "defaultInterval": True}]
    for interval, (_, span) in ROLLUP_INTERVALS.items():
        intervals.append({"table": name(f"rollup-{interval}"),
                          "preAggregationTable": name(f"preagg-{interval}"),
                          "interval": interval, "rowSpan": span})
    return {"aggregationIds": AGGREGATION_IDS, "intervals": intervals}


def raw_points(seed: int) -> list[dict[str, Any]]:
    """Ragged timestamps (7 to 53 s apart) with a missing hour in one series."""
    rng = random.Random(seed)
    points = []
    for metric, tags in SERIES:
        ts = START_S + rng.randrange(0, 30)
        gap = rng.randrange(START_S, END_S - HOUR_S) if tags["host"] == "b" else None
        while ts < END_S:
            if gap is None or not gap <= ts < gap + HOUR_S:
                points.append({"metric": metric, "timestamp": ts, "tags": tags,
                               "value": _value(rng, metric)})
            ts += rng.randrange(7, 54)
    return points


def _value(rng: random.Random, metric: str) -> int | float:
    as_int = metric == "roll.int" or (metric == "roll.mixed" and rng.random() < 0.5)
    if as_int:
        return rng.choice([rng.randrange(-50, 50), rng.randrange(0, 1 << 20),
                           rng.randrange(-(1 << 40), 1 << 40)])
    return rng.randrange(-400_000, 400_000) / 4


def rollup_points(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What an external rollup job would post to ``/api/rollup`` for ``points``."""
    buckets: dict[tuple[str, str, str, int], list[int | float]] = {}
    for point in points:
        key = json.dumps(point["tags"], sort_keys=True)
        for interval, (seconds, _) in ROLLUP_INTERVALS.items():
            start = point["timestamp"] - point["timestamp"] % seconds
            buckets.setdefault((point["metric"], key, interval, start), []).append(point["value"])
    out = []
    for (metric, key, interval, start), values in sorted(buckets.items()):
        ints = all(isinstance(v, int) for v in values)
        aggregates: dict[str, int | float] = {"sum": sum(values), "count": len(values),
                                              "min": min(values), "max": max(values)}
        for name, value in aggregates.items():
            if not ints and name != "count":
                value = float(value)
            out.append({"metric": metric, "timestamp": start, "value": value,
                        "tags": json.loads(key), "interval": interval, "aggregator": name})
    return out


PRESET = "roll.preset"  # a metric with rollups and pre-aggregates but no raw points


def preset_points(seed: int) -> list[dict[str, Any]]:
    """Rollups and pre-aggregates of a metric that has no raw data: what a job would post.

    Two hosts every minute; pre-aggregates sum the hosts per minute (no interval: raw-point
    layout in the default interval's pre-aggregate table) and per hour (``sum``, ``count``
    and ``max`` of the 1-hour interval)."""
    rng = random.Random(seed)
    raw = [{"metric": PRESET, "timestamp": ts, "tags": {"host": host, "dc": "x"},
            "value": rng.randrange(0, 1000) if host == "a" else rng.randrange(0, 4000) / 4}
           for host in ("a", "b") for ts in range(START_S, END_S, 60)]
    out = rollup_points(raw)
    minutes: dict[int, list[int | float]] = {}
    for point in raw:
        minutes.setdefault(int(point["timestamp"]), []).append(float(point["value"]))
    for ts, values in sorted(minutes.items()):
        out.append({"metric": PRESET, "timestamp": ts, "value": float(sum(values)),
                    "tags": {"dc": "x"}, "groupByAggregator": "sum"})
    for hour in range(START_S, END_S, HOUR_S):
        sums = [float(sum(values)) for ts, values in minutes.items() if hour <= ts < hour + HOUR_S]
        for name, value in (("sum", float(sum(sums))), ("count", len(sums)),
                            ("max", max(sums))):
            out.append({"metric": PRESET, "timestamp": hour, "value": value,
                        "tags": {"dc": "x"}, "interval": "1h", "aggregator": name,
                        "groupByAggregator": "sum"})
    return out
