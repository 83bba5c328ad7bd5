"""Data-driven /api/query cases (``tests/cases/*.yaml``) on every backend.

A case names a data set (``tests/cases/datasets.py``) or lists its own points, optionally
compacts the rows first, sends a GET path or a POST body, and states the expected status and
JSON. Expected ``dps`` may be written compactly as a pattern the harness expands:
``{"from": 1356998430, "step": 30, "values": [1, 2, 3]}`` or with
``"count": 300, "first": 1, "delta": 1`` for arithmetic runs (the expected numbers are still
written by hand from the spec; the harness only spells them out).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from flask.testing import FlaskClient

from app.tsdb import TSDB
from app.tsdb.compaction import compact_table
from app.tsdb.writer import DataPoint, PointWriter
from tests.cases.datasets import DATASETS

CASES_DIR = Path(__file__).resolve().parent.parent / "cases"


def load_cases() -> list[Any]:
    params = []
    for path in sorted(CASES_DIR.glob("*.yaml")):
        for case in yaml.safe_load(path.read_text()):
            params.append(pytest.param(case, id=f"{path.stem}:{case['name']}"))
    return params


def expand_dps(dps: Any) -> Any:
    """Spell out a compact ``dps`` pattern; plain mappings and lists pass through."""
    if not isinstance(dps, dict) or "from" not in dps:
        return {str(k): v for k, v in dps.items()} if isinstance(dps, dict) else dps
    if "values" in dps:
        values = list(dps["values"])
    else:
        values = [dps["first"] + i * dps.get("delta", 0) for i in range(dps["count"])]
    return {str(dps["from"] + i * dps["step"]): v for i, v in enumerate(values)}


def expand(expected: Any) -> Any:
    if isinstance(expected, list):
        return [expand(item) for item in expected]
    if isinstance(expected, dict):
        return {k: expand_dps(v) if k == "dps" else expand(v) for k, v in expected.items()}
    return expected


def load_points(tsdb: TSDB, case: dict[str, Any]) -> None:
    points = DATASETS[case["data"]]() if "data" in case else []
    points += [tuple(p) for p in case.get("points", [])]
    errors = PointWriter(tsdb).write([DataPoint(m, ts, v, tags) for m, ts, v, tags in points])
    assert not any(errors), errors
    if case.get("compact"):
        compact_table(tsdb.data_table(), tsdb.layout, now_s=2**31)


def send(client: FlaskClient, case: dict[str, Any]) -> Any:
    if "body" in case:
        return client.post("/api/query", data=json.dumps(case["body"]))
    return client.get(case["query"])


@pytest.mark.parametrize("case", load_cases())
def test_query_case(case: dict[str, Any], tsdb: TSDB, client: FlaskClient) -> None:
    load_points(tsdb, case)
    response = send(client, case)
    expected = case["expect"]
    assert response.status_code == expected.get("status", 200), response.get_data(as_text=True)
    body = json.loads(response.get_data(as_text=True))
    if "error" in expected:
        for key, value in expected["error"].items():
            assert body["error"][key] == value
    if "body" in expected:
        assert body == expand(expected["body"])
    if "text" in expected:
        assert expected["text"] in response.get_data(as_text=True)
