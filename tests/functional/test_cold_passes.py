"""A cold read decoded in several passes (``rows.DECODE_CHUNK_ROWS``): every series in
order with its own points, every closed row kept, and the point limit stopping after the pass
that crosses it, with that pass's count. Both backends."""

from __future__ import annotations

import time

import pytest

from app.errors import QueryLimitError
from app.query.ast import SubQuery
from app.query.limits import QueryLimits
from app.tsdb import TSDB, hour_cache
from app.tsdb.hour_cache import cache_for
from app.tsdb.read import rows
from app.tsdb.reader import SeriesReader
from app.tsdb.writer import DataPoint, PointWriter

HOUR_S = 3600
BASE_S = (int(time.time()) // HOUR_S - 6) * HOUR_S  # three closed hours, well before now
END_S = BASE_S + 3 * HOUR_S - 1
HOSTS = [f"h{n}" for n in range(5)]


@pytest.fixture
def loaded(tsdb: TSDB, monkeypatch: pytest.MonkeyPatch) -> TSDB:
    real = hour_cache.clock_ms
    monkeypatch.setattr(hour_cache, "clock_ms", lambda: real() + 60_000)  # rows settled
    monkeypatch.setattr(rows, "DECODE_CHUNK_ROWS", 2)  # 15 rows: a pass per series
    points = [DataPoint("par.m", BASE_S + i * 60, i * (h + 1), {"host": host})
              for h, host in enumerate(HOSTS) for i in range(3 * 60)]
    assert not any(PointWriter(tsdb).write(points))
    return tsdb


def cold_read(tsdb: TSDB, limits: QueryLimits | None = None) -> list[tuple[str, list[float]]]:
    cache = cache_for(tsdb)
    assert cache is not None
    cache.clear()
    series = SeriesReader(tsdb, limits).read(SubQuery("sum", metric="par.m"), BASE_S * 1000,
                                             END_S * 1000)
    return [(s.tags["host"], s.values.tolist()) for s in series]


def test_passes_give_every_series_in_order(loaded: TSDB) -> None:
    got = cold_read(loaded)
    assert got == [(host, [float(i * (h + 1)) for i in range(180)])
                   for h, host in enumerate(HOSTS)]
    cache = cache_for(loaded)
    assert cache is not None and len(cache) == 15  # every closed row kept


def test_the_point_limit_stops_after_the_pass_crossing_it(loaded: TSDB) -> None:
    # a pass is one series (3 rows, 180 points): the third pass crosses 400 points
    with pytest.raises(QueryLimitError, match=r"limit of 400 data points \(sub query 0 read 540\)"):
        cold_read(loaded, QueryLimits(data_points=400))
