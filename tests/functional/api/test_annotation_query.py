"""Annotations inside /api/query results (spec §2.9), as Grafana reads them.

Expectations are by hand from the spec: ``annotations`` holds the series' notes whose start
lies in [start, end], sorted by start; ``globalAnnotations`` (when asked) the global ones
filtered the same way. pytsd fixes OpenTSDB's bugs here: the whole hour row's notes
(issues #365/#418), a missing last hour of global notes (#457) and millisecond start times that
Grafana, computing ``startTime * 1000``, would place 1000 times too late.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient

HOUR = 1388448000  # 2013-12-31 00:00:00 UTC, an hour boundary
TAGS = {"host": "web01"}


@pytest.fixture
def loaded(client: FlaskClient) -> FlaskClient:
    points = [{"metric": "sys.cpu.user", "timestamp": HOUR + i * 60, "value": i, "tags": TAGS}
              for i in range(120)]  # two hour rows of minutely points
    assert client.post("/api/put", data=json.dumps(points)).status_code == 204
    tsuid = client.get(f"/api/query?start={HOUR}&m=sum:sys.cpu.user&show_tsuids").json[0][
        "tsuids"][0]
    notes = [
        {"tsuid": tsuid, "startTime": HOUR + 100, "description": "before the range"},
        {"tsuid": tsuid, "startTime": HOUR + 2000, "description": "series late"},
        {"tsuid": tsuid, "startTime": (HOUR + 1500) * 1000 + 500, "description": "series ms"},
        {"tsuid": tsuid, "startTime": HOUR + 3700, "description": "series next hour"},
        {"startTime": HOUR + 50, "description": "global before"},
        {"startTime": HOUR + 1200, "description": "global in", "endTime": HOUR + 99999},
        {"startTime": HOUR + 3900, "description": "global last hour"},
    ]
    assert client.post("/api/annotation/bulk", data=json.dumps(notes)).status_code == 200
    return client


def query(client: FlaskClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = client.post("/api/query", data=json.dumps(body))
    assert response.status_code == 200, response.get_data(as_text=True)
    return list(response.json or [])


def test_series_notes_only_within_the_range(loaded: FlaskClient) -> None:
    result = query(loaded, {"start": HOUR + 1000, "end": HOUR + 4000,
                            "globalAnnotations": False,
                            "queries": [{"aggregator": "sum", "metric": "sys.cpu.user"}]})
    notes = result[0]["annotations"]
    assert [(n["description"], n["startTime"]) for n in notes] == [
        ("series ms", HOUR + 1500), ("series late", HOUR + 2000),
        ("series next hour", HOUR + 3700)]
    assert "globalAnnotations" not in result[0]
    # Every field Grafana (and OpenTSDB's Jackson order) expects, in that order.
    assert list(notes[0]) == ["tsuid", "description", "notes", "startTime", "endTime"]


def test_global_notes_when_asked(loaded: FlaskClient) -> None:
    result = query(loaded, {"start": (HOUR + 1000) * 1000, "end": (HOUR + 4000) * 1000,
                            "globalAnnotations": True,
                            "queries": [{"aggregator": "sum", "metric": "sys.cpu.user"}]})
    globals_ = result[0]["globalAnnotations"]
    # "global in" ends after the query end: OpenTSDB drops it, pytsd keeps it (start in range).
    assert [n["description"] for n in globals_] == ["global in", "global last hour"]
    assert globals_[0]["tsuid"] == "" and globals_[0]["endTime"] == HOUR + 99999


def test_grafana_annotation_request(loaded: FlaskClient) -> None:
    # Grafana's legacy annotation query (grafana-opentsdb-contract §1.7): no downsample, ms
    # times, no end; it reads response[0].annotations / globalAnnotations, startTime in s.
    result = query(loaded, {"start": (HOUR + 1000) * 1000,
                            "queries": [{"aggregator": "sum", "metric": "sys.cpu.user"}],
                            "msResolution": False, "globalAnnotations": True})
    assert [n["startTime"] for n in result[0]["annotations"]] == [
        HOUR + 1500, HOUR + 2000, HOUR + 3700]
    assert [n["startTime"] for n in result[0]["globalAnnotations"]] == [
        HOUR + 1200, HOUR + 3900]


def test_no_annotations_flag(loaded: FlaskClient) -> None:
    result = query(loaded, {"start": HOUR, "noAnnotations": True, "globalAnnotations": True,
                            "queries": [{"aggregator": "sum", "metric": "sys.cpu.user"}]})
    assert "annotations" not in result[0] and "globalAnnotations" not in result[0]


def test_get_query_with_global_annotations(loaded: FlaskClient) -> None:
    response = loaded.get(f"/api/query?start={HOUR}&end={HOUR + 1100}&m=sum:sys.cpu.user"
                          "&global_annotations")
    assert response.status_code == 200
    result = response.json or []
    assert [n["description"] for n in result[0]["annotations"]] == ["before the range"]
    assert [n["description"] for n in result[0]["globalAnnotations"]] == ["global before"]
