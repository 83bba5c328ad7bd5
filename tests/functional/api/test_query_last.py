"""/api/query/last without tsdb-meta (spec §7.9, case G57, TestQueryRpcLastDataPoint).

Series written through /api/put into an empty store, relative to the current hour ``H``
(UIDs in write order: sys.cpu.user 000001, host 000001, web01 000001, web02 000002,
sys.cpu.system 000002):

    A sys.cpu.user{host=web01}    H-1h+100 -> 7, H -> 41, H+1 -> 42     last: H+1, "42"
    B sys.cpu.user{host=web02}    H-5h -> 3.5                           last: H-5h, "3.5"
    C sys.cpu.system{host=web01}  H-1h -> 0.1 (an 8-byte double)        last: H-1h, "0.1"
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.storage import codec
from app.tsdb import TSDB
from app.tsdb.last import LastPoint, LastQuery, last_points
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import app_over, drop_tables, make_tsdb

HOUR = 3600
A, B, C = "000001000001000001", "000001000001000002", "000002000001000001"


def current_hour() -> int:
    now = int(time.time())
    return now - now % HOUR


def put(client: FlaskClient, metric: str, tags: dict[str, str], ts: int, value: Any) -> None:
    point = {"metric": metric, "timestamp": ts, "value": value, "tags": tags}
    assert client.post("/api/put", json=point).status_code == 204


def write_abc(client: FlaskClient, hour: int) -> None:
    put(client, "sys.cpu.user", {"host": "web01"}, hour - HOUR + 100, 7)
    put(client, "sys.cpu.user", {"host": "web01"}, hour, 41)
    put(client, "sys.cpu.user", {"host": "web01"}, hour + 1, 42)
    put(client, "sys.cpu.user", {"host": "web02"}, hour - 5 * HOUR, 3.5)
    put(client, "sys.cpu.system", {"host": "web01"}, hour - HOUR, 0.1)


@pytest.fixture
def hour() -> int:
    return current_hour()


@pytest.fixture
def last_client(client: FlaskClient, hour: int) -> FlaskClient:
    write_abc(client, hour)
    return client


def point_a(hour: int) -> dict[str, Any]:
    return {"timestamp": (hour + 1) * 1000, "value": "42", "tsuid": A}


def point_b(hour: int) -> dict[str, Any]:
    return {"timestamp": (hour - 5 * HOUR) * 1000, "value": "3.5", "tsuid": B}


def point_c(hour: int) -> dict[str, Any]:
    return {"timestamp": (hour - HOUR) * 1000, "value": "0.1", "tsuid": C}


def last(client: FlaskClient, query: str, status: int = 200) -> Any:
    response = client.get(f"/api/query/last?{query}")
    assert response.status_code == status, response.get_data(as_text=True)
    return response.get_json()


def test_spec_back_scan_case(tsdb: TSDB) -> None:
    # TestQueryRpcLastDataPoint#qsMetricBackscan: (sys.cpu.user{host=web01}, 1356998400, 42),
    # now = 1356998400000, back_scan=1.
    PointWriter(tsdb).write([DataPoint("sys.cpu.user", 1356998400, 42, {"host": "web01"})])
    query = LastQuery(metric="sys.cpu.user", tags=(("host", "web01"),))
    assert last_points(tsdb, [query], 1, 1356998400000) == [
        LastPoint(bytes.fromhex(A), 1356998400000, 42.0, True)]
    by_tsuid = LastQuery(tsuids=(A,))
    assert last_points(tsdb, [by_tsuid], 1, 1356998400000)[0].timestamp_ms == 1356998400000
    # An hour later the point is one row back: back_scan=1 still reaches it, 0 rows back not.
    assert len(last_points(tsdb, [query], 1, 1357002000000)) == 1
    assert last_points(tsdb, [query], 0, 1357002000000) == []


def test_exact_series(last_client: FlaskClient, hour: int) -> None:
    assert last(last_client, "timeseries=sys.cpu.user{host=web01}&back_scan=1") == [
        point_a(hour)]


def test_resolve(last_client: FlaskClient, hour: int) -> None:
    # TestQueryRpcLastDataPoint#qsMetricBackscanResolved adds metric and tags.
    body = last(last_client, "timeseries=sys.cpu.user{host=web01}&back_scan=1&resolve")
    assert body == [{**point_a(hour), "metric": "sys.cpu.user", "tags": {"host": "web01"}}]


@pytest.mark.parametrize("timeseries", ["sys.cpu.user{host=*}", "sys.cpu.user",
                                        "sys.cpu.user{host=web01|web02}",
                                        "sys.cpu.user{host=web*}"])
def test_wildcards_and_filters(last_client: FlaskClient, hour: int, timeseries: str) -> None:
    # OpenTSDB answers [] here without tsdb-meta (issues #691, #1769).
    assert last(last_client, f"timeseries={timeseries}") == [point_a(hour), point_b(hour)]


def test_back_scan_counts_hours_before_the_current_one(last_client: FlaskClient,
                                                       hour: int) -> None:
    # back_scan=N reads the current hour row and N before it (TSUIDQuery#getLastPoint).
    assert last(last_client, "timeseries=sys.cpu.user&back_scan=4") == [point_a(hour)]
    assert last(last_client, "timeseries=sys.cpu.user&back_scan=5") == [point_a(hour),
                                                                          point_b(hour)]
    assert last(last_client, "tsuids=" + B + "&back_scan=4") == []
    assert last(last_client, "tsuids=" + B + "&back_scan=5") == [point_b(hour)]


def test_no_point_in_window(last_client: FlaskClient) -> None:
    assert last(last_client, "timeseries=sys.cpu.user{host=web02}&back_scan=1") == []


def test_tsuids(last_client: FlaskClient, hour: int) -> None:
    assert last(last_client, f"tsuids={A},{C}") == [point_a(hour), point_c(hour)]
    assert last(last_client, f"tsuids={C}&tsuids={A.lower()}") == [point_c(hour), point_a(hour)]


def test_several_queries_keep_their_order(last_client: FlaskClient, hour: int) -> None:
    body = last(last_client, "timeseries=sys.cpu.system{host=web01}"
                             "&timeseries=sys.cpu.user{host=web01}")
    assert body == [point_c(hour), point_a(hour)]


def test_post(last_client: FlaskClient, hour: int) -> None:
    body = {"queries": [{"metric": "sys.cpu.user", "tags": {"host": "web02"}},
                        {"tsuids": [C]}],
            "backScan": 6, "resolveNames": True}
    response = last_client.post("/api/query/last", json=body)
    assert response.status_code == 200
    assert response.get_json() == [
        {**point_b(hour), "metric": "sys.cpu.user", "tags": {"host": "web02"}},
        {**point_c(hour), "metric": "sys.cpu.system", "tags": {"host": "web01"}}]


def test_a_row_with_only_an_annotation_is_skipped(last_client: FlaskClient, tsdb: TSDB,
                                                  hour: int) -> None:
    # C's current-hour row holds only a note: the point is in the row before.
    key = tsdb.layout.row_key(b"\x00\x00\x02", hour, [(b"\x00\x00\x01", b"\x00\x00\x01")])
    note = json.dumps({"tsuid": C, "startTime": hour + 10, "description": "x"}).encode()
    tsdb.data_table().put(key, {b"t:" + codec.annotation_qualifier(hour + 10): note})
    assert last(last_client, "timeseries=sys.cpu.system") == [point_c(hour)]
    assert last(last_client, f"tsuids={C}") == [point_c(hour)]


def test_value_formats(last_client: FlaskClient, hour: int) -> None:
    put(last_client, "sys.mem", {"host": "web01"}, hour, 12345678901.5)
    put(last_client, "sys.mem", {"host": "web02"}, hour, -5000000000)
    body = last(last_client, "timeseries=sys.mem&back_scan=1")
    # Java's Double.toString for the double; a long prints as an integer.
    assert [p["value"] for p in body] == ["1.23456789015E10", "-5000000000"]


@pytest.mark.parametrize(("query", "message"), [
    ("", "Missing sub queries"),
    ("back_scan=1", "Missing sub queries"),
    ("timeseries=sys.cpu.user&back_scan=x", "Unable to parse back_scan parameter"),
    ("timeseries=sys.cpu.user&back_scan=-1", "Unable to parse back_scan parameter"),
    ("timeseries=sys.cpu.user&back_scan=9000", "back_scan 9000 is over the limit of 8760 hours"),
    ("timeseries=nope", "No such name for 'metrics': 'nope'"),
    ("timeseries=sys.cpu.user{host=web99}", "No such name for 'tagv': 'web99'"),
    ("timeseries=sys.cpu.user{nokey=web01}", "No such name for 'tagk': 'nokey'"),
    ("timeseries={host=web01}", "Missing metric"),
    ("timeseries=sys.cpu.user{", "Unable to parse query"),
    ("tsuids=XYZ", "Invalid TSUID: XYZ"),
    ("tsuids=00000100000100", "Invalid TSUID: 00000100000100"),
    ("tsuids=000001", "Invalid TSUID: 000001"),
])
def test_bad_get(last_client: FlaskClient, query: str, message: str) -> None:
    response = last_client.get(f"/api/query/last?{query}")
    assert response.status_code == 400
    assert response.get_json()["error"]["message"] == message


@pytest.mark.parametrize(("body", "message"), [
    ({}, "Missing sub queries"),
    ({"queries": []}, "Missing sub queries"),
    ({"queries": {"metric": "x"}}, "Unable to parse the given JSON"),
    ({"queries": [{}]}, "Missing metric"),
    ({"queries": [{"metric": "sys.cpu.user", "tags": ["host"]}]},
     "Unable to parse the given JSON"),
    ({"queries": [{"tsuids": [1]}]}, "Unable to parse the given JSON"),
    ({"queries": [{"metric": "sys.cpu.user"}], "backScan": "soon"},
     "Unable to parse back_scan parameter"),
    ([], "Unable to parse the given JSON"),
])
def test_bad_post(last_client: FlaskClient, body: Any, message: str) -> None:
    response = last_client.post("/api/query/last", json=body)
    assert response.status_code == 400
    assert response.get_json()["error"]["message"] == message


def test_wrong_verb(client: FlaskClient) -> None:
    assert client.delete("/api/query/last?timeseries=x").status_code == 405


@pytest.fixture
def salted_client(tsd_config: dict[str, Any]) -> Iterator[FlaskClient]:
    tsdb = make_tsdb({**tsd_config, "tsd.storage.salt.width": 1, "tsd.storage.salt.buckets": 3})
    app = app_over(tsdb)
    yield app.test_client()
    drop_tables(tsdb)


def test_salted_store(salted_client: FlaskClient, hour: int) -> None:
    write_abc(salted_client, hour)
    assert last(salted_client, "timeseries=sys.cpu.user") == [point_a(hour), point_b(hour)]
    assert last(salted_client, f"tsuids={C}") == [point_c(hour)]

