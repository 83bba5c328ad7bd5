"""The data sets of OpenTSDB's query tests (``test/core/BaseTsdbTest.java``), as in spec §9.

Each function returns points ``(metric, timestamp, value, tags)`` in the order that gives the
spec's UIDs: sys.cpu.user=000001, sys.cpu.system=000002, host=000001, web01=000001, web02=000002.
"""

from __future__ import annotations

from collections.abc import Callable

Point = tuple[str, int, int | float, dict[str, str]]
T0 = 1356998400
K = range(1, 301)


def _two_series(metric: str, ts: Callable[[str, int], int],
                value: Callable[[str, int], int | float]) -> list[Point]:
    return [(metric, ts(host, k), value(host, k), {"host": host})
            for host in ("web01", "web02") for k in K]


def long_seconds() -> list[Point]:
    """L: web01 = k and web02 = 301-k at T0+30k, for sys.cpu.user and sys.cpu.system."""
    def value(host: str, k: int) -> int:
        return k if host == "web01" else 301 - k

    return [p for metric in ("sys.cpu.user", "sys.cpu.system")
            for p in _two_series(metric, lambda h, k: T0 + 30 * k, value)]


def long_offset() -> list[Point]:
    """LO: like L, but web02 is 15 s later; sys.cpu.user only."""
    return _two_series("sys.cpu.user",
                       lambda h, k: T0 + 30 * k + (15 if h == "web02" else 0),
                       lambda h, k: k if h == "web01" else 301 - k)


def float_seconds() -> list[Point]:
    """F: web01 = 1.25+0.25(k-1), web02 = 75.0-0.25(k-1) at T0+30k."""
    return _two_series("sys.cpu.user", lambda h, k: T0 + 30 * k,
                       lambda h, k: 1.25 + 0.25 * (k - 1) if h == "web01"
                       else 75.0 - 0.25 * (k - 1))


def long_ms() -> list[Point]:
    """M: at T0 ms + 500k ms, web01 = k, web02 = 301-k."""
    return _two_series("sys.cpu.user", lambda h, k: T0 * 1000 + 500 * k,
                       lambda h, k: k if h == "web01" else 301 - k)


def missing_data() -> list[Point]:
    """MD: grid T0+10i; web01 = i+1 unless i%3==0; web02 = 300-i only when that is odd."""
    points: list[Point] = []
    for i in range(300):
        if i % 3:
            points.append(("sys.cpu.user", T0 + 10 * i, i + 1, {"host": "web01"}))
    for i in range(300):
        if (300 - i) % 2:
            points.append(("sys.cpu.user", T0 + 10 * i, 300 - i, {"host": "web02"}))
    return points


def mixed_seconds() -> list[Point]:
    """X: web01 = 1.25..76 step 0.25 at T0+30k, an int when it is an even whole number."""
    points: list[Point] = []
    for k in K:
        value = 1.25 + 0.25 * (k - 1)
        stored: int | float = int(value) if value.is_integer() and int(value) % 2 == 0 else value
        points.append(("sys.cpu.user", T0 + 30 * k, stored, {"host": "web01"}))
    return points


def docs_filters() -> list[Point]:
    """D7: sys.cpu.system, one point each at T0 (OpenTSDB's filter documentation)."""
    tag_sets = [({"dc": "dal", "host": "web01"}, 3), ({"dc": "dal", "host": "web02"}, 2),
                ({"dc": "dal", "host": "web03"}, 10), ({"host": "web01"}, 1),
                ({"host": "web01", "owner": "jdoe"}, 4), ({"dc": "lax", "host": "web01"}, 8),
                ({"dc": "lax", "host": "web02"}, 4)]
    # host first so host=000001 and web01=000001, as in the spec's UID table.
    return [("sys.cpu.system", T0, value,
             dict(sorted(tags.items(), key=lambda kv: kv[0] != "host")))
            for tags, value in tag_sets]


DATASETS: dict[str, Callable[[], list[Point]]] = {
    "L": long_seconds, "LO": long_offset, "F": float_seconds, "M": long_ms,
    "MD": missing_data, "X": mixed_seconds, "D7": docs_filters,
}
