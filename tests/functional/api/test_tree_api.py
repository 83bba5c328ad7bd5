"""/api/tree and its sub-endpoints, and realtime tree processing, on both backends. Branch IDs
are those of OpenTSDB's documentation (ROOT/sys/cpu); messages written by hand from TreeRpc and
TreeBuilder; JSON orders as OpenTSDB 2.4.1's classes print them (tests/unit/meta). UIDs start
at 000001."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.meta.tree_builder import treesync
from app.tsdb import TSDB

T0 = 1356998400
PROCESSING = {"tsd.core.meta.enable_tsuid_tracking": True,
              "tsd.core.meta.enable_realtime_ts": True,
              "tsd.core.tree.enable_processing": True}
Factory = Callable[[dict[str, Any]], FlaskClient]
WEB01, WEB02 = "000001000001000001", "000001000001000002"
SYS = {"leaves": None, "branches": None, "path": {"0": "ROOT", "1": "sys"}, "treeId": 1,
       "displayName": "sys", "branchId": "00010001BECD", "depth": 1}


def tsdb_of(client: FlaskClient) -> TSDB:
    tsdb: TSDB = client.application.extensions["tsdb"]
    return tsdb


def put(client: FlaskClient, host: str) -> None:
    body = {"metric": "sys.cpu.user", "timestamp": T0, "value": 1, "tags": {"host": host}}
    assert client.post("/api/put", json=body).status_code == 204


def make_tree(client: FlaskClient, store_failures: bool = False) -> None:
    flags = "&store_failures=true" if store_failures else ""
    response = client.post(f"/api/tree?name=Metrics&enabled=true{flags}")
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.get_json()["treeId"] == 1
    response = client.post("/api/tree/rule", json={"treeId": 1, "level": 0, "order": 0,
                                                   "type": "METRIC", "separator": "\\."})
    assert response.status_code == 200, response.get_data(as_text=True)


def test_tree_definitions_and_rules(client: FlaskClient, tsdb: TSDB) -> None:
    response = client.post("/api/tree", json={"name": "Net", "description": "d"})
    assert response.status_code == 200
    assert response.get_data(as_text=True) == (
        '{"name":"Net","description":"d","notes":"","enabled":false,"rules":null,"created":0,'
        '"treeId":1,"strictMatch":false,"storeFailures":false}')
    assert tsdb.tree_table().row(b"\x00\x01") == {b"t:tree": (
        b'{"name":"Net","description":"d","notes":"","strictMatch":false,"created":0,'
        b'"enabled":false,"storeFailures":false}')}
    response = client.post("/api/tree/rule?treeid=1&level=1&order=0&type=tagk&field=host")
    assert response.get_data(as_text=True) == (
        '{"type":"TAGK","field":"host","regex":"","separator":"","description":"","notes":"",'
        '"level":1,"order":0,"treeId":1,"customField":"","regexGroupIdx":0,'
        '"displayFormat":""}')
    assert tsdb.tree_table().row(b"\x00\x01", [b"t:tree_rule:1:0"]) == {
        b"t:tree_rule:1:0": response.get_data()}
    # The same again: nothing changed, 304.
    again = client.post("/api/tree/rule?treeid=1&level=1&order=0&type=tagk&field=host")
    assert (again.status_code, again.get_data()) == (304, b"")
    edited = client.post("/api/tree?treeid=1&notes=n").get_json()
    assert (edited["notes"], edited["description"]) == ("n", "d")
    replaced = client.put("/api/tree?treeid=1&name=Net2").get_json()
    assert (replaced["name"], replaced["description"], replaced["notes"]) == ("Net2", "", "")
    listed = client.get("/api/tree").get_json()
    assert [t["treeId"] for t in listed] == [1]
    assert listed[0]["rules"]["1"]["0"]["field"] == "host"
    assert client.delete("/api/tree/rule?treeid=1&level=1&order=0").status_code == 204
    assert client.get("/api/tree?treeid=1").get_json()["rules"] is None
    assert client.delete("/api/tree?treeid=1&definition=true").status_code == 204
    assert client.get("/api/tree").get_json() == []


@pytest.mark.parametrize(("method", "url", "body", "status", "message"), [
    ("GET", "/api/tree?treeid=9", None, 404, "Unable to locate tree: 9"),
    ("GET", "/api/tree?treeid=x", None, 400, "Unable to parse 'tree' value"),
    ("POST", "/api/tree?description=x", None, 400, "Tree was missing the name"),
    ("POST", "/api/tree/rule?treeid=1&order=0&type=metric", None, 400,
     "Missing parameter <code>level</code>"),
    ("POST", "/api/tree/rule?treeid=1&level=0&order=0&type=nope", None, 400,
     "Unable to parse the 'type' parameter"),
    ("POST", "/api/tree/rule?treeid=1&level=0&order=0&type=tagk", None, 400,
     "Missing field name required for TAGK rule"),
    ("POST", "/api/tree/rule?treeid=1&level=0&order=0&type=tagv_custom&field=x", None, 400,
     "Missing custom field name required for TAGV_CUSTOM rule"),
    ("GET", "/api/tree/rule?treeid=1&level=5&order=0", None, 404,
     "Unable to locate rule: [1:5:0:null]"),
    ("GET", "/api/tree/rule?treeid=7&level=0&order=0", None, 404, "Unable to locate tree: 7"),
    ("POST", "/api/tree/rules", [], 400, "Missing tree rules"),
    ("POST", "/api/tree/rules", [{"treeId": 1}, {"treeId": 2}], 400,
     "All rules must belong to the same tree"),
    ("GET", "/api/tree/branch", None, 400, "Missing or invalid branch and tree IDs"),
    ("GET", "/api/tree/branch?branch=000100", None, 404,
     "Unable to locate branch '000100' for tree '1'"),
    ("GET", "/api/tree/test?treeid=1", None, 400, "Missing or empty TSUID list"),
    ("GET", "/api/tree/collisions", None, 400, "Missing parameter <code>treeid</code>"),
    ("GET", "/api/tree/nothing", None, 404, "This endpoint is not supported"),
])
def test_tree_errors(client: FlaskClient, method: str, url: str, body: Any, status: int,
                     message: str) -> None:
    assert client.post("/api/tree?name=T").status_code == 200
    response = client.open(url, method=method, json=body)
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.get_json()["error"]["message"] == message


def test_realtime_processing_builds_branches(make_client: Factory) -> None:
    client = make_client(PROCESSING)
    make_tree(client)
    put(client, "web01")
    root = client.get("/api/tree/branch?treeid=1").get_json()
    assert root == {"leaves": None, "branches": [SYS], "path": {"0": "ROOT"}, "treeId": 1,
                    "displayName": "ROOT", "branchId": "0001", "depth": 0}
    sys_branch = client.get("/api/tree/branch?branch=00010001BECD").get_json()
    assert [b["branchId"] for b in sys_branch["branches"]] == ["00010001BECD000181A8"]
    cpu = client.get("/api/tree/branch?branch=00010001BECD000181A8").get_json()
    assert cpu["leaves"] == [{"metric": "sys.cpu.user", "tags": {"host": "web01"},
                              "tsuid": WEB01, "displayName": "user"}]
    table = tsdb_of(client).tree_table()
    assert table.row(bytes.fromhex("00010001BECD000181A8")) == {
        b"t:branch": b'{"path":{"0":"ROOT","1":"sys","2":"cpu"},"displayName":"cpu"}',
        b"t:leaf:\x00\x36\xeb\xcb": b'{"displayName":"user","tsuid":"' + WEB01.encode()
                                    + b'"}'}


def test_collisions_are_stored_when_asked(make_client: Factory) -> None:
    client = make_client(PROCESSING)
    make_tree(client, store_failures=True)
    put(client, "web01")
    put(client, "web02")  # the same leaf name "user" under ROOT/sys/cpu
    assert client.get("/api/tree/collisions?treeid=1").get_json() == {WEB02: WEB01}
    assert client.get(f"/api/tree/collisions?treeid=1&tsuids={WEB01}").get_json() == {}
    assert client.get("/api/tree/notmatched?treeid=1").get_json() == {}
    row = tsdb_of(client).tree_table().row(b"\x00\x01\x01")
    assert row == {b"t:tree_collision:" + bytes.fromhex(WEB02): WEB01.encode()}


def test_tree_test_endpoint(make_client: Factory) -> None:
    client = make_client({**PROCESSING, "tsd.core.tree.enable_processing": False})
    make_tree(client)
    put(client, "web01")
    body = client.get(f"/api/tree/test?treeid=1&tsuids={WEB01},000001000001000009").get_json()
    assert body["000001000001000009"] == {"branch": None, "meta": None,
                                          "messages": ["Unable to locate TSUID meta data"]}
    result = body[WEB01]
    assert result["messages"] == [
        "Processing rule: [1:0:0:METRIC]", "Processing rule: [1:0:0:METRIC]",
        "Processing rule: [1:0:0:METRIC]",
        f"Depth [4] Adding leaf [name: user tsuid: {WEB01}] to parent branch [Name: [cpu]]",
        "Depth [3] Adding branch: Name: [cpu] to parent: Name: [sys]"]
    assert result["meta"]["tsuid"] == WEB01
    sys_branch = result["branch"]["branches"][0]
    assert (sys_branch["branchId"], sys_branch["branches"][0]["leaves"][0]["tsuid"]) == (
        "00010001BECD", WEB01)
    # Testing stores nothing.
    assert list(tsdb_of(client).tree_table().scan(row_start=b"\x00\x01\x00")) == []


def test_delete_then_treesync_rebuilds(make_client: Factory) -> None:
    client = make_client(PROCESSING)
    make_tree(client)
    put(client, "web01")
    assert client.delete("/api/tree?treeid=1").status_code == 204
    assert client.get("/api/tree/branch?treeid=1").status_code == 404
    assert client.get("/api/tree?treeid=1").status_code == 200  # the definition stays
    assert treesync(tsdb_of(client)) == (1, 1)
    cpu = client.get("/api/tree/branch?branch=00010001BECD000181A8").get_json()
    assert [leaf["tsuid"] for leaf in cpu["leaves"]] == [WEB01]


def test_every_rule_type(make_client: Factory) -> None:
    client = make_client({"tsd.core.meta.enable_tsuid_tracking": True,
                          "tsd.core.meta.enable_realtime_ts": True})
    body = {"metric": "sys.cpu.user", "timestamp": T0, "value": 1, "tags": {"host": "web01"}}
    assert client.post("/api/put", json=body).status_code == 204
    for uid_type, custom in (("metric", {"owner": "ops"}), ("tagk", {"role": "hosts"}),
                             ("tagv", {"dc": "lga"})):
        response = client.post("/api/uid/uidmeta", json={"uid": "000001", "type": uid_type,
                                                         "custom": custom})
        assert response.status_code == 200
    assert client.post("/api/tree?name=All").status_code == 200
    rules = [
        {"level": 0, "order": 0, "type": "TAGV_CUSTOM", "field": "web01", "customField": "dc",
         "displayFormat": "dc-{value}"},
        {"level": 1, "order": 0, "type": "TAGK_CUSTOM", "field": "host",
         "customField": "missing"},
        {"level": 1, "order": 1, "type": "TAGK_CUSTOM", "field": "host", "customField": "role",
         "displayFormat": "{tag_name}:{value}"},
        {"level": 2, "order": 0, "type": "METRIC_CUSTOM", "field": "sys.cpu.user",
         "customField": "owner"},
        {"level": 3, "order": 0, "type": "TAGK", "field": "host", "regex": "^([a-z]+)(\\d+)",
         "regexGroupIdx": 1},
        {"level": 4, "order": 0, "type": "METRIC", "regex": "\\.([a-z]+)$",
         "displayFormat": "{ovalue}/{value}"},
    ]
    response = client.post("/api/tree/rules", json=[{"treeId": 1, **r} for r in rules])
    assert response.status_code == 204
    result = client.get(f"/api/tree/test?treeid=1&tsuids={WEB01}").get_json()[WEB01]
    assert "No match on custom tag [missing] for rule: [1:1:0:TAGK_CUSTOM]" in result["messages"]
    names, branch = [], result["branch"]
    while branch["branches"]:
        branch = branch["branches"][0]
        names.append(branch["displayName"])
    assert names == ["dc-lga", "role:hosts", "ops", "01"]
    assert [leaf["displayName"] for leaf in branch["leaves"]] == ["sys.cpu.user/user"]
    assert branch["path"] == {"0": "ROOT", "1": "dc-lga", "2": "role:hosts", "3": "ops",
                              "4": "01"}
