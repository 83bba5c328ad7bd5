"""Decode throughput of app.storage.codec: compacted hour rows -> numpy arrays.

Builds compacted rows exactly as OpenTSDB's compaction writes them (via ``compact_cells``),
then times ``decode_rows`` (one call for all rows of a series) and ``decode_row`` (one call
per row) and prints points/s, best of several runs. Plain script::

    python bench/bench_decode.py [--runs 5]
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

Row = tuple[int, list[tuple[bytes, bytes]]]
BASE_S = 1_356_998_400  # 2013-01-01T00:00:00Z, an hour boundary


def make_rows(n_rows: int, points_per_row: int, kind: str, seed: int = 1) -> list[Row]:
    """``n_rows`` consecutive compacted hour rows of one series, one column each."""
    rng = np.random.default_rng(seed)
    step_s = 3600 // points_per_row
    rows: list[Row] = []
    for r in range(n_rows):
        base_s = BASE_S + r * 3600
        values = _values(rng, points_per_row, kind)
        cells = []
        for i, value in enumerate(values):
            _, qualifier, raw = point_cell(base_s + i * step_s, value)
            cells.append((qualifier, raw))
        column = compact_cells(cells)
        assert column is not None
        rows.append((base_s, [column]))
    return rows


def _values(rng: np.random.Generator, n: int, kind: str) -> list[int | float]:
    if kind == "double":  # gauges such as 42.2: 8-byte doubles
        return [float(x) for x in np.round(rng.normal(50, 10, n), 3)]
    if kind == "mixed-int":  # counters and gauges: 1, 2 and 4 byte integers mixed
        return [int(x) for x in rng.integers(-100_000, 100_000, n) >> rng.integers(0, 17, n)]
    if kind == "mixed":  # ints of every width, float32 and float64
        ints = [int(x) for x in rng.integers(-(2**40), 2**40, n) >> rng.integers(0, 40, n)]
        return [x if i % 3 else x / 4 if i % 2 else x / 10 for i, x in enumerate(ints)]
    raise ValueError(kind)


def best_rate(fn: Callable[[], int], runs: int) -> float:
    """Best points/s over ``runs`` calls of ``fn`` (which returns the points decoded)."""
    best = float("inf")
    points = 0
    for _ in range(runs):
        start = time.perf_counter()
        points = fn()
        best = min(best, time.perf_counter() - start)
    return points / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"{'rows x points':>15} {'values':>10} {'decode_rows':>16} {'decode_row':>16}")
    for n_rows, per_row in ((10_000, 360), (1_000, 3_600)):
        for kind in ("double", "mixed-int", "mixed"):
            rows = make_rows(n_rows, per_row, kind)
            batched = best_rate(lambda rows=rows: len(decode_rows(rows)), args.runs)
            single = best_rate(lambda rows=rows: sum(len(decode_row(b, c)) for b, c in rows),
                               args.runs)
            print(f"{n_rows:>7} x {per_row:<5} {kind:>10} {batched / 1e6:>11.1f} M/s"
                  f" {single / 1e6:>11.1f} M/s")


if __name__ == "__main__":
    main()
