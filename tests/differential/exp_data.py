"""The small seeded data set of the expression differential test (``test_expressions.py``).

Three metrics over two hours with overlapping but unequal tag sets (so joins keep, drop or fill
series), ragged timestamps with gaps (so the time-synced fill policies matter), integers and
floats, no zero in ``ex.b`` (a divisor; JEXL refuses division by zero) except one series that
holds zeros on purpose.
"""

from __future__ import annotations

import random
from typing import Any

T0 = 1357084800  # 2013-01-02T00:00:00Z
SPAN_S = 2 * 3600
SERIES: list[tuple[str, dict[str, str]]] = [
    ("ex.a", {"host": "web01", "dc": "lga"}),
    ("ex.a", {"host": "web02", "dc": "lga"}),
    ("ex.a", {"host": "web03", "dc": "sjc"}),
    ("ex.b", {"host": "web01", "dc": "lga"}),
    ("ex.b", {"host": "web02", "dc": "lga"}),
    ("ex.b", {"host": "web04", "dc": "sjc"}),
    ("ex.c", {"host": "web01"}),
    ("ex.c", {"host": "web02"}),
    ("ex.z", {"host": "web01", "dc": "lga"}),
]


def uid_order() -> dict[str, list[str]]:
    order: dict[str, list[str]] = {"metric": [], "tagk": [], "tagv": []}
    for metric, tags in SERIES:
        names = [("metric", metric)]
        for key, value in sorted(tags.items()):
            names += [("tagk", key), ("tagv", value)]
        for kind, name in names:
            if name not in order[kind]:
                order[kind].append(name)
    return order


def points(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for metric, tags in SERIES:
        t = T0 + rng.randrange(60)
        while t < T0 + SPAN_S:
            if rng.random() < 0.05:
                t += rng.randrange(300, 900)  # a gap
            if metric == "ex.z":
                value: int | float = rng.choice([0, 0, 1, 2])
            elif metric == "ex.b" or rng.random() < 0.5:
                value = rng.randrange(1, 500)
            else:
                value = round(rng.uniform(-50, 500), 2)
            out.append({"metric": metric, "timestamp": t, "value": value, "tags": dict(tags)})
            t += 60 + rng.randrange(-20, 21)
    return out
