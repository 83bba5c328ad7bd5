"""/api/uid/assign, /api/uid/uidmeta (GET) and the UID endpoints not served (spec §7.7, case G54,
OpenTSDB's TestUniqueIdRpc). UIDs in an empty store start at 000001 and count up per kind."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.tsdb import TSDB


def assign(client: FlaskClient, query: str) -> Any:
    return client.get(f"/api/uid/assign?{query}")


def test_assign_single(client: FlaskClient) -> None:
    # TestUniqueIdRpc#assignQsMetricSingle.
    response = assign(client, "metric=sys.cpu.0")
    assert response.status_code == 200
    assert response.get_json() == {"metric": {"sys.cpu.0": "000001"}}


def test_assign_two_good_one_bad(client: FlaskClient) -> None:
    # TestUniqueIdRpc#assignQsMetric2Good1Bad, with sys.cpu.1 assigned first (so it is 000001
    # here, and the two new names take 000002 and 000003).
    assert assign(client, "metric=sys.cpu.1").status_code == 200
    response = assign(client, "metric=sys.cpu.0,sys.cpu.1,sys.cpu.2")
    assert response.status_code == 400
    assert response.get_json() == {
        "metric": {"sys.cpu.0": "000002", "sys.cpu.2": "000003"},
        "metric_errors": {"sys.cpu.1": "Name already exists with UID: 000001"}}


def test_assign_every_kind(client: FlaskClient) -> None:
    response = assign(client, "metric=m1&tagk=host,dc&tagv=web01")
    assert response.status_code == 200
    assert response.get_json() == {"metric": {"m1": "000001"},
                                   "tagk": {"dc": "000002", "host": "000001"},
                                   "tagv": {"web01": "000001"}}
    assert client.get("/api/suggest?type=tagk").get_json() == ["dc", "host"]


def test_assign_invalid_name_keeps_an_empty_map(client: FlaskClient) -> None:
    response = assign(client, "tagv=bad%20name")
    assert response.status_code == 400
    assert response.get_json() == {
        "tagv": {}, "tagv_errors": {"bad name": 'Invalid tagv ("bad name"): illegal character:  '}}


def test_assign_post(client: FlaskClient) -> None:
    response = client.post("/api/uid/assign", json={"metric": ["a", "b"], "tagk": ["k"]})
    assert response.status_code == 200
    assert response.get_json() == {"metric": {"a": "000001", "b": "000002"},
                                   "tagk": {"k": "000001"}}


@pytest.mark.parametrize("query", ["", "tagv=", "metric=&tagk="])
def test_assign_nothing(client: FlaskClient, query: str) -> None:
    # TestUniqueIdRpc#assignQsEmpty, #assignQsNoParamValue.
    response = assign(client, query)
    assert response.status_code == 400
    assert response.get_json()["error"]["message"] == "Missing values to assign UIDs"


@pytest.mark.parametrize(("body", "message"), [
    ("{}", "Missing values to assign UIDs"),  # TestUniqueIdRpc#assignPostEmptyJSON
    ('{"metric": []}', "Missing values to assign UIDs"),
    ('{"metric": "a"}', "Unable to parse the given JSON"),
    ('{"metric": [1]}', "Unable to parse the given JSON"),
    ('{"metrics": ["a"]}', "Invalid type requested: metrics"),
    ("[]", "Unable to parse the given JSON"),
    ("", "Missing request content"),
])
def test_assign_bad_post(client: FlaskClient, body: str, message: str) -> None:
    response = client.post("/api/uid/assign", data=body, content_type="application/json")
    assert response.status_code == 400
    assert response.get_json()["error"]["message"] == message


def test_assign_wrong_verb(client: FlaskClient) -> None:
    assert client.delete("/api/uid/assign?metric=a").status_code == 405


def test_uidmeta_from_the_uid_table(client: FlaskClient) -> None:
    assign(client, "metric=sys.cpu.0&tagv=web01")
    response = client.get("/api/uid/uidmeta?uid=000001&type=metric")
    assert response.status_code == 200
    assert response.get_json() == {"uid": "000001", "type": "METRIC", "name": "sys.cpu.0",
                                   "description": "", "notes": "", "created": 0,
                                   "custom": None, "displayName": ""}
    body = client.get("/api/uid/uidmeta?uid=000001&type=TAGV").get_json()
    assert (body["type"], body["name"]) == ("TAGV", "web01")
    assert client.get("/api/uid/uidmeta?uid=000001&type=metrics").status_code == 200


def test_uidmeta_shows_meta_opentsdb_stored(client: FlaskClient, tsdb: TSDB) -> None:
    assign(client, "metric=sys.cpu.0")
    # UIDMeta#getStorageJSON, in the name family under "metric_meta".
    stored = {"type": "METRIC", "displayName": "CPU", "description": "User CPU",
              "notes": "", "created": 1350425579, "custom": {"owner": "ops"}}
    tsdb.uid_table().put(b"\x00\x00\x01", {b"name:metric_meta": json.dumps(stored).encode()})
    body = client.get("/api/uid/uidmeta?uid=000001&type=metric").get_json()
    assert body == {"uid": "000001", "type": "METRIC", "name": "sys.cpu.0",
                    "description": "User CPU", "notes": "", "created": 1350425579,
                    "custom": {"owner": "ops"}, "displayName": "CPU"}


@pytest.mark.parametrize(("query", "status", "message"), [
    ("uid=000009&type=metric", 404, "Could not find the requested UID"),
    ("uid=00000G&type=metric", 400, "Invalid UID: 00000G"),
    ("uid=0001&type=metric", 400, "Invalid UID: 0001"),
    ("type=metric", 400, "Missing parameter <code>uid</code>"),
    ("uid=000001", 400, "Missing parameter <code>type</code>"),
    ("uid=000001&type=host", 400, "Invalid type requested: host"),
])
def test_uidmeta_bad_input(client: FlaskClient, query: str, status: int, message: str) -> None:
    assign(client, "metric=sys.cpu.0")
    response = client.get(f"/api/uid/uidmeta?{query}")
    assert response.status_code == status
    assert response.get_json()["error"]["message"] == message


def test_other_uid_endpoint(client: FlaskClient) -> None:
    response = client.get("/api/uid/nothing")
    assert response.status_code == 501
    assert response.get_json()["error"]["message"] == (
        "Other UID endpoints have not been implemented yet")
