"""Rollup reads from row column blocks (``sqlite_columns.put_blocks``, ``rollup_blocks``), the
hour cache off: a month-long read of the 1-hour table (day rows, blocks of four days) takes its
whole blocks as one blob each and its ends row by row. Every answer is the cells' (a month
with gaps, a partial row, a new series, a longer key, a range cut inside rows and blocks);
every change to a row of a block drops the block (seen by the next read); and a store from
before blocks (row columns only) opens and reads right, then keeps blocks."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.storage.base import SCAN_COLUMNS, able
from app.tsdb import TSDB
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import app_over, make_tsdb
from tests.rollup_fixtures import ROLLUP_SETTINGS

DAY0 = 1370476800  # Thu, 06 Jun 2013 00:00:00 GMT: two days before a 4-day block boundary
DAYS = 20
FIRST_BLOCK = DAY0 + 2 * 86400  # 1370649600 = 3966 * 345600
# The read: from day 1, 05:00 to day 17, 03:00 (inside rows and inside blocks).
START, END = DAY0 + 86400 + 5 * 3600, DAY0 + 17 * 86400 + 3 * 3600
pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def _sum(host: int, day: int, hour: int) -> int:
    return host * 100_000 + day * 100 + hour


def _hours(host: str) -> list[tuple[int, int]]:
    """The (day, hour) cells each series has: a whole month; b without day 5 and with half
    of day 12; c from day 9 on; d (one more tag: a longer key) days 3 and 14."""
    every = [(day, hour) for day in range(DAYS) for hour in range(24)]
    return {"a": every,
            "b": [(d, h) for d, h in every if d != 5 and not (d == 12 and h >= 12)],
            "c": [(d, h) for d, h in every if d >= 9],
            "d": [(d, h) for d, h in every if d in (3, 14)]}[host]


HOSTS = {"a": 1, "b": 2, "c": 3, "d": 4}


def _expected(host: str, start: int = START, end: int = END) -> dict[str, float]:
    """Each hour's average (the sum over a count of 2), written from the data's rule."""
    number = HOSTS[host]
    return {str(DAY0 + day * 86400 + hour * 3600): _sum(number, day, hour) / 2
            for day, hour in _hours(host)
            if start <= DAY0 + day * 86400 + hour * 3600 <= end}


def _post(client: FlaskClient, points: list[dict[str, Any]]) -> None:
    response = client.post("/api/rollup", data=json.dumps(points))
    assert response.status_code == 204, response.get_data(as_text=True)


def _tags(host: str) -> dict[str, str]:
    return {"host": host, "dc": "x"} if host == "d" else {"host": host}


@pytest.fixture
def month(tsd_config: dict[str, Any], request: pytest.FixtureRequest) -> TSDB:
    tsd_config.update({**ROLLUP_SETTINGS, "tsd.query.cache.max_bytes": 0})
    tsdb: TSDB = request.getfixturevalue("tsdb")
    assert not any(PointWriter(tsdb).write([DataPoint("m", DAY0, 1, {"host": "a"})]))
    client = app_over(tsdb).test_client()
    for host, number in HOSTS.items():
        hours = _hours(host)
        _post(client, [
            {"metric": "m", "timestamp": DAY0 + day * 86400 + hour * 3600, "value": value,
             "tags": _tags(host), "interval": "1h", "aggregator": aggregator}
            for day, hour in hours
            for aggregator, value in (("sum", _sum(number, day, hour)), ("count", 2))])
    return tsdb


def _by_host(client: FlaskClient, m: str = "sum:1h-avg:m{host=*}", start: int = START,
             end: int = END) -> dict[str, dict[str, float]]:
    response = client.get(f"/api/query?start={start}&end={end}&m={m}")
    assert response.status_code == 200, response.get_data(as_text=True)
    return {series["tags"]["host"]: series["dps"] for series in response.get_json()}


def _blocks(tsdb: TSDB) -> tuple[int, list[tuple[bytes, bytes]]]:
    """The read's whole blocks of the 1-hour table (days 2-6, 6-10, 10-14; its ends, days
    1-2 and 14-17, are read row by row): how many are kept, and those not kept."""
    config = tsdb.rollup_config
    assert config is not None
    columns = able(tsdb.table(config.by_interval("1h").table), SCAN_COLUMNS)
    assert columns is not None
    prefix = bytes(tsdb.layout.salt_width) + tsdb.metrics.get_id("m")
    blocks = [(prefix + (FIRST_BLOCK + n * 345600).to_bytes(4, "big"),
               prefix + (FIRST_BLOCK + (n + 1) * 345600).to_bytes(4, "big")) for n in range(3)]
    found = columns.scan_columns([], [0, 1], blocks)
    return len(found.blocks.get(0, [])), found.unbuilt


def test_a_month_with_gaps_is_read_from_blocks_as_from_the_cells(month: TSDB,
                                                                 settled: None) -> None:
    client = app_over(month).test_client()
    expected = {host: _expected(host) for host in HOSTS}
    assert expected["d"] and expected["c"] and str(DAY0 + 5 * 86400) not in expected["b"]
    assert _blocks(month)[0] == 0  # none before the first read
    assert _by_host(client) == expected  # from row columns, the blocks built after
    assert _blocks(month) == (3, [])
    assert _by_host(client) == expected  # from the blocks and the ends' rows
    # The sums and counts alone, and a group over every series, from the blocks too.
    assert _by_host(client, "sum:1h-sum:m{host=*}") == {
        host: {ts: value * 2 for ts, value in values.items()}
        for host, values in expected.items()}
    # With the hour cache on, a fresh TSDB's first read takes the rows from the blocks too
    # (each row kept by itself), the next from the cache.
    cached = app_over(make_tsdb({**month.config, "tsd.query.cache.max_bytes": 64 << 20}))
    assert _by_host(cached.test_client()) == expected
    assert _by_host(cached.test_client()) == expected
    # One whole block (days 6-10: full rows, one key length), and day 10's rows by row.
    start, end = FIRST_BLOCK + 4 * 86400, FIRST_BLOCK + 8 * 86400 - 1
    assert _by_host(client, start=start, end=end) == {
        host: _expected(host, start, end) for host in ("a", "b", "c")}
    everything = _by_host(client, "sum:1d-sum:m{host=c}", DAY0, DAY0 + DAYS * 86400 - 1)["c"]
    assert everything == {str(DAY0 + day * 86400): sum(_sum(3, day, h) for h in range(24))
                          for day in range(9, DAYS)}


def test_a_late_cell_a_new_series_and_a_deleted_row_drop_their_blocks(month: TSDB,
                                                                      settled: None) -> None:
    client = app_over(month).test_client()
    expected = {host: _expected(host) for host in HOSTS}
    assert _by_host(client) == expected
    assert _blocks(month)[1] == []
    # A late cell in host a's day 7 (the block of days 6-10): that block dropped alone. (Its
    # value as long as the one it replaces: a shorter one is another cell, summed with it.)
    late = DAY0 + 7 * 86400 + 3 * 3600
    _post(client, [{"metric": "m", "timestamp": late, "value": 10**6, "tags": {"host": "a"},
                    "interval": "1h", "aggregator": "sum"}])
    kept, unbuilt = _blocks(month)
    assert kept == 2 and [start[-4:] for start, _ in unbuilt] == [
        (FIRST_BLOCK + 345600).to_bytes(4, "big")]
    expected["a"][str(late)] = 500_000.0
    assert _by_host(client) == expected
    assert _by_host(client) == expected  # the block built again, then read
    assert _blocks(month)[1] == []
    # A new series in the block of days 10-14, and host b's day 15 deleted.
    _post(client, [{"metric": "m", "timestamp": DAY0 + 11 * 86400, "value": value,
                    "tags": {"host": "e"}, "interval": "1h", "aggregator": aggregator}
                   for aggregator, value in (("sum", 8), ("count", 4))])
    config = month.rollup_config
    assert config is not None
    table = month.table(config.by_interval("1h").table)
    host_b = month.tagv.get_id("b")
    day_15_b = next(key for key, _ in table.scan() if key.endswith(host_b)
                    and int.from_bytes(key[-10:-6], "big") == DAY0 + 15 * 86400)
    table.delete(day_15_b)
    for _ in range(2):
        expected["e"] = {str(DAY0 + 11 * 86400): 2.0}
        expected["b"] = {ts: v for ts, v in expected["b"].items()
                         if not DAY0 + 15 * 86400 <= int(ts) < DAY0 + 16 * 86400}
        assert _by_host(client) == expected


def test_a_store_from_before_blocks_opens_and_reads_right(month: TSDB, settled: None) -> None:
    """Row columns kept, but no blocks table nor its triggers (the layout before them)."""
    client = app_over(month).test_client()
    expected = {host: _expected(host) for host in HOSTS}
    assert _by_host(client) == expected
    path = str(month.config["tsd.storage"]).removeprefix("sqlite:///")
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript("DROP TRIGGER row_column_blocks_insert;"
                     " DROP TRIGGER row_column_blocks_update; DROP TABLE row_column_blocks;"
                     " DROP TABLE row_column_block_data;")
    db.close()
    reopened = make_tsdb(dict(month.config))
    again = app_over(reopened).test_client()
    assert _by_host(again) == expected  # row columns, then the blocks built
    assert _blocks(reopened) == (3, [])
    assert _by_host(again) == expected
    late = DAY0 + 13 * 86400
    _post(again, [{"metric": "m", "timestamp": late, "value": 2 * 10**6,
                   "tags": {"host": "c"}, "interval": "1h", "aggregator": "sum"}])
    expected["c"][str(late)] = 10**6
    assert _by_host(again) == expected  # the triggers are back: the block was dropped
