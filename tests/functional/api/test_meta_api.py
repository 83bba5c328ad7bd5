"""TSMeta and UIDMeta on both backends: tracking on writes (HTTP and the line protocol, the one
PointWriter), /api/uid/tsmeta, /api/uid/uidmeta edits, /api/uid/rename. Expected cells and
answers are written by hand from OpenTSDB 2.4's TSDB.addPointInternal, TSMeta, UIDMeta and
UniqueIdRpc; UIDs in an empty store start at 000001 per kind."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.lineproto.session import TelnetSession
from app.tsdb import TSDB

T0 = 1356998400
TRACK = {"tsd.core.meta.enable_tsuid_tracking": True}
REALTIME = {**TRACK, "tsd.core.meta.enable_realtime_ts": True}
COUNTING = {**REALTIME, "tsd.core.meta.enable_tsuid_incrementing": True,
            "tsd.core.meta.counter_flush_ms": 0}
# sys.cpu{host=web01} and sys.cpu{host=web02}: metric 1, tagk 1, tagv 1 and 2.
WEB01, WEB02 = bytes.fromhex("000001000001000001"), bytes.fromhex("000001000001000002")
Factory = Callable[[dict[str, Any]], FlaskClient]


def tsdb_of(client: FlaskClient) -> TSDB:
    tsdb: TSDB = client.application.extensions["tsdb"]
    return tsdb


def put(client: FlaskClient, host: str, *values: float, start: int = T0) -> None:
    body = [{"metric": "sys.cpu", "timestamp": start + i, "value": v, "tags": {"host": host}}
            for i, v in enumerate(values)]
    response = client.post("/api/put", json=body)
    assert response.status_code == 204, response.get_data(as_text=True)


def meta_rows(client: FlaskClient) -> dict[bytes, dict[bytes, bytes]]:
    return dict(tsdb_of(client).meta_table().scan())


def new_ts_meta(tsuid: bytes, created: int) -> bytes:
    return (b'{"tsuid":"' + tsuid.hex().upper().encode() + b'","displayName":"",'
            b'"description":"","notes":"","created":' + str(created).encode()
            + b',"custom":null,"units":"","dataType":"","retention":0,"max":"NaN","min":"NaN"}')


def created_in(raw: bytes, before_s: int) -> int:
    created = int(json.loads(raw)["created"])
    assert before_s <= created <= int(time.time())
    return created


def test_no_tracking_by_default(client: FlaskClient) -> None:
    put(client, "web01", 1)
    assert meta_rows(client) == {}


def test_tracking_puts_a_counter_of_one_per_series(make_client: Factory) -> None:
    # enable_realtime_ts off: PutRequest(meta, tsuid, "name", "ts_ctr", Bytes.fromLong(1)).
    client = make_client(TRACK)
    put(client, "web01", 1, 2, 3)
    put(client, "web02", 4)
    put(client, "web01", 5, start=T0 + 7200)
    one = b"\x00\x00\x00\x00\x00\x00\x00\x01"
    assert meta_rows(client) == {WEB01: {b"name:ts_ctr": one}, WEB02: {b"name:ts_ctr": one}}


def test_tracking_through_the_line_protocol(make_client: Factory) -> None:
    client = make_client(TRACK)
    session = TelnetSession(client.application, "peer")
    reply, _ = session.handle_lines([f"put sys.cpu {T0} 1 host=web02".encode()])
    assert reply == b""
    assert list(meta_rows(client)) == [WEB01]  # web02 is the first tag value here


def test_realtime_ts_stores_a_new_ts_meta_once(make_client: Factory) -> None:
    client = make_client(REALTIME)
    before = int(time.time())
    put(client, "web01", 1, 2)
    put(client, "web01", 3, start=T0 + 60)
    rows = meta_rows(client)
    assert list(rows) == [WEB01] and list(rows[WEB01]) == [b"name:ts_meta"]
    raw = rows[WEB01][b"name:ts_meta"]
    assert raw == new_ts_meta(WEB01, created_in(raw, before))
    assert tsdb_of(client).tsuid_tracker is not None
    assert tsdb_of(client).tsuid_tracker.created == 1


def test_incrementing_counts_points(make_client: Factory) -> None:
    client = make_client(COUNTING)
    before = int(time.time())
    put(client, "web01", 1, 2, 3)
    put(client, "web01", 4, 5, start=T0 + 3600)
    put(client, "web02", 6)
    rows = meta_rows(client)
    assert rows[WEB01][b"name:ts_ctr"] == (5).to_bytes(8, "big")
    assert rows[WEB02][b"name:ts_ctr"] == (1).to_bytes(8, "big")
    raw = rows[WEB01][b"name:ts_meta"]
    created = created_in(raw, before)
    assert raw == new_ts_meta(WEB01, created)
    body = client.get("/api/uid/tsmeta?tsuid=000001000001000001")
    assert body.status_code == 200
    got = body.get_json()
    assert list(got) == ["tsuid", "metric", "tags", "description", "notes", "created", "units",
                         "retention", "max", "min", "displayName", "dataType", "lastReceived",
                         "totalDatapoints"]
    assert (got["tsuid"], got["created"], got["totalDatapoints"], got["max"]) == (
        "000001000001000001", created, 5, "NaN")
    assert before <= got["lastReceived"] <= int(time.time())
    assert got["metric"]["name"] == "sys.cpu" and got["metric"]["type"] == "METRIC"
    assert [(t["type"], t["name"]) for t in got["tags"]] == [("TAGK", "host"), ("TAGV", "web01")]


def test_counts_wait_for_the_flush_interval(make_client: Factory) -> None:
    client = make_client({**COUNTING, "tsd.core.meta.counter_flush_ms": 3_600_000})
    put(client, "web01", 1, 2)
    put(client, "web01", 3)
    assert meta_rows(client) == {}  # added up in memory, one increment per series later
    tracker = tsdb_of(client).tsuid_tracker
    assert tracker is not None
    tracker.flush()
    rows = meta_rows(client)
    assert rows[WEB01][b"name:ts_ctr"] == (3).to_bytes(8, "big")
    assert b"name:ts_meta" in rows[WEB01]


def test_realtime_uid_stores_uid_meta_on_assignment(make_client: Factory) -> None:
    client = make_client({"tsd.core.meta.enable_realtime_uid": True})
    before = int(time.time())
    put(client, "web01", 1)
    table = tsdb_of(client).uid_table()
    raw = table.row(b"\x00\x00\x01", [b"name:metric_meta"])[b"name:metric_meta"]
    created = json.loads(raw)["created"]
    assert before <= created <= int(time.time())
    assert raw == (b'{"type":"METRIC","displayName":"","description":"","notes":"",'
                   b'"created":' + str(created).encode() + b',"custom":null}')
    assert b"name:tagv_meta" in table.row(b"\x00\x00\x01")
    body = client.get("/api/uid/uidmeta?uid=000001&type=tagk").get_json()
    # assigned just after the metric: the same second, or the next on a loaded machine
    assert body["name"] == "host" and created <= body["created"] <= int(time.time())


# --- /api/uid/uidmeta edits ----------------------------------------------------------------


def test_uidmeta_post_put_delete(client: FlaskClient, tsdb: TSDB) -> None:
    put(client, "web01", 1)
    response = client.post("/api/uid/uidmeta", json={
        "uid": "000001", "type": "metric", "description": "User CPU", "custom": {"c": "1",
                                                                               "d": "2"}})
    assert response.status_code == 200
    assert response.get_data(as_text=True) == (
        '{"uid":"000001","type":"METRIC","name":"sys.cpu","description":"User CPU","notes":"",'
        '"created":0,"custom":{"d":"2","c":"1"},"displayName":""}')
    assert tsdb.uid_table().row(b"\x00\x00\x01", [b"name:metric_meta"]) == {
        b"name:metric_meta": b'{"type":"METRIC","displayName":"","description":"User CPU",'
                             b'"notes":"","created":0,"custom":{"d":"2","c":"1"}}'}
    # POST keeps what it does not name; the query string works too.
    response = client.post("/api/uid/uidmeta?uid=000001&type=metric&notes=n&display_name=CPU")
    body = response.get_json()
    assert (body["description"], body["notes"], body["displayName"]) == ("User CPU", "n", "CPU")
    # PUT overwrites every user field.
    body = client.put("/api/uid/uidmeta", json={"uid": "000001", "type": "metric",
                                                "notes": "only"}).get_json()
    assert (body["description"], body["notes"], body["custom"]) == ("", "only", None)
    # Nothing changed: 304 without a body.
    response = client.post("/api/uid/uidmeta", json={"uid": "000001", "type": "metric"})
    assert (response.status_code, response.get_data()) == (304, b"")
    response = client.delete("/api/uid/uidmeta?uid=000001&type=metric")
    assert response.status_code == 204
    assert tsdb.uid_table().row(b"\x00\x00\x01", [b"name:metric_meta"]) == {}
    assert client.get("/api/uid/uidmeta?uid=000001&type=metric").get_json()["notes"] == ""


@pytest.mark.parametrize(("method", "url", "body", "status", "message"), [
    ("POST", "/api/uid/uidmeta", {"uid": "000009", "type": "metric", "notes": "x"}, 404,
     "Could not find the requested UID"),
    ("POST", "/api/uid/uidmeta", {"type": "metric", "notes": "x"}, 400, "Missing UID"),
    ("POST", "/api/uid/uidmeta", {"uid": "000001", "notes": "x"}, 400, "Missing type"),
    ("POST", "/api/uid/uidmeta", {"uid": "000001", "type": "x"}, 400,
     "Unable to parse the given JSON"),
    ("POST", "/api/uid/uidmeta", {"uid": "000001", "type": "metric", "created": "x"}, 400,
     "Unable to parse the given JSON"),
    ("POST", "/api/uid/uidmeta?type=metric", None, 400, "Missing parameter <code>uid</code>"),
    ("DELETE", "/api/uid/uidmeta", {"type": "metric"}, 400,
     "Unable to delete UIDMeta information"),
])
def test_uidmeta_edit_errors(client: FlaskClient, method: str, url: str, body: Any,
                             status: int, message: str) -> None:
    put(client, "web01", 1)
    response = client.open(url, method=method, json=body)
    assert response.status_code == status
    assert response.get_json()["error"]["message"] == message


# --- /api/uid/tsmeta -------------------------------------------------------------------------


def test_tsmeta_create_edit_list_delete(client: FlaskClient, tsdb: TSDB) -> None:
    put(client, "web01", 1)
    put(client, "web02", 1)
    response = client.post("/api/uid/tsmeta?m=sys.cpu{host=web02}", json={"units": "%"})
    assert response.status_code == 400
    assert response.get_json()["error"]["message"] == (
        'Could not find TSMeta, specify "create=true" to create a new one.')
    response = client.post("/api/uid/tsmeta?m=sys.cpu{host=web02}&create=true",
                           json={"units": "%", "max": 100})
    assert response.status_code == 200
    body = response.get_json()
    assert (body["tsuid"], body["units"], body["max"], body["totalDatapoints"]) == (
        "000001000001000002", "%", 100.0, 0)
    row = tsdb.meta_table().row(WEB02)
    assert row == {b"name:ts_ctr": bytes(8), b"name:ts_meta": (
        b'{"tsuid":"000001000001000002","displayName":"","description":"","notes":"",'
        b'"created":0,"custom":null,"units":"%","dataType":"","retention":0,"max":100.0,'
        b'"min":"NaN"}')}
    # POST by tsuid keeps units; the query string's min is read as a Java float.
    body = client.post("/api/uid/tsmeta?tsuid=000001000001000002&description=d&min=0.1"
                       ).get_json()
    assert (body["units"], body["description"], body["min"]) == ("%", "d", 0.10000000149011612)
    listed = client.get("/api/uid/tsmeta?m=sys.cpu").get_json()
    assert [m["tsuid"] for m in listed] == ["000001000001000002"]
    assert client.get("/api/uid/tsmeta?m=sys.cpu{host=web01}").get_json() == []
    assert client.delete("/api/uid/tsmeta?tsuid=000001000001000002").status_code == 204
    assert tsdb.meta_table().row(WEB02) == {b"name:ts_ctr": bytes(8)}
    response = client.get("/api/uid/tsmeta?tsuid=000001000001000002")
    assert response.status_code == 404
    assert response.get_json()["error"]["message"] == "Could not find Timeseries meta data"


@pytest.mark.parametrize(("method", "url", "status", "message"), [
    ("GET", "/api/uid/tsmeta", 400, "Missing parameter <code>m</code>"),
    ("GET", "/api/uid/tsmeta?m=nope", 404, "Unable to find one of the UIDs"),
    # OpenTSDB 2.4.1: the tags resolve in a Deferred group, a `*` is a name like any other
    ("GET", "/api/uid/tsmeta?m=sys.cpu{host=*}", 400,
     "At least one of the Deferreds failed, first exception:"),
    ("GET", "/api/uid/tsmeta?tsuid=00000G", 400, "Invalid TSUID: 00000G"),
    ("POST", "/api/uid/tsmeta?tsuid=000001000001000001&notes=x", 400,
     "Requested TSMeta did not exist"),
    ("POST", "/api/uid/tsmeta?tsuid=000001000001000001&retention=x", 400,
     "Unable to parse 'retention' value"),
    ("POST", "/api/uid/tsmeta?tsuid=000001000009000001&notes=x", 404,
     "Unable to find one or more UIDs"),
    ("DELETE", "/api/uid/tsmeta", 400, "Unable to delete TSMeta information"),
])
def test_tsmeta_errors(client: FlaskClient, method: str, url: str, status: int,
                       message: str) -> None:
    put(client, "web01", 1)
    response = client.open(url, method=method)
    assert response.status_code == status
    assert response.get_json()["error"]["message"] == message


# --- /api/uid/rename -------------------------------------------------------------------------


def test_rename_a_metric(client: FlaskClient, tsdb: TSDB) -> None:
    put(client, "web01", 1)
    response = client.get("/api/uid/rename?metric=sys.cpu&name=sys.cpu.user")
    assert (response.status_code, response.get_json()) == (200, {"result": "true"})
    table = tsdb.uid_table()
    assert table.row(b"sys.cpu.user") == {b"id:metrics": b"\x00\x00\x01"}
    assert table.row(b"sys.cpu") == {}
    assert table.row(b"\x00\x00\x01", [b"name:metrics"]) == {b"name:metrics": b"sys.cpu.user"}
    points = client.get(f"/api/query?start={T0}&end={T0 + 60}&m=sum:sys.cpu.user").get_json()
    assert points[0]["dps"] == {str(T0): 1}
    assert client.get(f"/api/query?start={T0}&m=sum:sys.cpu").status_code == 400


@pytest.mark.parametrize(("query", "error"), [
    ("metric=nope&name=x", 'Name("nope") does not exist'),
    ("tagk=host&name=host", 'When trying rename("host", "host") on UniqueId(tsdb-uid, tagk, '
                            "3): new name already assigned ID=[0, 0, 1]"),
    ("tagv=web01&name=bad%20name",
     'Invalid tagv ("bad name"): illegal character:  '),
])
def test_rename_refused(client: FlaskClient, query: str, error: str) -> None:
    put(client, "web01", 1)
    response = client.get(f"/api/uid/rename?{query}")
    assert response.status_code == 400
    assert response.get_json() == {"result": "false", "error": error}


def test_rename_bad_requests(client: FlaskClient) -> None:
    response = client.get("/api/uid/rename?metric=a")
    assert response.status_code == 400
    assert response.get_json()["error"]["message"] == "Missing necessary values to rename UID"
    assert client.put("/api/uid/rename?metric=a&name=b").status_code == 405
    response = client.post("/api/uid/rename", json={"metric": "sys.x", "name": "y"})
    assert response.get_json() == {"result": "false", "error": 'Name("sys.x") does not exist'}


@pytest.mark.parametrize(("method", "path", "role"), [
    ("GET", "/api/uid/tsmeta", "read"), ("POST", "/api/uid/tsmeta", "admin"),
    ("DELETE", "/api/uid/uidmeta", "admin"), ("PUT", "/api/uid/uidmeta", "admin"),
    ("GET", "/api/uid/uidmeta", "read"), ("GET", "/api/uid/rename", "admin"),
])
def test_meta_edits_need_the_admin_role(client: FlaskClient, method: str, path: str,
                                        role: str) -> None:
    from app.api.security import required_role

    with client.application.test_request_context(path, method=method):
        assert required_role(method, path) == role
