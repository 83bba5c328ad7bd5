"""``POST /api/rollup`` and rollup reads, on both backends, through the real app.

The bytes written are checked against the layout 2.4's ``TSDB#addAggregatePoint`` produces
(row key with the interval's row-span base time, 3-byte qualifier with the aggregator ID);
queries then read them back through the planner, with each ``rollupUsage``.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.tsdb import TSDB
from app.tsdb.rollups import compute_rollups
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import app_over
from tests.rollup_fixtures import ROLLUP_SETTINGS

DAY = 1370476800  # Thu, 06 Jun 2013 00:00:00 GMT
HOUR = DAY + 15 * 3600


@pytest.fixture
def rollup_tsdb(tsd_config: dict[str, Any], request: pytest.FixtureRequest) -> TSDB:
    tsd_config.update(ROLLUP_SETTINGS)
    tsdb: TSDB = request.getfixturevalue("tsdb")
    return tsdb


@pytest.fixture
def rollup_client(rollup_tsdb: TSDB) -> FlaskClient:
    return app_over(rollup_tsdb).test_client()


def _post(client: FlaskClient, body: Any, query: str = "") -> Any:
    return client.post(f"/api/rollup{query}", data=json.dumps(body))


def _cells(tsdb: TSDB, table: str) -> list[tuple[bytes, bytes, bytes]]:
    return [(key, column, value) for key, row in tsdb.table(table).scan()
            for column, value in sorted(row.items())]


def test_rollup_point_bytes(rollup_client: FlaskClient, rollup_tsdb: TSDB) -> None:
    response = _post(rollup_client, [
        {"metric": "sys.cpu", "timestamp": HOUR + 1800, "value": 42, "tags": {"host": "a"},
         "interval": "10m", "aggregator": "sum"},
        {"metric": "sys.cpu", "timestamp": HOUR + 1800, "value": 1.5, "tags": {"host": "a"},
         "interval": "10m", "aggregator": "MAX"}])
    assert response.status_code == 204, response.get_data(as_text=True)
    # metric 000001, base time = the day (rowSpan 1d), host=a as 000001/000001
    key = b"\x00\x00\x01" + DAY.to_bytes(4, "big") + b"\x00\x00\x01\x00\x00\x01"
    offset = (15 * 6 + 3) << 4  # 15:30 is the 93rd ten-minute interval of the day
    # 1.5 fits in 4 bytes, but 2.4's HTTP path stores every float as an 8-byte double
    assert _cells(rollup_tsdb, "tsdb-rollup-10m") == [
        (key, b"t:\x00" + offset.to_bytes(2, "big"), b"\x2a"),
        (key, b"t:\x03" + (offset | 0xF).to_bytes(2, "big"), b"\x3f\xf8" + bytes(6))]
    assert _cells(rollup_tsdb, "tsdb-rollup-agg-10m") == []


def test_pre_aggregate_point_bytes(rollup_client: FlaskClient, rollup_tsdb: TSDB) -> None:
    response = _post(rollup_client, [
        {"metric": "sys.cpu", "timestamp": HOUR + 5, "value": 7, "tags": {"dc": "x"},
         "groupByAggregator": "sum"},
        {"metric": "sys.cpu", "timestamp": HOUR, "value": 9, "tags": {"dc": "x"},
         "interval": "1h", "aggregator": "max", "groupByAggregator": "sum"}])
    assert response.status_code == 204, response.get_data(as_text=True)
    # the _aggregate=SUM tag is added; without an interval: the default interval's table,
    # in raw-point layout (hour row, 2-byte qualifier)
    metric = rollup_tsdb.metrics.get_id("sys.cpu")
    tags = sorted([(rollup_tsdb.tagk.get_id("dc"), rollup_tsdb.tagv.get_id("x")),
                   (rollup_tsdb.tagk.get_id("_aggregate"), rollup_tsdb.tagv.get_id("SUM"))])
    tag_bytes = b"".join(k + v for k, v in tags)
    assert _cells(rollup_tsdb, "tsdb-preagg") == [
        (metric + HOUR.to_bytes(4, "big") + tag_bytes, b"t:\x00\x50", b"\x07")]
    assert _cells(rollup_tsdb, "tsdb-rollup-agg-1h") == [
        (metric + DAY.to_bytes(4, "big") + tag_bytes, b"t:\x03\x00\xf0", b"\x09")]


@pytest.mark.parametrize(("point", "error"), [
    ({"interval": "5m", "aggregator": "sum"}, "No rollup interval found for: 5m"),
    ({"interval": "1h", "aggregator": "avg"}, "Derived rollup aggregations are not allowed"),
    ({"interval": "1h", "aggregator": "median"}, "No ID found mapping to aggregator: median"),
    ({"interval": "1h"}, "Missing the rollup aggregator"),
    ({}, "Interval cannot be null for a non-group by point"),
    ({"groupByAggregator": "dev"}, "Derived group by aggregations are not allowed"),
    ({"groupByAggregator": "nope"}, "Invalid group by aggregator nope"),
    ({"timestamp": HOUR * 1000, "interval": "1h", "aggregator": "sum"}, "bad timestamp"),
])
def test_bad_points_fail_alone(rollup_client: FlaskClient, point: dict[str, Any],
                               error: str) -> None:
    good = {"metric": "m", "timestamp": HOUR, "value": 1, "tags": {"h": "a"},
            "interval": "1h", "aggregator": "sum"}
    bad = {"metric": "m", "timestamp": HOUR, "value": 1, "tags": {"h": "a"}, **point}
    response = _post(rollup_client, [good, bad], "?details")
    assert response.status_code == 400
    body = response.get_json()
    assert (body["success"], body["failed"]) == (1, 1)
    assert error in body["errors"][0]["error"]


def test_rollup_without_rollups_configured(client: FlaskClient) -> None:
    response = _post(client, {"metric": "m", "timestamp": HOUR, "value": 1,
                              "tags": {"h": "a"}, "interval": "1h", "aggregator": "sum"})
    assert response.status_code == 400
    assert response.get_json()["error"]["message"] == "No rollup or aggregations were configured"


def _query(client: FlaskClient, m: str, start: int = DAY, end: int = DAY + 3 * 3600 - 1) -> Any:
    response = client.get(f"/api/query?start={start}&end={end}&m={m}")
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def _load_hours(tsdb: TSDB, hours: int = 3) -> None:
    points = [DataPoint("m", ts, (ts - DAY) // 10 % 6, {"host": host})
              for host in ("a", "b") for ts in range(DAY, DAY + hours * 3600, 10)]
    assert not any(PointWriter(tsdb).write(points))


def test_queries_read_rollups_not_raw(rollup_client: FlaskClient, rollup_tsdb: TSDB) -> None:
    _load_hours(rollup_tsdb)
    compute_rollups(rollup_tsdb, DAY, DAY + 3 * 3600)
    before = _query(rollup_client, "sum:1h-avg:m")
    # Drop the raw rows: what the rollups answer must not change; raw reads now see nothing.
    table = rollup_tsdb.data_table()
    for key, _ in list(table.scan()):
        table.delete(key)
    assert _query(rollup_client, "sum:1h-avg:m") == before
    # each host cycles 0..5 every minute: 2.5 on average, 5.0 summed over both hosts
    assert before[0]["dps"] == {str(DAY): 5.0, str(DAY + 3600): 5.0, str(DAY + 7200): 5.0}
    assert _query(rollup_client, "sum:rollup_raw:1h-avg:m") == []
    # Per host, 10-minute sums and 2-hour maxima come from the 10m and 1h tables.
    sums = _query(rollup_client, "sum:10m-sum:m{host=a}")[0]["dps"]
    assert len(sums) == 18 and sums[str(DAY)] == 150.0  # 60 points: ten 0..5 cycles
    assert _query(rollup_client, "max:2h-max:m")[0]["dps"] == {str(DAY): 5.0,
                                                               str(DAY + 7200): 5.0}


def test_rerolling_replaces_a_cell_whose_width_changed(rollup_client: FlaskClient,
                                                       rollup_tsdb: TSDB) -> None:
    writer = PointWriter(rollup_tsdb)
    assert not any(writer.write([DataPoint("m", DAY, 5, {"host": "a"})]))
    compute_rollups(rollup_tsdb, DAY, DAY + 3600)  # the first 10 minutes sum to 5: 1 byte
    assert not any(writer.write([DataPoint("m", DAY + 10, 1000, {"host": "a"})]))
    compute_rollups(rollup_tsdb, DAY, DAY + 3600)  # now 1005: 2 bytes, flags 0x1
    sum_id = rollup_tsdb.rollup_config.aggregation_ids["sum"]
    sums = [(column, value) for _, column, value in _cells(rollup_tsdb, "tsdb-rollup-10m")
            if column[2] == sum_id]
    assert sums == [(b"t:" + bytes([sum_id]) + b"\x00\x01", b"\x03\xed")]
    assert _query(rollup_client, "sum:10m-sum:m")[0]["dps"] == {str(DAY): 1005}


def test_usage_modes_when_rollups_are_missing(rollup_client: FlaskClient,
                                              rollup_tsdb: TSDB) -> None:
    _load_hours(rollup_tsdb)
    # Only the 1m table is filled: a 1h downsample's best match (1h) is empty.
    from app.tsdb.rollups import rollup_cells

    one_minute = next(i for i in rollup_tsdb.rollup_config.rollups() if i.interval == "1m")
    compute_one_interval(rollup_tsdb, one_minute, rollup_cells)
    raw = _query(rollup_client, "sum:rollup_raw:1h-sum:m")
    assert _query(rollup_client, "sum:1h-sum:m") == []  # NOFALLBACK: the 1h table is empty
    assert _query(rollup_client, "sum:rollup_nofallback:1h-sum:m") == []
    assert _query(rollup_client, "sum:rollup_fallback_raw:1h-sum:m") == raw
    assert _query(rollup_client, "sum:rollup_fallback:1h-sum:m") == raw  # via the 1m table
    assert _query(rollup_client, "sum:rollup_unknown:1h-sum:m") == []  # the default usage


def compute_one_interval(tsdb: TSDB, interval: Any, rollup_cells: Any) -> None:
    from app.query.ast import SubQuery
    from app.tsdb.reader import SeriesReader

    layout_start = tsdb.layout.salt_width + tsdb.layout.metric_width
    for series in SeriesReader(tsdb).read(SubQuery("none", metric="m"), DAY,
                                          DAY + 3 * 3600 - 1):
        rows = rollup_cells(series, interval, tsdb.rollup_config.aggregation_ids, layout_start)
        tsdb.table(interval.table).put_many(sorted(rows.items()))


def test_open_hours_come_from_raw(rollup_tsdb: TSDB) -> None:
    """Hours after the rollup horizon are read raw, the closed ones from rollups."""
    import time

    now = int(time.time())
    start = now - now % 3600 - 3 * 3600
    points = [DataPoint("m", ts, 1, {"host": "a"}) for ts in range(start, now, 60)]
    assert not any(PointWriter(rollup_tsdb).write(points))
    lag_s = rollup_tsdb.config["tsd.rollups.compute.lag_s"]
    horizon = now - lag_s - (now - lag_s) % 3600
    compute_rollups(rollup_tsdb, start, horizon)
    client = app_over(rollup_tsdb).test_client()
    both = _query(client, "sum:1h-sum:m", start=start, end=now)
    assert both == _query(client, "sum:rollup_raw:1h-sum:m", start=start, end=now)
    # Raw rows before the horizon are not read: deleting them changes nothing.
    table = rollup_tsdb.data_table()
    for key, _ in list(table.scan()):
        if int.from_bytes(key[3:7], "big") < horizon:
            table.delete(key)
    assert _query(client, "sum:1h-sum:m", start=start, end=now) == both


def test_old_prefixed_cells_are_read(rollup_client: FlaskClient, rollup_tsdb: TSDB) -> None:
    """2.4 still reads the older ``sum:``/``count:`` + 2-byte qualifier layout; so does pytsd."""
    _post(rollup_client, {"metric": "m", "timestamp": DAY, "value": 0, "tags": {"host": "a"},
                          "interval": "1h", "aggregator": "sum"})  # assigns the UIDs
    table = rollup_tsdb.table("tsdb-rollup-1h")
    key, column, _ = _cells(rollup_tsdb, "tsdb-rollup-1h")[0]
    table.delete(key, [column])
    # hour 0: sum 10 (1-byte int), count 4; hour 1: sum 9.0 (8-byte double, flags 0xF), count 3
    table.put(key, {b"t:sum:\x00\x00": b"\x0a", b"t:count:\x00\x00": b"\x04",
                    b"t:sum:\x00\x1f": struct.pack(">d", 9.0), b"t:count:\x00\x10": b"\x03"})
    assert _query(rollup_client, "sum:1h-avg:m")[0]["dps"] == {str(DAY): 2.5,
                                                              str(DAY + 3600): 3.0}
    assert _query(rollup_client, "sum:1h-sum:m")[0]["dps"] == {str(DAY): 10.0,
                                                              str(DAY + 3600): 9.0}


def test_background_pass_rolls_up_hours_as_they_close(rollup_tsdb: TSDB) -> None:
    from app.tsdb.rollups import RollupPass

    _load_hours(rollup_tsdb, hours=3)
    lag_s = rollup_tsdb.config["tsd.rollups.compute.lag_s"]
    rollup_pass = RollupPass(rollup_tsdb)
    # Just after the third hour closed: the pass starts with that hour, then backfills the
    # two hours before it (the oldest raw hour is DAY).
    first = rollup_pass.run_once(now_s=DAY + 3 * 3600 + lag_s)
    # two hosts, three hours of 360 points, read once for each of the 1m, 10m and 1h tables
    assert first.points_read == 3 * 2 * 360 * 3
    stamps = {int.from_bytes(key[3:7], "big") for key, _, _ in
              _cells(rollup_tsdb, "tsdb-rollup-1m") if b"pytsd.rollup" not in key}
    assert stamps == {DAY, DAY + 3600, DAY + 2 * 3600}  # hour rows
    assert rollup_pass.run_once(now_s=DAY + 3 * 3600 + lag_s + 60).cells_written == 0
    client = app_over(rollup_tsdb).test_client()
    hour = {"start": DAY + 2 * 3600, "end": DAY + 3 * 3600 - 1}
    for m in ("sum:1m-sum:m", "sum:10m-avg:m", "max:1h-max:m{host=*}"):
        rolled = _query(client, m, **hour)
        assert rolled and rolled == _query(client, m.replace(":", ":rollup_raw:", 1), **hour)


def test_pre_aggregates_are_read_from_their_tables(rollup_client: FlaskClient) -> None:
    points = [{"metric": "m", "timestamp": DAY + 60 * i, "value": 10 + i, "tags": {"dc": "x"},
               "groupByAggregator": "sum"} for i in range(3)]
    points += [{"metric": "m", "timestamp": DAY + 3600 * h, "value": 100 * h + 1,
                "tags": {"dc": "x"}, "interval": "1h", "aggregator": agg,
                "groupByAggregator": "sum"}
               for h in range(2) for agg in ("sum", "count")]
    points.append({"metric": "m", "timestamp": DAY, "value": 5, "tags": {"dc": "x"}})
    assert _post(rollup_client, points[:-1]).status_code == 204
    raw = rollup_client.post("/api/put", data=json.dumps(points[-1]))
    assert raw.status_code == 204
    window = {"start": DAY, "end": DAY + 7199}
    expected = {str(DAY): 10, str(DAY + 60): 11, str(DAY + 120): 12}
    by_flag = _query(rollup_client, "sum:pre-agg:m{dc=x}", **window)
    assert [(s["tags"], s["dps"]) for s in by_flag] == [({"dc": "x", "_aggregate": "SUM"},
                                                         expected)]
    # A literal filter on _aggregate asks for pre-aggregates too (TsdbQuery#resolveTagFilters).
    assert _query(rollup_client, "sum:m{_aggregate=SUM}", **window) == by_flag
    # With a downsample that has a rollup interval: that interval's pre-aggregate table.
    hourly = _query(rollup_client, "sum:pre-agg:1h-avg:m", **window)
    assert hourly[0]["dps"] == {str(DAY): 1.0, str(DAY + 3600): 1.0}  # sum/count per hour
    # Without the flag: raw data only.
    assert _query(rollup_client, "sum:rollup_raw:m", **window)[0]["dps"] == {str(DAY): 5}


def test_json_door_takes_rollup_usage(rollup_client: FlaskClient, rollup_tsdb: TSDB) -> None:
    _load_hours(rollup_tsdb, hours=1)
    compute_rollups(rollup_tsdb, DAY, DAY + 3600)
    table = rollup_tsdb.data_table()
    for key, _ in list(table.scan()):
        table.delete(key)  # only the rollups are left

    def post(usage: str | None) -> Any:
        sub = {"aggregator": "sum", "metric": "m", "downsample": "10m-avg"}
        if usage:
            sub["rollupUsage"] = usage
        body = {"start": DAY, "end": DAY + 3599, "showQuery": True, "queries": [sub]}
        response = rollup_client.post("/api/query", data=json.dumps(body))
        assert response.status_code == 200, response.get_data(as_text=True)
        return response.get_json()

    rolled = post(None)
    assert len(rolled[0]["dps"]) == 6
    assert (rolled[0]["query"]["rollupUsage"], rolled[0]["query"]["preAggregate"]) == \
        (None, False)
    assert post("rollup_raw") == []
    assert post("ROLLUP_FALLBACK_RAW")[0]["query"]["rollupUsage"] == "ROLLUP_FALLBACK_RAW"
