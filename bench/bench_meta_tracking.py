"""Write throughput with TSUID tracking off and in each tsd.core.meta mode (in process).

Batches of 50 points over 100 series of 10-second points go through the one PointWriter
(what /api/put and the line protocol call) into a fresh embedded store per mode and round,
after one untimed point per series (the UIDs and each series' first meta cells: a one-time cost
per series and hour, about a millisecond on the embedded store);
prints the best of three interleaved rounds (points per wall second, and per CPU second of
the process, the steadier figure on a loaded machine) and the ratios to tracking off. OpenTSDB
does one extra meta RPC per point; pytsd once per series, process and hour (counting: one
increment per series per second, the last flush included in the time).

    .venv/bin/python bench/bench_meta_tracking.py [points]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from app.config import load_config
from app.tsdb import TSDB
from app.tsdb.points import DataPoint, PointBatch
from app.tsdb.writer import PointWriter

T0 = 1_700_000_000
BATCH = 50
WARM_UP_POINTS = 100  # one point per series, written before the clock starts
MODES = {
    "off": {},
    "tracking": {"tsd.core.meta.enable_tsuid_tracking": True},
    "realtime_ts": {"tsd.core.meta.enable_tsuid_tracking": True,
                    "tsd.core.meta.enable_realtime_ts": True},
    "incrementing": {"tsd.core.meta.enable_tsuid_tracking": True,
                     "tsd.core.meta.enable_realtime_ts": True,
                     "tsd.core.meta.enable_tsuid_incrementing": True},
}


def batches(points: int) -> list[PointBatch]:
    every = [DataPoint("bench.meta", T0 + 10 * (i // 100), i % 1000,
                       {"host": f"web{i % 100:03d}", "dc": "lga"}) for i in range(points)]
    return [PointBatch.of(every[i:i + BATCH]) for i in range(0, points, BATCH)]


def run(mode: str, points: int, folder: Path, round_: int) -> tuple[float, float]:
    """(points per wall second, points per CPU second of this process)."""
    config = load_config({"tsd.storage": f"sqlite:///{folder / f'{mode}{round_}.db'}",
                          "tsd.storage.sqlite.synchronous": "NORMAL",
                          "tsd.core.auto_create_metrics": True, **MODES[mode]}, environ={})
    tsdb = TSDB(config)
    writer = PointWriter(tsdb)
    work = batches(points + WARM_UP_POINTS)
    for batch in work[:WARM_UP_POINTS // BATCH]:  # every series seen once: UIDs, first meta
        writer.write_batch(batch)
    work = work[WARM_UP_POINTS // BATCH:]
    started, started_cpu = time.perf_counter(), time.process_time()
    for batch in work:
        writer.write_batch(batch)
    if tsdb.tsuid_tracker is not None:
        tsdb.tsuid_tracker.flush()
    return (points / (time.perf_counter() - started),
            points / (time.process_time() - started_cpu))


def main() -> None:
    points = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    wall = dict.fromkeys(MODES, 0.0)
    cpu = dict.fromkeys(MODES, 0.0)
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(3):
            for mode in MODES:
                wall_rate, cpu_rate = run(mode, points, Path(folder), round_)
                wall[mode], cpu[mode] = max(wall[mode], wall_rate), max(cpu[mode], cpu_rate)
    for mode in MODES:
        print(f"{mode:>13}: {wall[mode]:>9,.0f} points/s ({wall[mode] / wall['off']:.2f}x off), "
              f"{cpu[mode]:>9,.0f} per CPU second ({cpu[mode] / cpu['off']:.2f}x off)")


if __name__ == "__main__":
    main()
