"""Write throughput with TSUID tracking off and in each tsd.core.meta mode (in process).

Batches of 50 points over 100 series of 10-second points go through the one PointWriter
(what /api/put and the line protocol call) into a fresh embedded store per mode and round;
prints the best of three interleaved rounds (points/s) and the ratio to tracking off. OpenTSDB
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


def run(mode: str, points: int, folder: Path, round_: int) -> float:
    config = load_config({"tsd.storage": f"sqlite:///{folder / f'{mode}{round_}.db'}",
                          "tsd.storage.sqlite.synchronous": "NORMAL",
                          "tsd.core.auto_create_metrics": True, **MODES[mode]}, environ={})
    tsdb = TSDB(config)
    writer = PointWriter(tsdb)
    work = batches(points)
    started = time.perf_counter()
    for batch in work:
        writer.write_batch(batch)
    if tsdb.tsuid_tracker is not None:
        tsdb.tsuid_tracker.flush()
    return points / (time.perf_counter() - started)


def main() -> None:
    points = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    rates = dict.fromkeys(MODES, 0.0)
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(3):
            for mode in MODES:
                rates[mode] = max(rates[mode], run(mode, points, Path(folder), round_))
    for mode, rate in rates.items():
        print(f"{mode:>13}: {rate:>9,.0f} points/s  ({rate / rates['off']:.2f}x off)")


if __name__ == "__main__":
    main()
