"""Engine throughput: decoded series in, OpenTSDB answers out (no storage, no JSON).

1,000 series x 8,640 points (one day at 10 s), generated with numpy. Prints the best of three
wall times per query and the input points per second. Run: ``python bench/bench_engine.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from app.engine.execute import run_subquery
from app.engine.model import GroupResult, Series
from app.query.ast import Downsample, Filter, SubQuery

N_SERIES = 1_000
N_POINTS = 8_640
STEP_MS = 10_000
START_MS = 1_700_000_000_000 - 1_700_000_000_000 % 86_400_000
END_MS = START_MS + N_POINTS * STEP_MS - 1


def make_series(n_series: int) -> list[Series]:
    rng = np.random.default_rng(42)
    ts = START_MS + STEP_MS * np.arange(N_POINTS, dtype=np.int64)
    out = []
    for i in range(n_series):
        tagv = (i + 1).to_bytes(3, "big")
        out.append(Series(
            tsuid="000001000001" + tagv.hex().upper(),
            tags={"host": f"web{i:04d}"},
            ts_ms=ts,
            values=rng.random(N_POINTS) * 100.0,
            is_int=np.zeros(N_POINTS, dtype=bool),
            row_order=b"\x00\x00\x01\x00\x00\x01" + tagv,
            tag_uids={"host": (b"\x00\x00\x01", tagv)},
        ))
    return out


def ragged(series: list[Series]) -> list[Series]:
    """Series that start at different hours and jitter by up to 9 s: nothing lines up."""
    rng = np.random.default_rng(7)
    out = []
    for i, s in enumerate(series):
        skip = (i % 24) * 360
        jitter = rng.integers(0, 9_000, len(s.ts_ms) - skip)
        out.append(Series(s.tsuid, s.tags, s.ts_ms[skip:] + jitter, s.values[skip:],
                          s.is_int[skip:], row_order=s.row_order, tag_uids=s.tag_uids))
    return out


def best_of_3(run: Callable[[], list[GroupResult]]) -> tuple[float, float, list[GroupResult]]:
    """Best wall and best CPU seconds of three runs (CPU is steadier on a shared machine)."""
    wall, cpu, result = float("inf"), float("inf"), []
    for _ in range(3):
        began, began_cpu = time.perf_counter(), time.process_time()
        result = run()
        wall = min(wall, time.perf_counter() - began)
        cpu = min(cpu, time.process_time() - began_cpu)
    return wall, cpu, result


def main() -> None:
    every = make_series(N_SERIES)
    one_minute_avg = Downsample("1m-avg", 60_000, 1, "m", "avg")
    by_host = (Filter("wildcard", "host", "*", group_by=True),)
    cases: list[tuple[str, SubQuery, list[Series]]] = [
        ("sum:1m-avg (1 group of 1000)", SubQuery("sum", downsample=one_minute_avg), every),
        ("sum:1m-avg{host=*} (1000 groups)",
         SubQuery("sum", downsample=one_minute_avg, filters=by_host), every),
        ("sum:rate (1 series)", SubQuery("sum", rate=True), every[:1]),
        ("none (10 series)", SubQuery("none"), every[:10]),
        ("sum raw (1 group of 1000)", SubQuery("sum"), every),
        ("ragged sum:1m-avg (1 group of 1000)", SubQuery("sum", downsample=one_minute_avg),
         ragged(every)),
        ("ragged sum raw (1 group of 100)", SubQuery("sum"), ragged(every[:100])),
    ]
    print(f"{'query':36} {'groups':>6} {'points in':>10} {'wall s':>7} {'points/s':>12} "
          f"{'cpu s':>7} {'points/cpu-s':>13}")
    for name, sub, series in cases:
        points = sum(len(s.ts_ms) for s in series)
        wall, cpu, result = best_of_3(
            lambda sub=sub, series=series: run_subquery(sub, "m", series, START_MS, END_MS))
        print(f"{name:36} {len(result):>6} {points:>10,} {wall:>7.3f} {points / wall:>12,.0f} "
              f"{cpu:>7.3f} {points / max(cpu, 1e-9):>13,.0f}")


if __name__ == "__main__":
    main()
