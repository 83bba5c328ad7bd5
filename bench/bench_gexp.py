"""``/api/query/gexp`` function throughput: engine group results in, function results out
(no storage, no JSON). 100 series x 8,640 points (a day at 10 s) per argument.

Prints, per expression, the best of three CPU times and the input points per CPU-second
(CPU time, so the figure holds on a shared machine). Run: ``python bench/bench_gexp.py``.
"""

from __future__ import annotations

import os
import time

import numpy as np

from app.engine.gexp_eval import evaluate_tree
from app.engine.gexp_functions import FUNCTIONS, GexpContext
from app.engine.model import GroupResult
from app.query.gexp import parse_expressions

N_SERIES = 100
N_POINTS = 8_640
STEP_MS = 10_000
START_MS = 1_700_000_000_000
CTX = GexpContext(START_MS, START_MS + N_POINTS * STEP_MS)
EXPRESSIONS = [
    "scale(sum:a,2.5)", "absolute(sum:a)", "alias(sum:a,x.@host)", "movingAverage(sum:a,10)",
    "movingAverage(sum:a,'5min')", "movingAverage(sum:a,5000)", "highestCurrent(sum:a,5)",
    "highestMax(sum:a,5)", "timeShift(sum:a,'1hr')", "sumSeries(sum:a,sum:b)",
    "divideSeries(sum:a,sum:b)",
]


def results(seed: int) -> list[GroupResult]:
    rng = np.random.default_rng(seed)
    ts = START_MS + STEP_MS * np.arange(N_POINTS, dtype=np.int64)
    return [GroupResult(metric="m", tags={"host": f"web{i:03d}"}, aggregate_tags=[],
                        tsuids=[], ts_ms=ts, values=rng.random(N_POINTS) * 100, is_int=False,
                        query_index=0) for i in range(N_SERIES)]


def main() -> None:
    leaves = {"sum:a": results(1), "sum:b": results(2)}
    print(f"gexp functions: {N_SERIES} series x {N_POINTS} points per argument, "
          f"load average {os.getloadavg()[0]:.2f}")
    for text in EXPRESSIONS:
        trees, names = parse_expressions([text], FUNCTIONS)
        inputs = [leaves[name] for name in names]
        best = float("inf")
        for _ in range(3):
            started = time.process_time()
            evaluate_tree(trees[0], inputs, CTX)
            best = min(best, time.process_time() - started)
        points = len(names) * N_SERIES * N_POINTS
        print(f"  {text:32s} {best * 1000:8.1f} ms CPU  {points / best / 1e6:7.2f} M points/CPU-s")


if __name__ == "__main__":
    main()
