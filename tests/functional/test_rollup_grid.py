"""Rollup reads in whole-matrix steps (``rollup_grid``), the hour cache off: when every series
read has a full row of every day, its buckets come from a (series x cells) matrix and the
series come out downsampled (``StagedSeries``). Every answer here is written from the data's
rule: hourly averages, coarser sums and averages (several cells per bucket), a cell whose count
is 0 (its bucket left out), a read cut inside rows and blocks, a group over every series (the
missing bucket interpolated), the same with the hour cache on, and a series with gaps (no
grid: the rows path) answering alike."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.engine.staged import StagedSeries
from app.query.ast import Downsample, SubQuery
from app.tsdb import TSDB
from app.tsdb.reader import SeriesReader
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import app_over, make_tsdb
from tests.rollup_fixtures import ROLLUP_SETTINGS

DAY0 = 1370476800  # two days before a 4-day block boundary: blocks of days 2-6 and 6-10
DAYS = 10
# From day 1, 05:00 to day 8, 03:00: inside rows, the ends read row by row.
START, END = DAY0 + 86400 + 5 * 3600, DAY0 + 8 * 86400 + 3 * 3600
HOSTS = {"a": 1, "b": 2, "c": 3}
NO_COUNT = ("c", 3, 5)  # host c's day 3, 05:00 has a count of 0
pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def _sum(host: int, day: int, hour: int) -> int:
    return host * 100_000 + day * 100 + hour


def _at(day: int, hour: int) -> int:
    return DAY0 + day * 86400 + hour * 3600


def _post(client: FlaskClient, points: list[dict[str, Any]]) -> None:
    response = client.post("/api/rollup", data=json.dumps(points))
    assert response.status_code == 204, response.get_data(as_text=True)


def _cells(host: str, days: range) -> list[dict[str, Any]]:
    number = HOSTS.get(host, 9)
    return [{"metric": "m", "timestamp": _at(day, hour), "value": value,
             "tags": {"host": host}, "interval": "1h", "aggregator": aggregator}
            for day in days for hour in range(24)
            for aggregator, value in (("sum", _sum(number, day, hour)),
                                      ("count", 0 if (host, day, hour) == NO_COUNT else 2))]


@pytest.fixture
def month(tsd_config: dict[str, Any], request: pytest.FixtureRequest) -> TSDB:
    tsd_config.update({**ROLLUP_SETTINGS, "tsd.query.cache.max_bytes": 0})
    tsdb: TSDB = request.getfixturevalue("tsdb")
    assert not any(PointWriter(tsdb).write([DataPoint("m", DAY0, 1, {"host": "a"})]))
    client = app_over(tsdb).test_client()
    for host in HOSTS:
        _post(client, _cells(host, range(DAYS)))
    return tsdb


def _query(client: FlaskClient, m: str) -> dict[str, dict[str, float]]:
    response = client.get(f"/api/query?start={START}&end={END}&m={m}")
    assert response.status_code == 200, response.get_data(as_text=True)
    return {series["tags"].get("host", "*"): series["dps"] for series in response.get_json()}


def _hourly(host: str) -> dict[str, float]:
    """Each hour's average in the read: its sum over a count of 2 (none for a count of 0)."""
    return {str(_at(day, hour)): _sum(HOSTS[host], day, hour) / 2
            for day in range(DAYS) for hour in range(24)
            if START <= _at(day, hour) <= END and (host, day, hour) != NO_COUNT}


def _expected(m: str) -> dict[str, dict[str, float]]:
    if m == "sum:1h-avg:m{host=*}":
        return {host: _hourly(host) for host in HOSTS}
    if m == "sum:6h-sum:m{host=a}":
        # Buckets of 6 hours stamped in the read (day 1, 00:00 is before its start); each
        # bucket sums its 6 hours, all inside the scan.
        return {"a": {str(_at(day, hour)): sum(_sum(1, day, h) for h in range(hour, hour + 6))
                      for day in range(DAYS) for hour in range(0, 24, 6)
                      if START <= _at(day, hour) <= END}}
    if m == "sum:2h-avg:m{host=c}":
        # Sums of two hours over counts of two hours: 4, but 2 where one count is 0.
        return {"c": {str(_at(day, hour)): (_sum(3, day, hour) + _sum(3, day, hour + 1))
                      / (2 if (day, hour) == (3, 4) else 4)
                      for day in range(DAYS) for hour in range(0, 24, 2)
                      if START <= _at(day, hour) <= END}}
    assert m == "sum:1h-avg:m"
    # Every host's average summed; host c's missing hour interpolated between its neighbours
    # (on a line: the very value its sum over 2 would give).
    return {"*": {str(_at(day, hour)): sum(_sum(n, day, hour) / 2 for n in HOSTS.values())
                  for day in range(DAYS) for hour in range(24)
                  if START <= _at(day, hour) <= END}}


QUERIES = ["sum:1h-avg:m{host=*}", "sum:6h-sum:m{host=a}", "sum:2h-avg:m{host=c}",
           "sum:1h-avg:m"]


def test_a_grid_is_read_in_matrix_steps_as_written(month: TSDB, settled: None) -> None:
    client = app_over(month).test_client()
    for _ in range(2):  # from row columns (the blocks built after), then from the blocks
        for m in QUERIES:
            assert _query(client, m) == _expected(m), m
    spec = Downsample("1h-avg", 3_600_000, 1, "h", "avg")
    series = SeriesReader(month).read(SubQuery("sum", metric="m", downsample=spec),
                                      START * 1000, END * 1000)
    assert [s.tags["host"] for s in series] == list(HOSTS)
    assert all(isinstance(s, StagedSeries) for s in series)
    # Its buckets in the scan (one per point: the read is whole hours).
    assert [s.raw_points for s in series] == [len(_hourly(host)) for host in HOSTS]
    assert len({id(s.ts_ms.base) for s in series}) == 1  # one buffer: joined without a copy
    # Several cells a bucket: combined per series from the matrix too.
    spec = Downsample("6h-sum", 6 * 3_600_000, 6, "h", "sum")
    series = SeriesReader(month).read(SubQuery("sum", metric="m", downsample=spec),
                                      START * 1000, END * 1000)
    assert all(isinstance(s, StagedSeries) for s in series)
    assert {str(t // 1000): v for t, v in zip(series[0].ts_ms.tolist(),
                                              series[0].values.tolist())
            if START <= t // 1000} == _expected("sum:6h-sum:m{host=a}")["a"]


def test_the_hour_cache_on_answers_alike(month: TSDB, settled: None) -> None:
    cached = app_over(make_tsdb({**month.config, "tsd.query.cache.max_bytes": 64 << 20}))
    for _ in range(2):  # a first read kept, then from the cache
        for m in QUERIES:
            assert _query(cached.test_client(), m) == _expected(m), m


def test_a_series_with_gaps_reads_row_by_row_alike(month: TSDB, settled: None) -> None:
    client = app_over(month).test_client()
    _post(client, _cells("d", range(4, 5)))  # host d: day 4 only, no grid any more
    for _ in range(2):
        answer = _query(client, "sum:1h-avg:m{host=*}")
        assert answer == {**_expected("sum:1h-avg:m{host=*}"),
                          "d": {str(_at(4, hour)): _sum(9, 4, hour) / 2 for hour in range(24)}}
    spec = Downsample("1h-avg", 3_600_000, 1, "h", "avg")
    series = SeriesReader(month).read(SubQuery("sum", metric="m", downsample=spec),
                                      START * 1000, END * 1000)
    assert not any(isinstance(s, StagedSeries) for s in series)
