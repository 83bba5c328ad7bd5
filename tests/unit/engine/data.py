"""OpenTSDB's unit-test data sets (``test/core/BaseTsdbTest.java``) as engine input.

Metric ``sys.cpu.user`` = 000001, tagk ``host`` = 000001, tagv ``web01`` = 000001 and
``web02`` = 000002; every set spans k = 1..300 from BASE = 1356998400 (2013-01-01T00:00Z).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.engine.execute import run_subquery
from app.engine.model import GroupResult, Series
from app.query.ast import Downsample, Filter, RateOptions, SubQuery

BASE_S = 1356998400
START_MS = BASE_S * 1000
END_MS = 1357041600 * 1000  # the tests' 12-hour query window
K = np.arange(1, 301)
TAGV = {"web01": 1, "web02": 2, "web03": 3}
GROUP_BY_HOST = (Filter("wildcard", "host", "*", group_by=True),)


def series(host: str, ts_ms: Sequence[int] | np.ndarray, values: Sequence[float] | np.ndarray,
           is_int: bool | Sequence[bool] | np.ndarray = True,
           extra_tags: dict[str, tuple[str, int, int]] | None = None,
           host_tagk: int = 1) -> Series:
    """One series; ``extra_tags`` maps tagk -> (tagv, tagk UID, tagv UID)."""
    uids = {"host": (host_tagk, TAGV[host])}
    tags = {"host": host}
    for tagk, (tagv, k_uid, v_uid) in (extra_tags or {}).items():
        uids[tagk] = (k_uid, v_uid)
        tags[tagk] = tagv
    order = sorted(uids, key=lambda k: uids[k][0])
    tag_uids = {k: (uids[k][0].to_bytes(3, "big"), uids[k][1].to_bytes(3, "big")) for k in order}
    row = b"\x00\x00\x01" + b"".join(tag_uids[k][0] + tag_uids[k][1] for k in order)
    ts = np.asarray(ts_ms, dtype=np.int64)
    flags = np.full(len(ts), is_int) if isinstance(is_int, bool) else np.asarray(is_int)
    return Series(tsuid=row.hex().upper(), tags={k: tags[k] for k in order}, ts_ms=ts,
                  values=np.asarray(values, dtype=np.float64), is_int=flags.astype(bool),
                  row_order=row, tag_uids=tag_uids)


def long_series() -> list[Series]:
    """L: web01 at BASE+30k = k, web02 at the same times = 301-k (integers)."""
    ts = (BASE_S + 30 * K) * 1000
    return [series("web01", ts, K), series("web02", ts, 301 - K)]


def long_offset_series() -> list[Series]:
    """LO: like L, but web02 is 15 s later."""
    return [series("web01", (BASE_S + 30 * K) * 1000, K),
            series("web02", (BASE_S + 15 + 30 * K) * 1000, 301 - K)]


def float_series() -> list[Series]:
    """F: web01 1.25 + 0.25(k-1), web02 75 - 0.25(k-1), both doubles."""
    ts = (BASE_S + 30 * K) * 1000
    return [series("web01", ts, 1.25 + 0.25 * (K - 1), False),
            series("web02", ts, 75.0 - 0.25 * (K - 1), False)]


def ms_series() -> list[Series]:
    """M: web01 at BASE_ms + 500k = k, web02 = 301-k."""
    ts = START_MS + 500 * K
    return [series("web01", ts, K), series("web02", ts, 301 - K)]


def missing_data_series() -> list[Series]:
    """MD: grid t_i = BASE + 10i; web01 = i+1 except i%3 == 0; web02 = 300-i when odd."""
    i = np.arange(300)
    ts = (BASE_S + 10 * i) * 1000
    one, two = i % 3 != 0, (300 - i) % 2 == 1
    return [series("web01", ts[one], (i + 1)[one]), series("web02", ts[two], (300 - i)[two])]


def query(aggregator: str, data: Sequence[Series], *, start_ms: int = START_MS,
          end_ms: int = END_MS, downsample: Downsample | None = None, rate: bool = False,
          rate_options: RateOptions | None = None, filters: tuple[Filter, ...] = (),
          timezone: str = "UTC") -> list[GroupResult]:
    sub = SubQuery(aggregator=aggregator, downsample=downsample, rate=rate,
                   rate_options=rate_options or RateOptions(), filters=filters)
    return run_subquery(sub, "sys.cpu.user", data, start_ms, end_ms, timezone=timezone)


def dps(result: GroupResult) -> list[tuple[int, float]]:
    """(timestamp in seconds, value) pairs."""
    return list(zip((result.ts_ms // 1000).tolist(), result.values.tolist(), strict=True))


def spec(text: str, calendar: bool = False) -> Downsample:
    """A parsed downsample spec for the simple forms the tests use (``30s-avg-nan``...)."""
    parts = text.split("-")
    interval, function = parts[0], parts[1]
    fill = parts[2] if len(parts) == 3 else "none"
    if "all" in interval:
        return Downsample(text, 0, 0, "all", function, fill, run_all=True)
    if interval.endswith("c"):
        calendar, interval = True, interval[:-1]
    digits = "".join(ch for ch in interval if ch.isdigit())
    unit = interval[len(digits):]
    unit_ms = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000,
               "w": 604_800_000, "n": 2_592_000_000, "y": 31_536_000_000}[unit]
    return Downsample(text, int(digits) * unit_ms, int(digits), unit, function, fill,
                      calendar=calendar)
