"""A ``count`` downsample answered from rollup tables: each bucket is the sum of the rollups'
count cells (OpenTSDB 2.4 counts the rollup points instead; docs/differences.md), the raw
rows after the rollup horizon counted point by point, and the two joined without the rollup
buckets being counted again. The metric here has no raw points where the rollups are, so
before rollups answered counts these queries answered nothing. Every expected value is the
sum of the count cells written below, worked out by hand from their rule."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.tsdb import TSDB
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import app_over
from tests.rollup_fixtures import ROLLUP_SETTINGS

DAY0 = 1370476800  # 2013-06-06 00:00 UTC: a day row of the 1h rollup table starts here
HOSTS = {"a": 1, "b": 2}


def _count(host: int, hour: int) -> int:
    """The count cell of ``host`` at ``hour`` of DAY0 (a rule simple to add up by hand)."""
    return host * 10 + hour


def _post(client: FlaskClient, points: list[dict[str, Any]]) -> None:
    response = client.post("/api/rollup", data=json.dumps(points))
    assert response.status_code == 204, response.get_data(as_text=True)


def _cells(host: str, hours: range, base_s: int = DAY0) -> list[dict[str, Any]]:
    return [{"metric": "m", "timestamp": base_s + hour * 3600, "value": value,
             "tags": {"host": host}, "interval": "1h", "aggregator": aggregator}
            for hour in hours
            for aggregator, value in (("sum", 1000 + hour), ("count", _count(HOSTS[host], hour)))]


@pytest.fixture(params=["cache off", "cache on"])
def client(tsd_config: dict[str, Any], request: pytest.FixtureRequest) -> FlaskClient:
    tsd_config.update({**ROLLUP_SETTINGS, "tsd.rollups.compute.lag_s": 0})
    if request.param == "cache off":
        tsd_config["tsd.query.cache.max_bytes"] = 0
    tsdb: TSDB = request.getfixturevalue("tsdb")
    # The metric's UID, from a raw point far before every query here.
    assert not any(PointWriter(tsdb).write([DataPoint("m", DAY0 - 86400, 1, {"host": "a"})]))
    return app_over(tsdb).test_client()


def _query(client: FlaskClient, start: int, end: int, m: str) -> dict[str, dict[str, float]]:
    response = client.get(f"/api/query?start={start}&end={end}&m={m}")
    assert response.status_code == 200, response.get_data(as_text=True)
    return {series["tags"].get("host", "*"): series["dps"] for series in response.get_json()}


@pytest.mark.parametrize("backend", ["sqlite", "hbase"], indirect=True)
def test_a_count_from_rollups_sums_their_count_cells(client: FlaskClient) -> None:
    for host in HOSTS:
        _post(client, _cells(host, range(24)))
    hour = 3600
    # 2-hour buckets from 04:00 to 09:59: host a's counts 14+15, 16+17, 18+19.
    assert _query(client, DAY0 + 4 * hour, DAY0 + 10 * hour - 1, "sum:2h-count:m{host=a}") == {
        "a": {str(DAY0 + 4 * hour): 29.0, str(DAY0 + 6 * hour): 33.0,
              str(DAY0 + 8 * hour): 37.0}}
    # Both hosts summed, hourly: (10 + h) + (20 + h) at 00:00, 01:00, 02:00.
    assert _query(client, DAY0, DAY0 + 3 * hour - 1, "sum:1h-count:m") == {
        "*": {str(DAY0): 30.0, str(DAY0 + hour): 32.0, str(DAY0 + 2 * hour): 34.0}}
    # Grouped by host, a whole day in one bucket of 24 h: sum of (10 * host + h), h = 0..23.
    assert _query(client, DAY0, DAY0 + 86400 - 1, "sum:1d-count:m{host=*}") == {
        "a": {str(DAY0): 240.0 + 276.0}, "b": {str(DAY0): 480.0 + 276.0}}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_count_joins_rollup_counts_and_the_raw_points_after_the_horizon(
        client: FlaskClient, tsdb: TSDB) -> None:
    now = time.time()
    if now % 3600 > 3600 - 10:  # keep the whole test inside one hour
        time.sleep(3600 - now % 3600 + 1)
        now = time.time()
    this_hour = int(now) - int(now) % 3600
    if int(now) - this_hour < 4:
        time.sleep(4 - (int(now) - this_hour))
    first = this_hour - 3 * 3600
    # The three closed hours from rollups only (counts 10, 11, 12 for host a) ...
    _post(client, _cells("a", range(3), base_s=first))
    # ... and three raw points in the open hour, which has no rollup yet.
    raw = [DataPoint("m", this_hour + second, 5, {"host": "a"}) for second in (0, 1, 2)]
    assert not any(PointWriter(tsdb).write(raw))
    answer = _query(client, first, this_hour + 3599, "sum:1h-count:m{host=a}")
    assert answer == {"a": {str(first): 10.0, str(first + 3600): 11.0,
                            str(first + 7200): 12.0, str(this_hour): 3.0}}
    # The same joined buckets through a rate: the differences of the counts per second.
    rated = _query(client, first, this_hour + 3599, "sum:1h-count:rate:m{host=a}")
    assert rated == {"a": {str(first + 3600): pytest.approx(1 / 3600),
                           str(first + 7200): pytest.approx(1 / 3600),
                           str(this_hour): pytest.approx(-9 / 3600)}}
