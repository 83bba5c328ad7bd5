"""Write throughput with TSUID tracking off and in each tsd.core.meta mode (in process).

Batches of 50 points over 100 series of 10-second points go through the one PointWriter
(what /api/put and the line protocol call) into a fresh embedded store per mode and round,
after one untimed point per series (the UIDs and each series' first meta cells: a one-time cost
per series and hour, about a millisecond on the embedded store);
prints the best of five interleaved rounds, the modes in a rotating order (points per wall
second, and per CPU second of the process) and the ratios to tracking off. OpenTSDB does one
extra meta RPC per point; pytsd once per series, process and hour (counting: one increment
per series per second, the last flush included in the time).

On a shared machine both end-to-end figures swing by more than the tracking costs, so it also
prints the steadier decomposition: the CPU the tracker itself spends on the same rows,
replayed into a tracker over a fresh store (best of five), as a share of the write path's CPU
with tracking off; the ratio it implies is off / (off + tracker).

    .venv/bin/python bench/bench_meta_tracking.py [points]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from app.config import load_config
from app.meta.tracking import Rows
from app.tsdb import TSDB
from app.tsdb.points import DataPoint, PointBatch
from app.tsdb.writer import PointWriter

T0 = 1_700_000_000
BATCH = 50
WARM_UP_POINTS = 100  # one point per series, written before the clock starts
ROUNDS = 5
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


def run(mode: str, points: int, folder: Path, round_: int,
        record: list[Rows] | None = None) -> tuple[float, float]:
    """(points per wall second, points per CPU second of this process); ``record`` gets the
    rows the writer handed the tracker, in the timed part."""
    config = load_config({"tsd.storage": f"sqlite:///{folder / f'{mode}{round_}.db'}",
                          "tsd.storage.sqlite.synchronous": "NORMAL",
                          "tsd.core.auto_create_metrics": True, **MODES[mode]}, environ={})
    tsdb = TSDB(config)
    writer = PointWriter(tsdb)
    work = batches(points + WARM_UP_POINTS)
    for batch in work[:WARM_UP_POINTS // BATCH]:  # every series seen once: UIDs, first meta
        writer.write_batch(batch)
    work = work[WARM_UP_POINTS // BATCH:]
    tracker = tsdb.tsuid_tracker
    if tracker is not None:  # counting: the first flush stores each series' TSMeta
        tracker.flush()
    if record is not None and tracker is not None:
        track = tracker.track_rows

        def recording(rows: Rows) -> None:
            record.append(dict(rows))
            track(rows)

        tracker.track_rows = recording  # type: ignore[method-assign]
    started, started_cpu = time.perf_counter(), time.process_time()
    for batch in work:
        writer.write_batch(batch)
    if tsdb.tsuid_tracker is not None:
        tsdb.tsuid_tracker.flush()
    return (points / (time.perf_counter() - started),
            points / (time.process_time() - started_cpu))


def tracker_cpu_s(mode: str, rows: list[Rows], folder: Path) -> float:
    """CPU seconds a fresh tracker of ``mode`` spends on ``rows`` (the last flush included),
    best of five; every series' first meta cells are stored before the clock starts (a pass
    over the rows, as the end-to-end run's warm-up point per series does)."""
    best = float("inf")
    for round_ in range(ROUNDS):
        config = load_config({"tsd.storage": f"sqlite:///{folder / f'replay{mode}{round_}.db'}",
                              "tsd.storage.sqlite.synchronous": "NORMAL", **MODES[mode]},
                             environ={})
        tracker = TSDB(config).tsuid_tracker
        assert tracker is not None
        for batch in rows:
            tracker.track_rows(batch)
        tracker.flush()
        started = time.process_time()
        for batch in rows:
            tracker.track_rows(batch)
        tracker.flush()
        best = min(best, time.process_time() - started)
    return best


def main() -> None:
    points = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    wall = dict.fromkeys(MODES, 0.0)
    cpu = dict.fromkeys(MODES, 0.0)
    recorded: list[Rows] = []
    with tempfile.TemporaryDirectory() as folder:
        modes = list(MODES)
        for round_ in range(ROUNDS):
            for mode in modes[round_ % len(modes):] + modes[:round_ % len(modes)]:
                record = recorded if round_ == 0 and mode == "incrementing" else None
                wall_rate, cpu_rate = run(mode, points, Path(folder), round_, record)
                wall[mode], cpu[mode] = max(wall[mode], wall_rate), max(cpu[mode], cpu_rate)
        print(f"end to end, {points:,} points, best of {ROUNDS}:")
        for mode in MODES:
            print(f"{mode:>13}: {wall[mode]:>9,.0f} points/s ({wall[mode] / wall['off']:.2f}x "
                  f"off), {cpu[mode]:>9,.0f} per CPU second ({cpu[mode] / cpu['off']:.2f}x off)")
        off_cpu_s = points / cpu["off"]
        print("the tracker alone, the same rows replayed:")
        for mode in list(MODES)[1:]:
            spent_s = tracker_cpu_s(mode, recorded, Path(folder))
            print(f"{mode:>13}: {spent_s * 1000:7.1f} ms CPU = {spent_s / off_cpu_s:6.1%} of the "
                  f"write path's {off_cpu_s * 1000:.0f} ms: {off_cpu_s / (off_cpu_s + spent_s):.2f}"
                  "x off")


if __name__ == "__main__":
    main()
