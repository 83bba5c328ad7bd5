"""/api/search/lookup from key-only scans of the data table (spec §7.2, case G56).

Points are written one by one through /api/put into an empty store, so UIDs are assigned in
order and every expected TSUID below is worked out by hand from that order:

    metrics  sys.cpu.user 000001, sys.cpu.system 000002, sys.cpu.nice 000003
    tagk     host 000001, owner 000002, dc 000003
    tagv     web01 000001, web02 000002, jdoe 000003, lga 000004, web03 000005
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

T0 = 1356998400  # an hour boundary
HOUR = 3600
SERIES_POINTS = [  # (metric, tags, timestamps)
    ("sys.cpu.user", {"host": "web01"}, [T0, T0 + HOUR, T0 + 2 * HOUR]),
    ("sys.cpu.user", {"host": "web02"}, [T0 + 10]),
    ("sys.cpu.system", {"host": "web01"}, [T0]),
    ("sys.cpu.nice", {"host": "web01", "owner": "jdoe"}, [T0]),
    ("sys.cpu.user", {"dc": "lga"}, [T0 + 20]),
    ("sys.cpu.user", {"host": "web03"}, [T0 + 5 * HOUR]),
]
USER_WEB01, USER_WEB02, USER_WEB03 = ("000001000001000001", "000001000001000002",
                                      "000001000001000005")
USER_LGA = "000001000003000004"
SYSTEM_WEB01 = "000002000001000001"
NICE_WEB01_JDOE = "000003000001000001000002000003"


def write_series(client: FlaskClient, series: list[tuple[str, dict[str, str], list[int]]]
                 ) -> None:
    for metric, tags, stamps in series:
        for ts in stamps:
            point = {"metric": metric, "timestamp": ts, "value": 1, "tags": tags}
            assert client.post("/api/put", json=point).status_code == 204


@pytest.fixture
def lookup_client(client: FlaskClient) -> FlaskClient:
    write_series(client, SERIES_POINTS)
    return client


def lookup(client: FlaskClient, query: str, status: int = 200) -> Any:
    response = client.get(f"/api/search/lookup?{query}")
    assert response.status_code == status, response.get_data(as_text=True)
    return response.get_json()


def tsuids(body: dict[str, Any]) -> list[str]:
    return [result["tsuid"] for result in body["results"]]


def test_metric_lists_each_series_once_with_full_tags(lookup_client: FlaskClient) -> None:
    body = lookup(lookup_client, "m=sys.cpu.user")
    # web01 has rows in three hours but is one series; results are in TSUID order.
    assert tsuids(body) == [USER_WEB01, USER_WEB02, USER_WEB03, USER_LGA]
    assert body["results"][0] == {"tsuid": USER_WEB01, "metric": "sys.cpu.user",
                                  "tags": {"host": "web01"}}
    assert body["results"][3]["tags"] == {"dc": "lga"}
    assert {k: body[k] for k in ("type", "metric", "tags", "limit", "startIndex",
                                 "totalResults")} == {
        "type": "LOOKUP", "metric": "sys.cpu.user", "tags": [], "limit": 25, "startIndex": 0,
        "totalResults": 4}
    assert isinstance(body["time"], float | int)


def test_tagk_only_across_metrics(lookup_client: FlaskClient) -> None:
    # TestSearchRpc#searchLookupTagkOnlyMeta's shape: m={host=} spans every metric.
    body = lookup(lookup_client, "m={host=}")
    assert "metric" not in body
    assert body["tags"] == [{"key": "host", "value": None}]
    assert tsuids(body) == [USER_WEB01, USER_WEB02, USER_WEB03, SYSTEM_WEB01, NICE_WEB01_JDOE]
    assert body["results"][4] == {"tsuid": NICE_WEB01_JDOE, "metric": "sys.cpu.nice",
                                  "tags": {"host": "web01", "owner": "jdoe"}}
    assert body["totalResults"] == 5


@pytest.mark.parametrize(("m", "expected"), [
    ("sys.cpu.user{host=*}", [USER_WEB01, USER_WEB02, USER_WEB03]),   # the key must be there
    ("sys.cpu.user{host=}", [USER_WEB01, USER_WEB02, USER_WEB03]),
    ("sys.cpu.user{host=web01}", [USER_WEB01]),
    ("sys.cpu.user{host=web01,host=web02}", [USER_WEB01, USER_WEB02]),  # same key: OR
    ("sys.cpu.user{host=web01,host=*}", [USER_WEB01, USER_WEB02, USER_WEB03]),
    ("sys.cpu.user{host=web01|web03}", [USER_WEB01, USER_WEB03]),
    ("sys.cpu.user{host=WEB*}", [USER_WEB01, USER_WEB02, USER_WEB03]),  # implicit iwildcard
    ("sys.cpu.user{host=regexp(web0[12])}", [USER_WEB01, USER_WEB02]),
    ("sys.cpu.user{host=not_literal_or(web01)}", [USER_WEB02, USER_WEB03]),
    ("sys.cpu.user{host=not_key()}", [USER_LGA]),
    ("sys.cpu.user{host=web01,dc=lga}", []),  # different keys: AND
    ("{=jdoe}", [NICE_WEB01_JDOE]),  # any key
    ("{*=jdoe}", [NICE_WEB01_JDOE]),
    ("{*=lga,*=jdoe}", [USER_LGA, NICE_WEB01_JDOE]),
    ("sys.cpu.nice{owner=*,host=web01}", [NICE_WEB01_JDOE]),
    ("sys.cpu.user{}", [USER_WEB01, USER_WEB02, USER_WEB03, USER_LGA]),
])
def test_tag_matching(lookup_client: FlaskClient, m: str, expected: list[str]) -> None:
    assert tsuids(lookup(lookup_client, f"m={m}")) == expected


def test_limit(lookup_client: FlaskClient) -> None:
    # The scan meets the T0 hour's rows first, in key order: web01 is the first series.
    body = lookup(lookup_client, "m=sys.cpu.user&limit=1")
    assert tsuids(body) == [USER_WEB01]
    assert (body["limit"], body["totalResults"]) == (1, 1)
    # Grafana's backend sends limit=0 when lookupLimit is not provisioned: the default.
    body = lookup(lookup_client, "m=sys.cpu.user&limit=0")
    assert (body["limit"], body["totalResults"]) == (25, 4)


def test_start_and_end_bound_the_scan(lookup_client: FlaskClient) -> None:
    later = lookup(lookup_client, f"m=sys.cpu.user&start={T0 + 4 * HOUR}")
    assert tsuids(later) == [USER_WEB03]
    first_hour = lookup(lookup_client, f"m=sys.cpu.user&start={T0}&end={T0 + 1800}")
    assert tsuids(first_hour) == [USER_WEB01, USER_WEB02, USER_LGA]
    middle = lookup(lookup_client, "m=sys.cpu.user&start=2013/01/01-01:00&end=2013/01/01-02:30")
    assert tsuids(middle) == [USER_WEB01]
    across = lookup(lookup_client, f"m={{host=web01}}&start={T0 + HOUR}")
    assert tsuids(across) == [USER_WEB01]
    assert tsuids(lookup(lookup_client, "m=sys.cpu.user&start=1h-ago")) == []


def test_post_body(lookup_client: FlaskClient) -> None:
    body = {"metric": "sys.cpu.user", "tags": [{"key": "host", "value": "web02"}],
            "limit": 5, "useMeta": True}
    response = lookup_client.post("/api/search/lookup", json=body)
    assert response.status_code == 200
    result = response.get_json()
    assert tsuids(result) == [USER_WEB02]
    assert result["limit"] == 5
    any_metric = lookup_client.post("/api/search/lookup",
                                    json={"tags": [{"key": None, "value": "jdoe"}]})
    assert tsuids(any_metric.get_json()) == [NICE_WEB01_JDOE]


def test_use_meta_and_v1_are_accepted(lookup_client: FlaskClient) -> None:
    body = lookup(lookup_client, "m=sys.cpu.system&use_meta=true&useMeta=true")
    assert tsuids(body) == [SYSTEM_WEB01]
    response = lookup_client.get("/api/v1/search/LOOKUP?m=sys.cpu.system")
    assert tsuids(response.get_json()) == [SYSTEM_WEB01]


@pytest.mark.parametrize(("query", "status", "message", "details"), [
    ("", 400, "Missing parameter <code>m</code>", None),
    ("m=", 400, "Missing parameter <code>m</code>", None),
    ("m={", 400, "Unable to parse query", "Missing '}' at the end of: {"),
    ("m={}", 400, "Unable to parse query", "Missing metric and tags: {}"),
    ("m=sys.cpu.user{a}", 400, "Unable to parse query", "When parsing tag 'a': Missing tag pair"),
    ("m=sys.cpu.user{a=b=c}", 400, "Unable to parse query",
     "When parsing tag 'a=b=c': invalid tag: a=b=c"),
    ("m=sys.cpu.user{host=regexp(}", 400, "Unable to parse query", None),
    ("m=sys.cpu.user&limit=foo", 400, "Unable to convert 'limit' to a valid number", None),
    ("m=sys.cpu.user&limit=-1", 400, "Unable to convert 'limit' to a valid number", None),
    ("m=sys.cpu.user&start=yesterday", 400, None, None),
    (f"m=sys.cpu.user&start={T0 + HOUR}&end={T0}", 400, None, None),
    ("m=no.such.metric", 404, "Unable to resolve one or more UIDs",
     "No such name for 'metrics': 'no.such.metric'"),
    ("m=sys.cpu.user{nokey=*}", 404, "Unable to resolve one or more UIDs",
     "No such name for 'tagk': 'nokey'"),
    ("m=sys.cpu.user{host=web99}", 404, "Unable to resolve one or more UIDs",
     "No such name for 'tagv': 'web99'"),
])
def test_bad_input(lookup_client: FlaskClient, query: str, status: int, message: str | None,
                   details: str | None) -> None:
    response = lookup_client.get(f"/api/search/lookup?{query}")
    assert response.status_code == status, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert error["code"] == status
    if message is not None:
        assert error["message"] == message
    if details is not None:
        assert error["details"] == details


@pytest.mark.parametrize(("body", "message"), [
    ({}, "Missing metric and tags. Please supply at least one value."),
    ({"metric": "*"}, "Missing metric and tags. Please supply at least one value."),
    ({"metric": 5}, "Unable to parse the given JSON"),
    ({"tags": {"host": "web01"}}, "Unable to parse the given JSON"),
    ({"metric": "sys.cpu.user", "limit": "x"}, "Unable to convert 'limit' to a valid number"),
    ([1], "Unable to parse the given JSON"),
])
def test_bad_post(lookup_client: FlaskClient, body: Any, message: str) -> None:
    response = lookup_client.post("/api/search/lookup", json=body)
    assert response.status_code == 400
    assert response.get_json()["error"]["message"] == message


def test_other_search_types_and_verbs(client: FlaskClient) -> None:
    response = client.get("/api/search/tsmeta?query=x")  # served without a plugin
    assert (response.status_code, response.get_json()["totalResults"]) == (200, 0)
    response = client.get("/api/search/nothing")
    assert response.get_json()["error"]["message"] == "Invalid search query type supplied"
    assert client.put("/api/search/lookup?m=x").status_code == 405


def test_salted_store(make_client: Callable[[dict[str, Any]], FlaskClient]) -> None:
    client = make_client({"tsd.storage.salt.width": 1, "tsd.storage.salt.buckets": 4})
    write_series(client, SERIES_POINTS)
    # The series sit in different salt buckets; the answer is the same, in TSUID order.
    assert tsuids(lookup(client, "m=sys.cpu.user")) == [USER_WEB01, USER_WEB02, USER_WEB03,
                                                        USER_LGA]
    assert tsuids(lookup(client, "m={*=jdoe}")) == [NICE_WEB01_JDOE]


def test_default_window(make_client: Callable[[dict[str, Any]], FlaskClient]) -> None:
    client = make_client({"tsd.search.lookup.default_window": "2h"})
    now = int(time.time())
    write_series(client, [("m", {"host": "old"}, [now - 10 * HOUR]),
                          ("m", {"host": "new"}, [now - 10])])
    # metric m 000001, tagk host 000001, tagv old 000001, new 000002.
    assert tsuids(lookup(client, "m=m")) == ["000001000001000002"]
    assert tsuids(lookup(client, "m=m&start=1")) == ["000001000001000001",
                                                     "000001000001000002"]
