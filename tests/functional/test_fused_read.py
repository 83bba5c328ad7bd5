"""The downsample fused into the read (``app.tsdb.read.fused``): on both backends, with the
hour cache off, a downsampled query decoded and downsampled a few rows at a time answers
exactly (to the byte of the JSON, counts included) what the whole-series path answers, across
grouping, fill policies, rates, ``none``, notes, gaps and filters."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.engine.staged import StagedSeries, fusable
from app.errors import QueryLimitError
from app.query.ast import Downsample, SubQuery
from app.tsdb import TSDB
from app.tsdb.read import fused as fused_read
from app.tsdb.read import plan as plan_module
from app.tsdb.read.plan import plan_read
from app.tsdb.reader import SeriesReader
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import app_over, drop_tables, make_tsdb

HOUR_S = 3600
BASE_S = (int(time.time()) // HOUR_S - 8) * HOUR_S
END_S = BASE_S + 4 * HOUR_S


def _points() -> list[DataPoint]:
    points = []
    for n in range(6):
        tags = {"host": f"web{n}", "dc": f"dc{n % 2}"}
        step = 10 if n < 4 else 45  # two series on another step
        for i, ts in enumerate(range(BASE_S, END_S, step)):
            if n == 2 and BASE_S + HOUR_S <= ts < BASE_S + 2 * HOUR_S:
                continue  # an hour missing
            if n == 3 and i % 7 == 0:
                continue  # points missing here and there
            value: int | float = i * (n + 1) if n % 2 else round(((i * 37) % 101) / 3.0, 3)
            if n == 5 and i % 50 == 0:
                value = 2**60 + i  # integers beyond a double's 2**53
            if n == 1 and i % 90 == 0:
                value = 0  # a counter reset
            points.append(DataPoint("fuse.m", ts, value, tags))
    # A series with only a note in range, and one with points only in the last hour.
    points += [DataPoint("fuse.m", ts, 5, {"host": "late", "dc": "dc0"})
               for ts in range(END_S - HOUR_S, END_S, 30)]
    return points


@pytest.fixture(params=[0, 1], ids=["unsalted", "salted"])
def store(tsd_config: dict[str, Any], request: pytest.FixtureRequest) -> Iterator[TSDB]:
    # Salted, a series' rows come from one of several ranges, scanned one after the other.
    salt = {"tsd.storage.salt.width": 1, "tsd.storage.salt.buckets": 3} if request.param else {}
    tsdb = make_tsdb({**tsd_config, "tsd.query.cache.max_bytes": 0, **salt})
    # "quiet" has a point long before the query (its UIDs), then only a note in range.
    quiet = DataPoint("fuse.m", BASE_S - 10 * HOUR_S, 1, {"host": "quiet", "dc": "dc1"})
    assert not any(PointWriter(tsdb).write([*_points(), quiet]))
    client = app_over(tsdb).test_client()
    for host in ("web0", "quiet"):
        found = client.get(f"/api/query?start={BASE_S - 11 * HOUR_S}&end={END_S}"
                           f"&m=sum:fuse.m{{host={host}}}&show_tsuids").get_json()
        note = {"tsuid": found[0]["tsuids"][0], "startTime": BASE_S + 1800,
                "description": f"deploy {host}"}
        assert client.post("/api/annotation", json=note).status_code == 200
    yield tsdb
    drop_tables(tsdb)


@pytest.fixture
def client(store: TSDB) -> FlaskClient:
    return app_over(store).test_client()


def _answer(client: FlaskClient, m: str, start_s: int, end_s: int) -> Any:
    response = client.get(f"/api/query?start={start_s}&end={end_s}&m={m}&show_summary"
                          "&show_tsuids")
    body = response.get_json()
    if response.status_code != 200:
        return response.status_code, body
    for item in body:  # timings differ from run to run
        stats = item.get("statsSummary")
        if stats is not None:
            item["statsSummary"] = {k: v for k, v in stats.items() if "Time" not in k
                                    and not isinstance(v, dict)} | {
                k: {kk: vv for kk, vv in v.items() if "Time" not in kk}
                for k, v in stats.items() if isinstance(v, dict)}
    return json.dumps(body, sort_keys=True)


QUERIES = [
    "sum:1m-avg:fuse.m",
    "avg:1m-avg:fuse.m{host=*}",
    "sum:5m-sum-zero:fuse.m{dc=*}",
    "max:10m-max-nan:fuse.m{dc=dc1}",
    "min:15m-min-null:fuse.m",
    "none:1h-count:fuse.m",
    "none:30s-avg-zero:fuse.m{host=web*}",
    "sum:1m-avg:rate:fuse.m{dc=*}",
    "avg:5m-max:rate{counter,,1000}:fuse.m{host=web1|web3}",
    "zimsum:1m-sum-nan:rate{counter,1000,10}:fuse.m",
    "sum:10s-last:fuse.m{host=web5}",
    "sum:20m-dev:fuse.m{host=web2}",
    "count:2m-p95:fuse.m{dc=dc0}",
]


@pytest.mark.parametrize("m", QUERIES)
@pytest.mark.parametrize("chunk_rows", [1, 3, fused_read.CHUNK_ROWS])
def test_fused_answers_as_the_whole_series_path(client: FlaskClient, m: str, chunk_rows: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    start_s, end_s = BASE_S + 1800, END_S - 1200  # the scan window is wider than the query
    monkeypatch.setattr(fused_read, "CHUNK_ROWS", chunk_rows)
    fused = _answer(client, m, start_s, end_s)
    with monkeypatch.context() as patch:
        patch.setattr(plan_module, "fusable", lambda spec: False)
        whole = _answer(client, m, start_s, end_s)
    assert isinstance(fused, str), fused
    assert fused == whole


def test_the_read_downsamples_and_lets_the_raw_points_go(
        store: TSDB, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fused_read, "CHUNK_ROWS", 2)
    spec = Downsample("1m-avg", 60_000, 1, "m", "avg")
    reader = SeriesReader(store)
    series = reader.read(SubQuery("sum", metric="fuse.m", downsample=spec),
                         BASE_S * 1000, END_S * 1000 - 1)
    assert series and all(isinstance(s, StagedSeries) for s in series)
    # 4 hours of 6 series, less web2's missing hour, "late"'s one hour, "quiet"'s note row
    assert reader.stats.rows == 6 * 4 - 1 + 1 + 1
    assert sorted(s.tags["host"] for s in series if not s.raw_points) == ["quiet"]
    late = [s for s in series if s.tags["host"] == "late"][0]
    assert late.raw_points == 120 and late.ts_ms.size == 60
    # one buffer, series after series: the engine joins them without a copy
    bases = {id(s.ts_ms.base) for s in series}
    assert len(bases) == 1 and not series[0].ts_ms.flags.writeable


def test_only_buckets_inside_an_hour_row_are_fused() -> None:
    def spec(text: str, interval_ms: int, **kw: Any) -> Downsample:
        return Downsample(text, interval_ms, 1, "m", "avg", **kw)
    assert fusable(spec("1m-avg", 60_000)) and fusable(spec("1h-avg", 3_600_000))
    assert not fusable(spec("7m-avg", 420_000))  # a bucket across two rows
    assert not fusable(spec("2h-avg", 7_200_000))
    assert not fusable(spec("1dc-avg", 86_400_000, calendar=True))
    assert not fusable(spec("0all-avg", 0, run_all=True))
    assert not fusable(None)


def test_the_point_limit_stops_a_fused_read(tsd_config: dict[str, Any],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fused_read, "CHUNK_ROWS", 2)
    tsdb = make_tsdb({**tsd_config, "tsd.query.cache.max_bytes": 0,
                      "tsd.query.limits.data_points.default": 1000})
    try:
        assert not any(PointWriter(tsdb).write(_points()))
        client = app_over(tsdb).test_client()
        response = client.get(f"/api/query?start={BASE_S}&end={END_S}&m=sum:1m-avg:fuse.m")
        assert response.status_code >= 400
        assert "limit of 1000 data points" in response.get_json()["error"]["message"]
    finally:
        drop_tables(tsdb)


def test_a_limit_error_closes_the_scan(store: TSDB, monkeypatch: pytest.MonkeyPatch) -> None:
    closed = []

    def rows() -> Iterator[tuple[bytes, Any]]:
        try:
            yield from store.data_table().scan(columns=[b"t"])
        finally:
            closed.append(True)
    from app.engine.downsample import Window
    from app.query.limits import QueryLimits

    sub = SubQuery("sum", metric="fuse.m", downsample=Downsample("1m-avg", 60_000, 1, "m", "avg"))
    reader = SeriesReader(store, QueryLimits(data_points=10),
                          plan=plan_read(store, sub, BASE_S * 1000, END_S * 1000))
    with pytest.raises(QueryLimitError):
        fused_read.read_fused(reader, rows(),
                              Window(BASE_S * 1000, END_S * 1000, BASE_S * 1000, END_S * 1000))
    assert closed == [True]
