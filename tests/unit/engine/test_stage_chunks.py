"""The per-series stage in chunks (``execute._per_series_stage``): whatever the chunk size,
and whether the chunks' buckets are written into a sized buffer (``staged.Pieces``) or
concatenated, the stage emits the same arrays as one pass over every series."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine import execute
from app.engine.downsample import Window
from app.engine.model import Series
from app.query.ast import RateOptions, SubQuery
from tests.unit.engine.data import spec

HOUR_MS = 3_600_000
START_MS = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS


def _series(count: int) -> list[Series]:
    rng = np.random.default_rng(7)
    out = []
    for n in range(count):
        step = int(rng.integers(5, 90)) * 1000
        ts = np.arange(START_MS + int(rng.integers(0, 60_000)), START_MS + 3 * HOUR_MS, step)
        ts = ts[rng.random(ts.size) > 0.1]  # gaps
        is_int = np.full(ts.size, n % 2 == 0)
        values = np.where(is_int, rng.integers(0, 1000, ts.size), rng.random(ts.size) * 100)
        out.append(Series(tsuid=f"{n:02X}", tags={}, ts_ms=ts.astype(np.int64),
                          values=values.astype(np.float64), is_int=is_int))
    return out


@pytest.mark.parametrize("text", ["1m-avg", "5m-sum-zero", "10m-max-nan", "7m-count-null",
                                  "1h-dev", "1mc-avg", "0all-sum", "90s-last-zero"])
@pytest.mark.parametrize("with_rate", [False, True])
def test_chunks_answer_as_one_pass(text: str, with_rate: bool,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    sub = SubQuery("sum", metric="m", downsample=spec(text), rate=with_rate,
                   rate_options=RateOptions(counter=with_rate))
    window = Window(START_MS, START_MS + 3 * HOUR_MS, START_MS + 600_000,
                    START_MS + 3 * HOUR_MS - 600_000)
    series = _series(40)
    whole = execute._per_series_stage(sub, series, window)
    monkeypatch.setattr(execute, "STAGE_CHUNK_POINTS", 100)  # dozens of chunks
    chunked = execute._per_series_stage(sub, series, window)
    monkeypatch.setattr(execute, "stage_bound", lambda *args: None)  # concatenated
    concatenated = execute._per_series_stage(sub, series, window)
    for other in (chunked, concatenated):
        for name in ("ts_ms", "values", "longs", "is_float", "offsets"):
            np.testing.assert_array_equal(getattr(other, name), getattr(whole, name),
                                          err_msg=name)
