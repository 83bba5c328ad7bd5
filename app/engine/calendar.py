"""Calendar-aligned downsampling buckets, as ``DateTime#previousInterval`` and ``Calendar#add``.

Units are OpenTSDB's duration suffixes: ``ms s m h`` step in absolute milliseconds (Java's
``Calendar.add`` on time fields is plain millisecond arithmetic), ``d w n y`` step on the wall
clock of the time zone (days, weeks of seven days, months, years), so a day bucket spans 23 or
25 hours across a DST change. Weeks start on Sunday, the JVM's US-locale first day of week.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

import numpy as np

from app.engine.model import Int64Array

FIXED_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


@lru_cache(maxsize=64)
def zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def _local(ts_ms: int, tz: ZoneInfo) -> datetime:
    """Wall-clock time of ``ts_ms`` to the second (naive)."""
    return datetime.fromtimestamp(ts_ms // 1000, tz).replace(tzinfo=None)


def _epoch_ms(local: datetime, tz: ZoneInfo) -> int:
    # fold=0: a wall time inside a DST gap resolves forward, as Java's lenient Calendar does.
    return int(local.replace(tzinfo=tz).timestamp()) * 1000


def _add_months(local: datetime, months: int) -> datetime:
    """Java pins the day of month to the target month's length (Jan 31 + 1 month = Feb 28)."""
    total = local.year * 12 + (local.month - 1) + months
    year, month = total // 12, total % 12 + 1
    following = datetime(year + month // 12, month % 12 + 1, 1)
    days_in_month = (following - timedelta(days=1)).day
    return local.replace(year=year, month=month, day=min(local.day, days_in_month))


def add_interval(ts_ms: int, count: int, unit: str, tz: ZoneInfo) -> int:
    """``Calendar.add(unit, count)`` (a week adds ``7 * count`` days)."""
    if unit in FIXED_MS:
        return ts_ms + count * FIXED_MS[unit]
    local = _local(ts_ms, tz)
    if unit == "d":
        moved = local + timedelta(days=count)
    elif unit == "w":
        moved = local + timedelta(days=7 * count)
    elif unit == "n":
        moved = _add_months(local, count)
    elif unit == "y":
        moved = _add_months(local, 12 * count)
    else:
        raise ValueError(f"Unrecognized unit type: {unit}")
    return _epoch_ms(moved, tz) + ts_ms % 1000


def _snap(ts_ms: int, count: int, unit: str, tz: ZoneInfo) -> tuple[int, str, int]:
    """The natural base ``previousInterval`` starts stepping from, with its step."""
    local = _local(ts_ms, tz)
    day = local.replace(hour=0, minute=0, second=0)
    if unit == "ms":
        base = local if 1000 % count == 0 else local.replace(second=0)
    elif unit == "s":
        base = local.replace(second=0) if 60 % count == 0 else local.replace(minute=0, second=0)
    elif unit == "m":
        base = local.replace(minute=0, second=0) if 60 % count == 0 else day
    elif unit == "h":
        base = day if 24 % count == 0 else day.replace(day=1)
    elif unit == "d":
        base = day.replace(day=1) if count == 1 else day.replace(month=1, day=1)
    elif unit == "w":
        # Both of Java's branches end on the Sunday on or before ts, then step whole weeks.
        sunday = day - timedelta(days=(day.weekday() + 1) % 7)
        return _epoch_ms(sunday, tz), "d", 7
    elif unit in ("n", "y"):
        base = day.replace(month=1, day=1)
    else:
        raise ValueError(f"Unrecognized unit type: {unit}")
    return _epoch_ms(base, tz), unit, count


@lru_cache(maxsize=4096)
def previous_interval(ts_ms: int, count: int, unit: str, tz: ZoneInfo) -> int:
    """Start of the calendar interval holding ``ts_ms`` (``DateTime#previousInterval``)."""
    base, step_unit, step = _snap(ts_ms, count, unit, tz)
    if base == ts_ms:
        return base
    if step_unit in FIXED_MS:
        width = step * FIXED_MS[step_unit]
        return base + ((ts_ms - base) // width) * width
    current = base
    while True:
        following = add_interval(current, step, step_unit, tz)
        if following > ts_ms:
            return current
        current = following


def boundaries(first_ms: int, last_ms: int, count: int, unit: str, tz: ZoneInfo) -> Int64Array:
    """Bucket starts from ``first_ms`` (already aligned) until one past ``last_ms``."""
    if unit in FIXED_MS:
        width = count * FIXED_MS[unit]
        n = (last_ms - first_ms) // width + 2
        return first_ms + width * np.arange(n, dtype=np.int64)
    out = [first_ms]
    while out[-1] <= last_ms:
        out.append(add_interval(out[-1], count, unit, tz))
    return np.asarray(out, dtype=np.int64)
