"""``"delete": true`` and ``DELETE /api/query`` with ``tsd.query.allow_delete``, on both backends:
exactly the matched series' points in the range go; other series, other times and notes stay."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

HOUR_S = 3600
START_S = 1_699_999_200  # an hour boundary
TIMES_S = [START_S + offset for offset in (0, 1800, 3599, 3600, 5400, 7200 + 60, 7200 + 1800)]


@pytest.fixture
def client_with_data(make_client: Callable[[dict[str, Any]], FlaskClient]) -> FlaskClient:
    client = make_client({"tsd.query.allow_delete": True})
    points = [{"metric": "sys.cpu", "timestamp": ts, "value": i, "tags": {"host": host}}
              for host in ("a", "b") for i, ts in enumerate(TIMES_S)]
    points.append({"metric": "sys.cpu", "timestamp": (START_S + 600) * 1000 + 5,
                   "value": 2.5, "tags": {"host": "a"}})  # a millisecond point
    assert client.post("/api/put", json=points).status_code == 204
    tsuid = client.post("/api/query", json={
        "start": START_S, "showTSUIDs": True,
        "queries": [{"aggregator": "sum", "metric": "sys.cpu", "tags": {"host": "a"}}]}
    ).get_json()[0]["tsuids"][0]
    note = {"tsuid": tsuid, "startTime": START_S + 1800, "description": "in range"}
    assert client.post("/api/annotation", json=note).status_code == 200
    return client


def series(client: FlaskClient, host: str) -> dict[str, Any]:
    body = {"start": START_S - HOUR_S, "end": START_S + 4 * HOUR_S, "msResolution": True,
            "queries": [{"aggregator": "sum", "metric": "sys.cpu", "tags": {"host": host}}]}
    results = client.post("/api/query", json=body).get_json()
    return results[0] if results else {"dps": {}, "annotations": []}


def test_delete_in_query_body(client_with_data: FlaskClient) -> None:
    client = client_with_data
    start_ms, end_ms = (START_S + 1800) * 1000, (START_S + 7200 + 60) * 1000
    before = series(client, "a")["dps"]
    response = client.post("/api/query", json={
        "start": start_ms, "end": end_ms, "delete": True,
        "queries": [{"aggregator": "sum", "metric": "sys.cpu", "tags": {"host": "a"}}]})
    assert response.status_code == 200
    assert response.get_json()[0]["dps"]  # as OpenTSDB: the answer shows what was there
    after = series(client, "a")
    expected = {ts: v for ts, v in before.items() if not start_ms <= int(ts) <= end_ms}
    assert after["dps"] == expected
    assert sorted(int(ts) for ts in after["dps"]) == [START_S * 1000, (START_S + 600) * 1000 + 5,
                                                     (START_S + 7200 + 1800) * 1000]
    assert after["dps"][str((START_S + 600) * 1000 + 5)] == 2.5
    assert [n["description"] for n in after["annotations"]] == ["in range"]
    assert len(series(client, "b")["dps"]) == len(TIMES_S)  # another series: untouched


def test_delete_method(client_with_data: FlaskClient) -> None:
    client = client_with_data
    response = client.delete(f"/api/query?start={START_S - HOUR_S}&end={START_S + 4 * HOUR_S}"
                             "&m=sum:sys.cpu{host=b}")
    assert response.status_code == 200
    assert series(client, "b")["dps"] == {}
    assert len(series(client, "a")["dps"]) == len(TIMES_S) + 1
