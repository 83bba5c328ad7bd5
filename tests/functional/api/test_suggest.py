"""/api/suggest (spec §7.1 and acceptance case G51, from OpenTSDB's TestSuggestRpc)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient

# TestSuggestRpc's UID table holds the metrics sys.cpu.0.system and sys.mem.free.
POINTS = [
    {"metric": "sys.cpu.0.system", "timestamp": 1356998400, "value": 1,
     "tags": {"host": "web01", "dc": "lga"}},
    {"metric": "sys.mem.free", "timestamp": 1356998400, "value": 2,
     "tags": {"host": "web02", "dc": "Zürich"}},
]


@pytest.fixture
def suggest_client(client: FlaskClient) -> FlaskClient:
    assert client.post("/api/put", json=POINTS).status_code == 204
    return client


def get(client: FlaskClient, query: str) -> Any:
    return client.get(f"/api/suggest?{query}")


def error(response: Any) -> dict[str, Any]:
    body = response.get_json()
    assert set(body) == {"error"}
    return dict(body["error"])


def test_metrics_by_prefix(suggest_client: FlaskClient) -> None:
    response = get(suggest_client, "type=metrics&q=s")
    assert response.status_code == 200
    assert response.get_json() == ["sys.cpu.0.system", "sys.mem.free"]


def test_max_caps_the_list_exactly(suggest_client: FlaskClient) -> None:
    # TestSuggestRpc#metricQSMax: max=1 gives one item (and never max+1, OpenTSDB issue #238).
    assert get(suggest_client, "type=metrics&q=s&max=1").get_json() == ["sys.cpu.0.system"]


@pytest.mark.parametrize("query", ["type=metrics", "type=metrics&q="])
def test_empty_or_missing_q_lists_everything(suggest_client: FlaskClient, query: str) -> None:
    assert get(suggest_client, query).get_json() == ["sys.cpu.0.system", "sys.mem.free"]


def test_tagk_and_tagv(suggest_client: FlaskClient) -> None:
    assert get(suggest_client, "type=tagk&q=").get_json() == ["dc", "host"]
    assert get(suggest_client, "type=tagv&q=web").get_json() == ["web01", "web02"]
    # Unicode names are listed too (OpenTSDB's empty-q scan stops at '~').
    assert get(suggest_client, "type=tagv").get_json() == ["Zürich", "lga", "web01", "web02"]
    assert get(suggest_client, "type=tagv&q=Z%C3%BC").get_json() == ["Zürich"]


def test_no_match_is_an_empty_200(suggest_client: FlaskClient) -> None:
    # Grafana's backend health check needs exactly 200 for ?q=cpu&type=metrics (contract §1.1).
    response = get(suggest_client, "q=cpu&type=metrics")
    assert response.status_code == 200
    assert response.get_json() == []


def test_prefix_is_case_sensitive(suggest_client: FlaskClient) -> None:
    assert get(suggest_client, "type=metrics&q=S").get_json() == []


@pytest.mark.parametrize("raw_max", ["0", "-3", ""])
def test_non_positive_max_means_25(client: FlaskClient, raw_max: str) -> None:
    names = [f"m{i:02d}" for i in range(30)]
    response = client.get("/api/uid/assign?metric=" + ",".join(names))
    assert response.status_code == 200
    assert get(client, f"type=metrics&max={raw_max}").get_json() == names[:25]


def test_large_max_returns_all(client: FlaskClient) -> None:
    names = [f"m{i:02d}" for i in range(30)]
    client.get("/api/uid/assign?metric=" + ",".join(names))
    assert get(client, "type=metrics&max=1000").get_json() == names


def test_post_body(suggest_client: FlaskClient) -> None:
    response = suggest_client.post("/api/suggest", json={"type": "metrics", "q": "sys.m",
                                                         "max": 10})
    assert response.status_code == 200
    assert response.get_json() == ["sys.mem.free"]
    response = suggest_client.post("/api/suggest", json={"type": "tagk", "max": "1"})
    assert response.get_json() == ["dc"]


def test_v1_prefix(suggest_client: FlaskClient) -> None:
    assert suggest_client.get("/api/v1/suggest?type=metrics&q=sys.m").get_json() == [
        "sys.mem.free"]


@pytest.mark.parametrize(("query", "message"), [
    ("type=doesnotexist", "Invalid 'type' parameter:doesnotexist"),
    ("type=Metrics", "Invalid 'type' parameter:Metrics"),  # exact case
    ("q=s", "Missing parameter <code>type</code>"),
    ("type=metrics&max=foo", "Unable to parse 'max' as a number"),
    ("type=metrics&max=1.5", "Unable to parse 'max' as a number"),
])
def test_bad_get(client: FlaskClient, query: str, message: str) -> None:
    response = get(client, query)
    assert response.status_code == 400
    assert error(response)["message"] == message


@pytest.mark.parametrize(("body", "message"), [
    ("", "Missing message content"),
    ("{}", "Missing 'type' parameter"),
    ('{"type": "nope"}', "Invalid 'type' parameter:nope"),
    ('{"type": "metrics", "max": 2.5}', "Unable to parse 'max' as a number"),
    ('{"type": "metrics", "q": 5}', "Invalid 'q' parameter"),
    ('["metrics"]', "Unable to parse the given JSON"),
    ("{nope", "Unable to parse the given JSON"),
])
def test_bad_post(client: FlaskClient, body: str, message: str) -> None:
    response = client.post("/api/suggest", data=body, content_type="application/json")
    assert response.status_code == 400
    assert error(response)["message"] == message


def test_wrong_verb(client: FlaskClient) -> None:
    response = client.put("/api/suggest?type=metrics", data=json.dumps({}))
    assert response.status_code == 405
    assert error(response)["message"] == "Method not allowed"
