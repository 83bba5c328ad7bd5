"""Merging many misaligned series is series x timestamps of work: it runs in bounded memory
(one block at a time) and stops at the query's deadline (issue 11)."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest

from app.engine.aggregators import AGGREGATORS
from app.engine.flat import flatten
from app.engine.interpolate import merge
from app.engine.model import Series
from app.errors import QueryTimeoutError
from app.query.limits import Deadline

N_SERIES = 20
N_POINTS = 20_000
MIB = 1 << 20


def misaligned() -> list[Series]:
    """Every series on its own timestamps: the union is N_SERIES x N_POINTS long."""
    out = []
    for k in range(N_SERIES):
        ts = np.arange(N_POINTS, dtype=np.int64) * 10_000 + k * 100
        out.append(Series(tsuid=f"{k:06X}", tags={"host": f"h{k}"}, ts_ms=ts,
                          values=np.full(N_POINTS, 1.5), is_int=np.zeros(N_POINTS, bool)))
    return out


def test_merge_memory_follows_a_block_not_the_matrix() -> None:
    flat = flatten(misaligned(), 0, 2**62)
    tracemalloc.start()
    try:
        merged = merge(flat, AGGREGATORS["sum"], rate=False, end_ms=2**62)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    union = N_SERIES * N_POINTS
    assert len(merged.ts_ms) == union
    # Inside every series' span each of the 20 series contributes 1.5 (LERP of a constant).
    assert merged.values[N_SERIES * 10] == 1.5 * N_SERIES
    # Built whole, the (series x union) blocks hold 8M cells (values, longs, masks: about
    # 110 MB measured, growing with series x points); reduced one by one, about 60 MB
    # (one block's temporaries plus the output), whatever the number of series.
    assert peak < 80 * MIB


def test_merge_stops_at_the_deadline() -> None:
    flat = flatten(misaligned(), 0, 2**62)
    deadline = Deadline(1)
    time.sleep(0.005)
    with pytest.raises(QueryTimeoutError, match=r"in sub query 5 \(tsd.query.timeout=1\)"):
        merge(flat, AGGREGATORS["sum"], rate=False, end_ms=2**62, deadline=deadline, index=5)
