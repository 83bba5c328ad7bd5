"""/api/put: OpenTSDB's cells, statuses and messages (spec §7.6, PutDataPointRpc tests)."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.storage.codec_cells import COMPACTED, cell_points
from app.storage.sqlite import SqliteStore
from app.tsdb import TSDB
from tests import golden
from tests.conftest import app_over, make_tsdb

NICE = {"metric": "sys.cpu.nice", "timestamp": 1346846400, "value": 18,
        "tags": {"host": "web01"}}


def post(client: FlaskClient, body: Any, query: str = "", **kwargs: Any) -> Any:
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return client.post(f"/api/put{query}", data=data, **kwargs)


def data_cells(tsdb: TSDB) -> list[tuple[str, str, str]]:
    return [(row.hex().upper(), col.hex().upper(), val.hex().upper())
            for row, cells in tsdb.data_table().scan() for col, val in cells.items()]


def test_single_put_writes_exactly_opentsdbs_cells(client: FlaskClient, tsdb: TSDB) -> None:
    response = post(client, NICE)
    assert response.status_code == 204
    assert response.data == b""
    assert data_cells(tsdb) == [(golden.PUT_ROW.hex().upper(),
                                 (b"t:" + golden.PUT_QUALIFIER).hex().upper(),
                                 golden.PUT_VALUE.hex().upper())]
    uid_cells = {(row, col, val) for row, cells in tsdb.uid_table().scan()
                 for col, val in cells.items()}
    assert uid_cells == golden.PUT_UID_CELLS


@pytest.mark.parametrize(("value", "qualifier", "stored"), [
    (4711, "0001", "1267"),                    # 2-byte int, flags 0x1
    (-2, "0000", "FE"),                        # 1-byte two's complement
    (70000, "0003", "00011170"),               # 4-byte int
    (2**40, "0007", "0000010000000000"),       # 8-byte long
    # OpenTSDB's HTTP put calls addPoint(double) for every float (PutDataPointRpc's
    # `fitsInFloat ? Float.parseFloat : Double.parseDouble` promotes to double): 8 bytes,
    # flags 0x8|0x7, even where 4 would do (the telnet put writes 4 then).
    (42.5, "000F", "4045400000000000"),
    (42.2, "000F", "404519999999999A"),
    ("1.25", "000F", "3FF4000000000000"),      # strings with '.' are floats
    ("17", "0000", "11"),                      # strings without '.eE' are longs
])
def test_value_encodings(client: FlaskClient, tsdb: TSDB, value: Any, qualifier: str,
                         stored: str) -> None:
    assert post(client, {**NICE, "value": value}).status_code == 204
    [(_, column, cell)] = data_cells(tsdb)
    assert (column[4:], cell) == (qualifier, stored)


def test_millisecond_timestamp_uses_a_4_byte_qualifier(client: FlaskClient, tsdb: TSDB) -> None:
    assert post(client, {**NICE, "timestamp": 1346846400500}).status_code == 204
    [(row, column, value)] = data_cells(tsdb)
    # 0xF0000000 | (500 << 6) | flags 0 = F0007D00
    assert (row[6:14], column[4:], value) == ("50473EC0", "F0007D00", "12")


def test_array_gzip_summary(client: FlaskClient, tsdb: TSDB) -> None:
    body = gzip.compress(json.dumps([NICE, {**NICE, "timestamp": 1346846410}]).encode())
    response = post(client, body, "?summary", headers={"Content-Encoding": "gzip"})
    assert response.status_code == 200
    assert response.get_json() == {"success": 2, "failed": 0}
    # Both points stored (as two cells on HBase, one compacted cell on the embedded store)
    answer = client.get("/api/query?start=1346846400&end=1346846410&m=sum:sys.cpu.nice")
    assert answer.get_json()[0]["dps"] == {"1346846400": 18, "1346846410": 18}


def test_summary_bytes_are_opentsdbs(client: FlaskClient) -> None:
    """OpenTSDB 2.4.1 answers success before failed, compact, with no trailing newline."""
    response = post(client, [NICE, {**NICE, "metric": "bad metric!"}], "?summary")
    assert response.status_code == 400
    assert response.data == b'{"success":1,"failed":1}'


@pytest.mark.parametrize(("point", "message"), [
    ({**NICE, "metric": ""}, "Metric name was empty"),
    ({k: v for k, v in NICE.items() if k != "metric"}, "Metric name was empty"),
    ({**NICE, "timestamp": 0}, "Invalid timestamp"),
    ({**NICE, "timestamp": -1}, "Invalid timestamp"),
    ({k: v for k, v in NICE.items() if k != "timestamp"}, "Invalid timestamp"),
    ({**NICE, "value": ""}, "Empty value"),
    ({**NICE, "value": None}, "Empty value"),
    ({**NICE, "tags": {}}, "Missing tags"),
    ({**NICE, "value": "notanumber"}, "Unable to parse value to a number"),
    ({**NICE, "value": "NaN"}, "Unable to parse value to a number"),
    ({**NICE, "value": "Infinity"}, "Unable to parse value to a number"),
    ({**NICE, "metric": "a b"}, 'Invalid metric name ("a b"): illegal character:  '),
    ({**NICE, "tags": {f"k{i}": "v" for i in range(9)}}, "Too many tags: 9 maximum allowed: 8"),
])
def test_bad_points_are_reported_and_good_ones_kept(client: FlaskClient, tsdb: TSDB,
                                                    point: dict[str, Any], message: str) -> None:
    good = {**NICE, "timestamp": 1346846460}
    response = post(client, [point, good], "?details")
    assert response.status_code == 400
    body = response.get_json()
    assert (body["success"], body["failed"]) == (1, 1)
    assert body["errors"][0]["error"].startswith(message)
    assert len(data_cells(tsdb)) == 1


def test_json_nan_literal_is_rejected_per_point(client: FlaskClient, tsdb: TSDB) -> None:
    response = post(client, '[{"metric":"m","timestamp":1346846400,"value":NaN,'
                            '"tags":{"a":"b"}}]', "?details")
    assert response.status_code == 400
    assert response.get_json()["errors"][0] == {
        "error": "Unable to parse value to a number",
        "datapoint": {"metric": "m", "timestamp": 1346846400, "value": "NaN",
                      "tags": {"a": "b"}}}


@pytest.mark.parametrize("timestamp", ["Infinity", "NaN", '"soon"', "1.5e400"])
def test_unparseable_timestamps_are_invalid_not_a_crash(client: FlaskClient,
                                                       timestamp: str) -> None:
    body = '[{"metric":"m","timestamp":' + timestamp + ',"value":1,"tags":{"a":"b"}}]'
    response = post(client, body, "?details")
    assert response.status_code == 400
    assert response.get_json()["errors"][0]["error"] == "Invalid timestamp"


@pytest.mark.parametrize(("value", "message"), [
    ("18446744073709551616", "Unable to parse value to a number"),  # past what orjson takes
    ("9223372036854775808", "Unable to parse value to a number"),  # past a Java long
])
def test_integers_past_a_long_are_refused_per_point(client: FlaskClient, value: str,
                                                    message: str) -> None:
    body = '[{"metric":"m","timestamp":1346846400,"value":' + value + ',"tags":{"a":"b"}}]'
    response = post(client, body, "?details")
    assert response.status_code == 400
    assert response.get_json()["errors"][0]["error"] == message


def test_a_body_that_is_not_utf8_is_refused_per_point(client: FlaskClient,
                                                      tsdb: TSDB) -> None:
    """Not UTF-8 (a Latin-1 tag value): read with a replacement character, which no name
    may hold; the point is refused, the good one beside it stored."""
    body = (b'[{"metric":"m","timestamp":1346846400,"value":1,"tags":{"a":"caf\xe9"}},'
            b'{"metric":"m","timestamp":1346846400,"value":1,"tags":{"a":"cafe"}}]')
    response = post(client, body, "?details")
    assert response.status_code == 400
    errors = response.get_json()["errors"]
    assert [e["datapoint"]["tags"] for e in errors] == [{"a": "caf\ufffd"}]
    assert "tag value" in errors[0]["error"]
    assert len(data_cells(tsdb)) == 1


def test_errors_without_details_use_the_generic_message(client: FlaskClient) -> None:
    response = post(client, {**NICE, "value": "x"})
    assert response.status_code == 400
    assert response.get_json() == {"error": {
        "code": 400, "message": "One or more data points had errors",
        "details": 'Please see the TSD logs or append "details" to the put request'}}


@pytest.mark.parametrize(("body", "message"), [
    ("", "Missing request content"),
    ("metric", "The JSON must start as an object or an array"),
    ("{not json", "Unable to parse the given JSON"),
    ("[]", "No datapoints found in content"),
])
def test_bad_bodies(client: FlaskClient, body: str, message: str) -> None:
    response = post(client, body)
    assert response.status_code == 400
    assert response.get_json()["error"]["message"] == message


def test_get_is_not_allowed(client: FlaskClient) -> None:
    response = client.get("/api/put")
    assert response.status_code == 405
    assert response.get_json()["error"]["message"] == "Method not allowed"


def test_unknown_metric_without_auto_create(tsd_config: dict[str, Any]) -> None:
    tsdb = make_tsdb({**tsd_config, "tsd.core.auto_create_metrics": False})
    app = app_over(tsdb)
    response = app.test_client().post("/api/put?details", data=json.dumps(NICE))
    assert response.status_code == 400
    assert response.get_json()["errors"][0]["error"] == "Unknown metric"


def test_append_mode_writes_one_column_per_row(tsd_config: dict[str, Any]) -> None:
    tsdb = make_tsdb({**tsd_config, "tsd.storage.enable_appends": True})
    app = app_over(tsdb)
    points = [{**NICE, "timestamp": 1346846400 + i, "value": i} for i in (0, 1)]
    assert app.test_client().post("/api/put", data=json.dumps(points)).status_code == 204
    # Append column 0x050000 holds qualifier+value pairs: 0000 00, 0010 01.
    assert data_cells(tsdb) == [("00000150473EC0000001000001", "743A050000", "0000000010" + "01")]


@pytest.mark.parametrize(("point", "message"), [
    # TSDB.checkTimestampAndTags names the value's bytes/flags and the series (HashMap order).
    ({**NICE, "metric": "ds.x", "timestamp": 13570848000000, "value": 1,
      "tags": {"a": "b"}},
     "bad timestamp=13570848000000 when trying to add value=[1]/0 to metric=ds.x, tags={a=b}"),
    ({**NICE, "timestamp": 13570848000000, "value": 1.5, "tags": {"dc": "x", "host": "a"}},
     "bad timestamp=13570848000000 when trying to add value=[63, -8, 0, 0, 0, 0, 0, 0]/15 "
     "to metric=sys.cpu.nice, tags={host=a, dc=x}"),
    ({**NICE, "metric": "ds x"}, 'Invalid metric name ("ds x"): illegal character:  '),
    ({**NICE, "tags": {"h st": "a"}},
     'Invalid tag name with value [a] ("h st"): illegal character:  '),
    ({**NICE, "tags": {"host": "a!"}},
     'Invalid tag value with key [host] ("a!"): illegal character: !'),
])
def test_opentsdb_messages(client: FlaskClient, point: dict[str, Any], message: str) -> None:
    response = post(client, point, "?details")
    assert response.status_code == 400
    assert response.get_json()["errors"][0]["error"] == message


def test_long_names_are_refused_without_echoing_them(client: FlaskClient, tsdb: TSDB) -> None:
    huge = "m" * 2_000_000
    response = post(client, [{**NICE, "metric": huge}, {**NICE, "tags": {"host": huge}},
                             {**NICE, "metric": "m" * 1024}], "?details")
    assert response.status_code == 400
    assert len(response.data) < 10_000
    body = response.get_json()
    assert (body["success"], body["failed"]) == (1, 2)
    assert body["errors"][0]["error"].startswith('Invalid metric name ("mmm')
    assert body["errors"][0]["error"].endswith(
        "(2000000 characters)\"): 2000000 bytes, more than the 1024 allowed "
        "(tsd.core.max_name_bytes)")
    assert "tag value with key [host]" in body["errors"][1]["error"]
    names = {row for row, _ in tsdb.uid_table().scan()}
    assert b"m" * 1024 in names and not any(len(name) > 1024 for name in names)


def test_a_refused_batch_assigns_no_uids(make_client: Any, tsd_config: dict[str, Any]) -> None:
    client = make_client({"tsd.core.auto_create_tagvs": False})
    points = [{**NICE, "metric": "new.metric", "tags": {"newtagk": "unknown-value"}},
              {**NICE, "metric": "other.metric", "timestamp": 13570848000000},
              {**NICE, "metric": "third.metric", "tags": {"new.key": "bad value"}},
              {**NICE, "metric": "fourth", "tags": {f"k{i}": "v" for i in range(9)}}]
    response = post(client, points, "?details")
    assert response.get_json()["failed"] == 4
    assert [e["error"] for e in response.get_json()["errors"]][0] == "Unknown tagv"
    tsdb: TSDB = client.application.extensions["tsdb"]
    assert list(tsdb.uid_table().scan()) == []


def test_only_accepted_series_get_uids(client: FlaskClient, tsdb: TSDB) -> None:
    response = post(client, [{**NICE, "metric": "good", "tags": {"host": "a"}},
                             {**NICE, "metric": "bad", "tags": {"host": "b!"}}], "?details")
    assert response.get_json()["failed"] == 1
    forward = {row for row, cells in tsdb.uid_table().scan() if b"id:metrics" in cells
               or b"id:tagk" in cells or b"id:tagv" in cells}
    assert forward == {b"\x00", b"good", b"host", b"a"}


@pytest.mark.parametrize("path", ["/api/put/", "/API/Put", "/api/v1/put/"])
def test_opentsdb_routes_put(client: FlaskClient, tsdb: TSDB, path: str) -> None:
    response = client.post(path, data=json.dumps(NICE))
    assert response.status_code == 204
    assert len(data_cells(tsdb)) == 1


def test_big_batches_store_the_same_bytes(client: FlaskClient, tsdb: TSDB) -> None:
    # 300 points take the numpy encoder (small batches go point by point): same cells.
    values: list[Any] = [7, -2, 70000, 2**40, 42.5, 42.2, "1.25", "17"] * 37 + [1, 2, 3, 4]
    points = [{**NICE, "timestamp": 1346846400 + i, "value": v} for i, v in enumerate(values)]
    assert post(client, points).status_code == 204
    cells = {column[4:]: value for _, column, value in data_cells(tsdb)}
    if isinstance(tsdb.store, SqliteStore):
        # The embedded store's merge writes the row's points as one compacted column (time
        # order, meta byte 0): the points' own cells are its pieces.
        ((qualifier, value),) = cells.items()
        assert value.endswith("00") and len(qualifier) == 4 * 300
        cells = {q.hex().upper(): v.hex().upper() for _, q, v in cell_points(
            COMPACTED, bytes.fromhex(qualifier), bytes.fromhex(value))}
    assert len(cells) == 300
    assert [cells[f"{(i << 4) | flags:04X}"] for i, flags in enumerate(
        [0x0, 0x0, 0x3, 0x7, 0xF, 0xF, 0xF, 0x0])] == [
        "07", "FE", "00011170", "0000010000000000", "4045400000000000", "404519999999999A",
        "3FF4000000000000", "11"]
