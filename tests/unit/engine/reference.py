"""A literal, point-by-point port of ``AggregationIterator`` used as a test oracle.

It keeps Java's state (current and next point per series, expiry of a series the step after
its last point, the float flags of current and next values) and runs the aggregators as Java
loops, so the vectorised engine can be checked against it on random data. Slow on purpose.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

INF = math.inf
DOUBLE_MAX = 1.7976931348623157e308
LONG_MAX, LONG_MIN = 2**63 - 1, -(2**63)


@dataclass(frozen=True)
class Point:
    ts: int
    value: float | int
    is_int: bool


def java_div(num: int, den: int) -> int:
    quotient = abs(num) // abs(den)
    return quotient if (num >= 0) == (den > 0) else -quotient


def _sum(values: list) -> float | int:
    if values and isinstance(values[0], int):
        return sum(values)
    total, n = 0.0, 0
    for v in values:
        if not math.isnan(v):
            total += v
            n += 1
    return total if n else math.nan


def _avg(values: list) -> float | int:
    if isinstance(values[0], int):
        return java_div(sum(values), len(values))
    good = [v for v in values if not math.isnan(v)]
    total = 0.0
    for v in good:
        total += v
    return total / len(good) if good else math.nan


def _min(values: list) -> float | int:
    return min(values)


def _max(values: list) -> float | int:
    return max(values)


AGGREGATORS: dict[str, tuple[str, Callable[[list], float | int]]] = {
    "sum": ("lerp", _sum), "zimsum": ("zim", _sum), "pfsum": ("prev", _sum),
    "avg": ("lerp", _avg), "min": ("lerp", _min), "max": ("lerp", _max),
    "mimmin": ("max", _min), "mimmax": ("min", _max),
    "count": ("zim", lambda values: len(values) if isinstance(values[0], int)
              else float(sum(1 for v in values if not math.isnan(v)))),
    "first": ("zim", lambda values: values[0]), "last": ("zim", lambda values: values[-1]),
}


def _missing(method: str, y0: float | int, y1: float | int, x: int, x0: int, x1: int,
             as_long: bool) -> float | int:
    if method == "lerp":
        if as_long:
            return int(y0) + java_div((x - x0) * (int(y1) - int(y0)), x1 - x0)
        return y0 + ((x - x0) * (y1 - y0)) / (x1 - x0)
    if method == "prev":
        return y0
    if method == "zim":
        return 0 if as_long else 0.0
    if method == "max":
        return LONG_MAX if as_long else DOUBLE_MAX
    return LONG_MIN if as_long else -DOUBLE_MAX


def _values_at(x: int, cur: list[Point | None], nxt: list[Point | None], method: str,
               is_int: bool, rate: bool) -> list[float | int]:
    """What every started, unexpired series contributes at ``x`` (``nextDoubleValue``...)."""
    def num(point: Point) -> float | int:
        return int(point.value) if is_int else float(point.value)

    values = []
    for point, after in zip(cur, nxt, strict=True):
        if point is None:
            continue
        if rate or point.ts == x:
            values.append(num(point))
            continue
        assert after is not None
        values.append(_missing(method, num(point), num(after), x, point.ts, after.ts, is_int))
    return values


def aggregate(series: Sequence[Sequence[Point]], name: str, rate: bool = False
              ) -> list[tuple[int, float | int, bool]]:
    """(timestamp, value, is_integer) for every output point."""
    method, run = AGGREGATORS[name]
    size = len(series)
    cursor = [0] * size
    cur: list[Point | None] = [None] * size
    nxt: list[Point | None] = [None] * size

    def advance(i: int) -> None:
        cur[i] = nxt[i]
        nxt[i] = series[i][cursor[i]] if cursor[i] < len(series[i]) else None
        cursor[i] += 1

    for i in range(size):
        if series[i]:
            nxt[i], cursor[i] = series[i][0], 1
            if rate:
                advance(i)
    out = []
    current = 0
    while any(p is not None for p in nxt):
        for i in range(current, size):
            if nxt[i] is None:
                cur[i] = None  # expired the step after its last point
        x = min(p.ts for p in nxt if p is not None)
        movers = [i for i in range(size) if nxt[i] is not None and nxt[i].ts == x]
        current = movers[0]
        for i in movers:
            advance(i)
        is_int = not rate and all(p.is_int for p in cur + nxt if p is not None)
        out.append((x, run(_values_at(x, cur, nxt, method, is_int, rate)), is_int))
    return out
