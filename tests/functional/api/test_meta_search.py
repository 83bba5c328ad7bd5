"""/api/search/{tsmeta,tsmeta_summary,tsuids,uidmeta,annotation} without a plugin, on both
backends: from the data and UID tables, and from tsdb-meta when it has rows. The answer is
OpenTSDB's SearchQuery (Jackson order: type, query, metric, limit, time, results, startIndex,
totalResults; tags null and left out)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

T0 = 1356998400
Factory = Callable[[dict[str, Any]], FlaskClient]


def load(client: FlaskClient) -> None:
    body = [{"metric": m, "timestamp": T0, "value": 1, "tags": {"host": h, "dc": "lga"}}
            for m in ("sys.cpu.user", "sys.cpu.nice", "net.bytes") for h in ("web01", "web02")]
    assert client.post("/api/put", json=body).status_code == 204


def search(client: FlaskClient, kind: str, query: str, **extra: Any) -> dict[str, Any]:
    response = client.get(f"/api/search/{kind}", query_string={"query": query, **extra})
    assert response.status_code == 200, response.get_data(as_text=True)
    body: dict[str, Any] = response.get_json()
    return body


def test_tsuids_from_the_data_table(client: FlaskClient) -> None:
    load(client)
    body = search(client, "tsuids", "name:sys.cpu.* host=web01")
    assert list(body) == ["type", "query", "metric", "limit", "time", "results", "startIndex",
                          "totalResults"]
    # metrics: sys.cpu.user 1, sys.cpu.nice 2, net.bytes 3; tagk host 1, dc 2 (the put's
    # tags, in order); tagv web01 1, lga 2, web02 3. Tag pairs sorted by tagk UID.
    assert body["results"] == ["000001000001000001000002000002", "000002000001000001000002000002"]
    assert (body["type"], body["metric"], body["limit"], body["totalResults"]) == (
        "TSUIDS", "*", 25, 2)


def test_summary_paging(client: FlaskClient) -> None:
    load(client)
    body = search(client, "tsmeta_summary", "*", limit=2, start_index=3)
    assert body["totalResults"] == 6 and body["startIndex"] == 3
    assert body["results"] == [
        {"tsuid": "000002000001000003000002000002", "metric": "sys.cpu.nice",
         "tags": {"host": "web02", "dc": "lga"}},
        {"tsuid": "000003000001000001000002000002", "metric": "net.bytes",
         "tags": {"host": "web01", "dc": "lga"}}]


def test_tsmeta_from_the_meta_table_when_tracked(make_client: Factory) -> None:
    client = make_client({"tsd.core.meta.enable_tsuid_tracking": True,
                          "tsd.core.meta.enable_realtime_ts": True})
    load(client)
    body = search(client, "tsmeta", "net.bytes dc=lga")
    assert body["totalResults"] == 2
    first = body["results"][0]
    assert first["tsuid"] == "000003000001000001000002000002"
    assert first["metric"]["name"] == "net.bytes" and first["created"] > 0
    assert [t["name"] for t in first["tags"]] == ["host", "web01", "dc", "lga"]
    # A series only the meta table lacks is not found there: tsdb-meta is the source now.
    client.application.extensions["tsdb"].meta_table().delete(
        bytes.fromhex("000003000001000001000002000002"))
    assert search(client, "tsuids", "net.bytes")["results"] == [
        "000003000001000003000002000002"]


def test_uidmeta_search(client: FlaskClient) -> None:
    load(client)
    body = search(client, "uidmeta", "web* type:tagv")
    assert [(m["type"], m["name"], m["uid"]) for m in body["results"]] == [
        ("TAGV", "web01", "000001"), ("TAGV", "web02", "000003")]
    assert search(client, "uidmeta", "name:sys.cpu.*")["totalResults"] == 2


def test_annotation_search(client: FlaskClient) -> None:
    load(client)
    notes = [{"startTime": T0, "description": "deploy web",
              "tsuid": "000001000001000001000002000002"},
             {"startTime": T0 + 5, "description": "global outage"}]
    for note in notes:
        assert client.post("/api/annotation", json=note).status_code == 200
    body = search(client, "annotation", "text:OUTAGE")
    assert [n["description"] for n in body["results"]] == ["global outage"]
    body = search(client, "annotation", "name:sys.*")
    assert [(n["description"], n["tsuid"]) for n in body["results"]] == [
        ("deploy web", "000001000001000001000002000002")]
    assert search(client, "annotation", "*")["totalResults"] == 2


@pytest.mark.parametrize(("url", "message"), [
    ("/api/search/tsmeta", "Missing parameter <code>query</code>"),
    ("/api/search/tsmeta?query=*&limit=x", "Unable to convert 'limit' to a valid number"),
    ("/api/search/tsuids?query=*&start_index=x",
     "Unable to convert 'start_index' to a valid number"),
    ("/api/search/uidmeta?query=type:host", "Invalid search term: type:host"),
    ("/api/search/tsmeta?query=tags.host:x", "Invalid search term: tags.host:x"),
])
def test_bad_searches(client: FlaskClient, url: str, message: str) -> None:
    response = client.get(url)
    assert response.status_code == 400
    assert response.get_json()["error"]["message"] == message


def test_post_body(client: FlaskClient) -> None:
    load(client)
    response = client.post("/api/search/tsuids", json={"query": "host=web02", "limit": 1,
                                                       "startIndex": 1})
    body = response.get_json()
    assert (body["results"], body["totalResults"]) == (["000002000001000003000002000002"], 3)
