"""Decode throughput of app.storage.codec: compacted hour rows -> numpy arrays.

Builds compacted second-resolution rows exactly as OpenTSDB's compaction writes them (encoded
with ``point_cell`` and merged with ``compact_cells``; a few dozen distinct hours are reused
across base times so building stays quick), then times ``decode_rows`` (all rows of a series
in one call) and ``decode_row`` (one call per row). Prints points/s, best of several runs, by
wall clock and by CPU time of this process (the second ignores time lost to other processes
on a busy machine). Plain script::

    python bench/bench_decode.py [--runs 5] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.storage.codec import compact_cells, decode_row, decode_rows, point_cell  # noqa: E402
from app.storage.codec_decode import decode_stored_rows  # noqa: E402

Row = tuple[int, list[tuple[bytes, bytes]]]
BASE_S = 1_356_998_400  # 2013-01-01T00:00:00Z, an hour boundary
TEMPLATES = 40  # distinct hours of values per data set
KINDS = {
    "double": "8-byte doubles only (e.g. 42.2)",
    "int": "2-byte integers only",
    "gauge": "doubles rounded to 0.01: ~4% are exact float32 (4 bytes)",
    "mixed-int": "1, 2 and 4-byte integers, evenly mixed",
    "mixed": "1-8 byte integers, float32 and doubles, evenly mixed",
}


def make_rows(n_rows: int, points_per_row: int, kind: str, seed: int = 1) -> list[Row]:
    """``n_rows`` consecutive compacted hour rows of one series, one column each."""
    rng = np.random.default_rng(seed)
    step_s = 3600 // points_per_row
    templates = []
    for _ in range(TEMPLATES):
        cells = [point_cell(BASE_S + i * step_s, value)[1:]
                 for i, value in enumerate(_values(rng, points_per_row, kind))]
        column = compact_cells(cells)
        assert column is not None
        templates.append(column)
    return [(BASE_S + r * 3600, [templates[r % TEMPLATES]]) for r in range(n_rows)]


def _values(rng: np.random.Generator, n: int, kind: str) -> list[int | float]:
    if kind == "double":
        return [float(x) for x in rng.normal(50, 10, n)]
    if kind == "int":
        return [int(x) for x in rng.integers(1_000, 30_000, n)]
    if kind == "gauge":
        return [float(x) for x in np.round(rng.normal(50, 10, n), 2)]
    if kind == "mixed-int":
        return [int(x) for x in rng.integers(-100_000, 100_000, n) >> rng.integers(0, 17, n)]
    if kind == "mixed":
        ints = [int(x) for x in rng.integers(-(2**40), 2**40, n) >> rng.integers(0, 40, n)]
        return [x if i % 3 else x / 4 if i % 2 else x / 10 for i, x in enumerate(ints)]
    raise ValueError(kind)


def best_rates(fn: Callable[[], int], runs: int) -> tuple[float, float]:
    """Best points/s by wall clock and by process CPU time over ``runs`` calls of ``fn``."""
    wall = cpu = float("inf")
    points = 0
    for _ in range(runs):
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        points = fn()
        wall = min(wall, time.perf_counter() - wall_start)
        cpu = min(cpu, time.process_time() - cpu_start)
    return points / wall, points / max(cpu, 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="best of this many runs")
    parser.add_argument("--quick", action="store_true", help="skip the per-row decode_row runs")
    args = parser.parse_args()
    print("points/s in millions (wall clock / CPU time), best of", args.runs)
    print(f"{'rows x points':>14}  {'values':<10} {'decode_rows':>14} "
          f"{'stored rows':>14} {'decode_row':>14}")
    for n_rows, per_row in ((10_000, 360), (1_000, 3_600)):
        for kind in KINDS:
            rows = make_rows(n_rows, per_row, kind)
            wall, cpu = best_rates(lambda rows=rows: len(decode_rows(rows)), args.runs)
            line = f"{n_rows:>6} x {per_row:<5}  {kind:<10} {wall / 1e6:>6.1f} / {cpu / 1e6:<5.1f}"
            # The read path's call: rows as storage returns them, {b"t:" + qualifier: value}.
            stored = [(base, {b"t:" + q: v for q, v in cells}) for base, cells in rows]
            wall, cpu = best_rates(
                lambda stored=stored: len(decode_stored_rows(stored, b"t:")), args.runs)
            line += f" {wall / 1e6:>6.1f} / {cpu / 1e6:<5.1f}"
            if not args.quick:
                wall, cpu = best_rates(
                    lambda rows=rows: sum(len(decode_row(b, c)) for b, c in rows), args.runs)
                line += f" {wall / 1e6:>6.1f} / {cpu / 1e6:<5.1f}"
            print(line, flush=True)
    print("\nvalues:", *(f"\n  {kind:<10} {text}" for kind, text in KINDS.items()))


if __name__ == "__main__":
    main()
