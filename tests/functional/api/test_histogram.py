"""``POST /api/histogram``, telnet ``histogram`` and histogram queries on both backends.

Expected cells are written by hand from OpenTSDB 2.4's layout (``0x06`` + offset qualifier,
codec id + Kryo bytes); expected query answers were checked against OpenTSDB 2.4.1
(``tests/differential/test_histograms.py`` compares many more).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.lineproto.session import TelnetSession
from app.tsdb import TSDB
from tests.conftest import app_over

T0 = 1356998400  # 2013-01-01T00:00:00Z, an hour boundary
CODECS = '{"net.opentsdb.core.SimpleHistogramDecoder": 0}'
ROW = b"\x00\x00\x01" + T0.to_bytes(4, "big")  # metric UID 1, base time


@pytest.fixture
def histo_tsdb(tsd_config: dict[str, Any], request: pytest.FixtureRequest) -> TSDB:
    tsd_config.update({"tsd.core.histograms.config": CODECS,
                       "tsd.core.auto_create_metrics": True})
    tsdb: TSDB = request.getfixturevalue("tsdb")
    return tsdb


@pytest.fixture
def client(histo_tsdb: TSDB) -> FlaskClient:
    return app_over(histo_tsdb).test_client()


def _post(client: FlaskClient, body: Any, query: str = "") -> tuple[int, Any]:
    response = client.post(f"/api/histogram{query}", data=json.dumps(body))
    text = response.get_data(as_text=True)
    return response.status_code, json.loads(text) if text else None


def _query(client: FlaskClient, body: dict[str, Any]) -> Any:
    response = client.post("/api/query", data=json.dumps({"start": T0, "end": T0 + 3600,
                                                          **body}))
    assert response.status_code == 200, response.get_data(as_text=True)
    return json.loads(response.get_data(as_text=True))


def _point(ts: int, buckets: dict[str, int], host: str = "a", **extra: Any) -> dict[str, Any]:
    return {"metric": "h.lat", "timestamp": ts, "buckets": buckets, "tags": {"host": host},
            **extra}


def test_buckets_are_stored_as_opentsdb_stores_them(client: FlaskClient,
                                                    histo_tsdb: TSDB) -> None:
    status, _ = _post(client, _point(T0 + 1, {"1,5": 10, "0,1": 300}, underflow=1, overflow=2))
    assert status == 204
    cells = list(histo_tsdb.data_table().scan())
    key = ROW + b"\x00\x00\x01\x00\x00\x01"  # host=a: tagk 1, tagv 1
    assert cells == [(key, {b"t:\x06\x00\x01": bytes.fromhex(
        "00" "0002" "00000000" "3f800000" "ac02" "3f800000" "40a00000" "0a" "01" "02")})]


def test_base64_value_and_telnet_store_the_same_bytes(client: FlaskClient,
                                                      histo_tsdb: TSDB) -> None:
    raw = bytes.fromhex("0001" "3f800000" "40000000" "05" "00" "02")
    status, _ = _post(client, {"metric": "h.lat", "timestamp": T0, "tags": {"host": "a"},
                               "id": 0, "value": base64.b64encode(raw).decode()})
    assert status == 204
    session = TelnetSession(client.application, "test")
    reply, closed = session.handle_lines([
        f"histogram h.lat {T0 + 1} o=2:1,2=5 host=a".encode(),
        f"histogram h.lat {T0 + 2} 0 {base64.b64encode(raw).decode()} host=a".encode(),
        f"histogram h.lat {T0}500 u=0:1,2=x host=a".encode(),
        b"histogram h.lat 1356998400 u=1",
        f"histogram h.lat {T0} 5 {base64.b64encode(raw).decode()} host=a".encode()])
    assert not closed
    assert reply.decode().splitlines() == [
        'histogram: HBase error: For input string: "x"',
        "histogram: illegal argument: not enough arguments (need least 5, got 3)",
        "histogram: HBase error: No codec found mapped to ID 5"]
    row = dict(histo_tsdb.data_table().scan())[ROW + b"\x00\x00\x01\x00\x00\x01"]
    assert row == {b"t:\x06\x00\x00": b"\x00" + raw, b"t:\x06\x00\x01": b"\x00" + raw,
                   b"t:\x06\x00\x02": b"\x00" + raw}


def test_errors_as_opentsdb_words_them(client: FlaskClient) -> None:
    status, body = _post(client, [
        _point(T0, {"0,1": 1}),
        {"metric": "h.lat", "timestamp": T0, "tags": {"host": "a"}},
        _point(T0, {"0-1": 1}),
        {"metric": "h.lat", "timestamp": T0, "tags": {"host": "a"}, "value": "AAE=", "id": 300},
        _point(T0, {"0,1": 1}, host="a b")], "?details")
    assert status == 400
    assert (body["success"], body["failed"]) == (1, 4)
    assert [e["error"] for e in body["errors"]] == [
        "Histogram buckets cannot be null or empty if 'value' is empty.",
        "Unable to parse bucket bounds: 0-1",
        "Invalid type. Must be from 0 to 255.",
        'Invalid tag value with key [host] ("a b"): illegal character:  ']
    response = client.get("/api/histogram")
    assert response.status_code == 405


def test_disabled_without_a_codec_config(tsdb: TSDB) -> None:
    client = app_over(tsdb).test_client()
    response = client.post("/api/histogram", data=json.dumps(_point(T0, {"0,1": 1})))
    assert response.status_code == 503
    assert "tsd.core.histograms.config" in response.get_json()["error"]["message"]
    reply, _ = TelnetSession(client.application, "t").handle_lines(
        [f"histogram h.lat {T0} 0,1=1 host=a".encode()])
    assert reply.decode().startswith("histogram: illegal argument: Histogram storage has not")


def _load(client: FlaskClient) -> None:
    points = [_point(T0, {"0,1": 5, "1,5": 10, "5,10": 1}, underflow=1, overflow=2),
              _point(T0 + 60, {"0,1": 1, "1,5": 1, "5,10": 10}, host="b"),
              _point(T0, {"0,1": 1}, host="b"),
              _point(T0 + 30, {"0,1": 4}, host="b")]
    assert _post(client, points)[0] == 204
    put = client.post("/api/put", data=json.dumps(
        {"metric": "h.lat", "timestamp": T0 + 5, "value": 42, "tags": {"host": "a"}}))
    assert put.status_code == 204


def test_percentiles_and_buckets(client: FlaskClient) -> None:
    _load(client)
    answer = _query(client, {"queries": [{"metric": "h.lat", "aggregator": "sum",
                                          "percentiles": [99.9, 50],
                                          "showHistogramBuckets": True}]})
    assert [(s["metric"], s["dps"]) for s in answer] == [
        ("h.lat_pct_50.0", {"1356998400": 3.0, "1356998430": 0.5, "1356998460": 7.5}),
        ("h.lat_pct_99.9", {"1356998400": 7.5, "1356998430": 0.5, "1356998460": 7.5}),
        ("h.lat_UNDERFLOW", {"1356998400": 1, "1356998430": 0, "1356998460": 0}),
        ("h.lat_0.0_1.0", {"1356998400": 6, "1356998430": 4, "1356998460": 1}),
        ("h.lat_1.0_5.0", {"1356998400": 10, "1356998430": 0, "1356998460": 1}),
        ("h.lat_5.0_10.0", {"1356998400": 1, "1356998430": 0, "1356998460": 10}),
        ("h.lat_OVERFLOW", {"1356998400": 2, "1356998430": 0, "1356998460": 0})]
    assert answer[0]["aggregateTags"] == ["host"] and answer[0]["tags"] == {}


def test_downsample_group_by_and_none(client: FlaskClient) -> None:
    _load(client)
    answer = _query(client, {"queries": [{"metric": "h.lat", "aggregator": "none",
                                          "downsample": "1m-sum", "percentiles": [50],
                                          "tags": {"host": "*"}}]})
    assert [(s["tags"], s["dps"]) for s in answer] == [
        ({"host": "a"}, {"1356998400": 3.0}),
        ({"host": "b"}, {"1356998400": 0.5, "1356998460": 7.5})]
    every = _query(client, {"queries": [{"metric": "h.lat", "aggregator": "sum",
                                         "downsample": "0all-sum", "percentiles": [50]}]})
    # pytsd: the sum of every histogram in range, at the start (OpenTSDB 2.4.1: no points)
    assert every[0]["dps"] == {"1356998400": 3.0}  # 11 + 11 + 11 counts: the middle one


def test_numeric_and_histogram_queries_keep_to_their_cells(client: FlaskClient) -> None:
    _load(client)
    numeric = _query(client, {"queries": [{"metric": "h.lat", "aggregator": "sum"}]})
    assert [s["dps"] for s in numeric] == [{"1356998405": 42}]
    histo = _query(client, {"queries": [{"metric": "h.lat", "aggregator": "sum",
                                         "percentiles": [50], "tags": {"host": "a"}}]})
    assert histo[0]["dps"] == {"1356998400": 3.0}


def test_query_validation(client: FlaskClient) -> None:
    cases = [("avg:percentiles[50]:h.lat",
              "Only NONE or SUM aggregation function supported for histogram query"),
             ("sum:1m-avg:percentiles[50]:h.lat",
              "Only SUM downsampling aggregation supported for histogram query"),
             ("sum:percentiles[101]:h.lat", "Invalid percentile parameters: 101.0"),
             ("sum:percentiles(5):h.lat",
              "Malformated percentile query paramater: percentiles(5)")]
    for m, message in cases:
        response = client.get(f"/api/query?start={T0}&m={m}")
        assert response.status_code == 400
        assert response.get_json()["error"]["message"] == message


def test_millisecond_and_second_points_come_out_in_time_order(client: FlaskClient) -> None:
    _post(client, [_point(T0 + 2, {"0,1": 1}), _point((T0 + 1) * 1000 + 500, {"1,5": 1}),
                   _point(T0 + 600, {"5,10": 1})])
    answer = _query(client, {"msResolution": True, "queries": [
        {"metric": "h.lat", "aggregator": "sum", "percentiles": [50]}]})
    assert list(answer[0]["dps"].items()) == [
        ("1356998401500", 3.0), ("1356998402000", 0.5), ("1356999000000", 7.5)]


def test_out_of_range_numbers_and_too_many_buckets_are_refused(client: FlaskClient) -> None:
    status, body = _post(client, [
        _point(T0, {"0,1": 2**63}),
        _point(T0, {f"{i},{i + 1}": 1 for i in range(32768)})], "?details")
    assert status == 400
    assert [e["error"] for e in body["errors"]] == [
        "Unable to parse the given JSON", "Too many histogram buckets: 32768 (at most 32767)"]
