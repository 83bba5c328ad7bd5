"""What each query shape read the last time it ran in this process: raw points per hour
(same table, metric, filters). The plan sizes a read by it before reading (``plan``: a part
too large for the hour cache is not kept there), and the split decides by it whether the
helper process reads half (``app.tsdb.read.split``)."""

from __future__ import annotations

from typing import Any

from app.query.ast import SubQuery
from app.recent import Recent
from app.tsdb import TSDB

MAX_REMEMBERED = 1024
# What a point the hour cache keeps costs it: 17 bytes of arrays, ~2.5 of bookkeeping.
KEPT_BYTES_PER_POINT = 20
_SEEN: Recent[tuple[Any, ...], float] = Recent(MAX_REMEMBERED)  # raw points an hour


def _shape(tsdb: TSDB, sub: SubQuery) -> tuple[Any, ...]:
    return (tsdb.data_table_name, sub.metric, repr(sub.filters), sub.explicit_tags)


def expected_points(tsdb: TSDB, sub: SubQuery, hours: int) -> float | None:
    """Raw points ``sub`` is expected to read over ``hours`` (None: not read yet here)."""
    per_hour = _SEEN.get(_shape(tsdb, sub))
    return None if per_hour is None else per_hour * hours


def remember(tsdb: TSDB, sub: SubQuery, hours: int, points: int) -> None:
    """``sub`` read ``points`` raw points over ``hours`` (the oldest shapes are forgotten)."""
    _SEEN.put(_shape(tsdb, sub), points / hours)


def too_large_to_keep(tsdb: TSDB, sub: SubQuery, hours: int, parts: int) -> bool:
    """Whether one of ``parts`` equal parts of the read would not fit the hour cache: kept,
    it would only push out what the cache holds (and then itself, hour after hour); read
    fused, its memory is the chunk's."""
    expected = expected_points(tsdb, sub, hours) or 0.0
    return expected / parts * KEPT_BYTES_PER_POINT > int(tsdb.config["tsd.query.cache.max_bytes"])


def forget() -> None:
    """Forget every shape (a test's fresh start)."""
    _SEEN.clear()
