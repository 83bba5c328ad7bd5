"""Data-driven /api/query cases (``tests/cases/*.yaml``) on every backend.

A case names a data set (``tests/cases/datasets.py``), lists its own ``points`` or arithmetic
``series`` runs, optionally sets store ``config`` (e.g. ``tsd.storage.salt.width: 1``), compacts
the rows first (``compact: true``), sends ``setup`` requests (e.g. an annotation), then a GET
``query`` or a POST ``body``, and states the expected status and JSON.

Expected ``dps`` may be written compactly as a pattern the harness expands:
``{"from": 1356998430, "step": 30, "values": [1, 2, 3]}``, or ``"count": 300, "first": 1,
"delta": 1`` for arithmetic runs (no ``delta``: ``first`` repeated, also ``"NaN"`` or ``null``),
or ``{"merge": [pattern, {"<ts>": v}, ...]}`` for interleaved runs; ``"arrays": true`` spells
the result as ``[[ts, v], ...]``. The expected numbers are still written by hand from the spec;
the harness only spells them out. Timestamps (points and ``dps`` keys) may be ``now-<seconds>``
for queries relative to the present.

Comparison is strict where OpenTSDB's output is: an integer must print as an integer and a
double as a double (``2`` vs ``2.0``), series objects keep OpenTSDB's key order and ``dps`` keys
ascend; doubles compare to 12 significant digits. ``"*"`` matches any value and a ``"..."`` key
lets an object have keys the case does not list.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from flask.testing import FlaskClient

from app.tsdb import TSDB, hour_cache
from app.tsdb.compaction import compact_table
from app.tsdb.writer import DataPoint, PointWriter
from tests.cases.datasets import DATASETS

CASES_DIR = Path(__file__).resolve().parent.parent / "cases"
_NOW = re.compile(r"^now([+-]\d+)?$")
_TIMING = re.compile(r'("[A-Za-z]*Time[A-Za-z]*":)[-0-9.e+]+')


def load_cases() -> list[Any]:
    params = []
    for path in sorted(CASES_DIR.glob("*.yaml")):
        for case in yaml.safe_load(path.read_text()):
            params.append(pytest.param(case, id=f"{path.stem}:{case['name']}"))
    return params


def resolve_time(value: Any, now_s: int) -> Any:
    """``now-1800`` → the epoch second 1800 s before the case started; others unchanged."""
    match = _NOW.match(value) if isinstance(value, str) else None
    return now_s + int(match.group(1) or 0) if match else value


def _run(pattern: dict[str, Any], now_s: int) -> list[tuple[int, Any]]:
    if "merge" in pattern:
        return sorted((p for part in pattern["merge"] for p in _run(part, now_s)),
                      key=lambda p: p[0])
    if "from" not in pattern:
        return [(int(resolve_time(k, now_s)), v) for k, v in pattern.items()]
    if "values" in pattern:
        values = list(pattern["values"])
    elif "delta" in pattern:
        values = [pattern["first"] + i * pattern["delta"] for i in range(pattern["count"])]
    else:
        values = [pattern["first"]] * pattern["count"]
    start = int(resolve_time(pattern["from"], now_s))
    return [(start + i * pattern.get("step", 0), v) for i, v in enumerate(values)]


def expand_dps(dps: Any, now_s: int = 0) -> Any:
    """Spell out a ``dps`` pattern; a plain list (arrays output) passes through."""
    if not isinstance(dps, dict):
        return dps
    points = _run(dps, now_s)
    if dps.get("arrays"):
        return [[ts, v] for ts, v in points]
    return {str(ts): v for ts, v in points}


def expand(expected: Any, now_s: int = 0) -> Any:
    if isinstance(expected, list):
        return [expand(item, now_s) for item in expected]
    if isinstance(expected, dict):
        return {k: expand_dps(v, now_s) if k == "dps" else expand(v, now_s)
                for k, v in expected.items()}
    return expected


def mismatch(actual: Any, expected: Any, path: str = "$") -> str | None:
    """Where ``actual`` differs from ``expected`` (see the module docstring), or None."""
    if expected == "*":
        return None
    if isinstance(expected, dict):
        return _object_mismatch(actual, expected, path)
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            size = len(actual) if isinstance(actual, list) else type(actual).__name__
            return f"{path}: expected {len(expected)} items, got {size}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            if (found := mismatch(a, e, f"{path}[{i}]")) is not None:
                return found
        return None
    if type(actual) is not type(expected):
        return f"{path}: expected {expected!r} ({type(expected).__name__}), got {actual!r}"
    if isinstance(expected, float) and math.isclose(actual, expected, rel_tol=1e-12):
        return None
    return None if actual == expected else f"{path}: expected {expected!r}, got {actual!r}"


def _object_mismatch(actual: Any, expected: dict[str, Any], path: str) -> str | None:
    if not isinstance(actual, dict):
        return f"{path}: expected an object, got {actual!r}"
    keys = [k for k in expected if k != "..."]
    if "..." not in expected:
        ordered = "dps" in expected  # a series object: OpenTSDB's field order
        if (list(actual) if ordered else sorted(actual)) != (keys if ordered else sorted(keys)):
            return f"{path}: expected keys {keys}, got {list(actual)}"
    for key in keys:
        if key not in actual:
            return f"{path}: missing {key!r}"
        if key == "dps" and isinstance(expected[key], dict):
            found = _dps_mismatch(actual[key], expected[key], f"{path}.dps")
        else:
            found = mismatch(actual[key], expected[key], f"{path}.{key}")
        if found is not None:
            return found
    return None


def _dps_mismatch(actual: Any, expected: dict[str, Any], path: str) -> str | None:
    """Compare point by point, so the ascending order of the keys is checked too."""
    if not isinstance(actual, dict):
        return f"{path}: expected an object, got {type(actual).__name__}"
    pairs = sorted(expected.items(), key=lambda kv: int(kv[0]))
    if len(actual) != len(pairs):
        return f"{path}: expected {len(pairs)} points, got {len(actual)}"
    for (got_ts, got), (want_ts, want) in zip(actual.items(), pairs, strict=True):
        if got_ts != want_ts:
            return f"{path}: expected key {want_ts}, got {got_ts}"
        if (found := mismatch(got, want, f"{path}[{want_ts}]")) is not None:
            return found
    return None


def _points(case: dict[str, Any], now_s: int) -> list[DataPoint]:
    points = DATASETS[case["data"]]() if "data" in case else []
    points += [tuple(p) for p in case.get("points", [])]
    for run in case.get("series", []):
        points += [(run["metric"], ts, v, run["tags"]) for ts, v in _run(run, now_s)]
    return [DataPoint(m, int(resolve_time(ts, now_s)), v, tags) for m, ts, v, tags in points]


def load_points(tsdb: TSDB, client: FlaskClient, case: dict[str, Any], now_s: int) -> None:
    errors = PointWriter(tsdb).write(_points(case, now_s))
    assert not any(errors), errors
    if case.get("compact"):
        compact_table(tsdb.data_table(), tsdb.layout, now_s=2**31)
    for step in case.get("setup", []):
        response = client.open(step["path"], method=step.get("method", "POST"),
                               data=json.dumps(step["body"]) if "body" in step else None)
        assert response.status_code < 300, response.get_data(as_text=True)


def assert_same_when_warm(client: FlaskClient, case: dict[str, Any], cold_text: str,
                          request: pytest.FixtureRequest) -> None:
    """The query again with the hour cache's clock two hours on, so the rows just written
    count as closed and settled: a first read keeps their decodes, a second answers from
    them. Both must answer exactly what the cold read answered."""
    if case.get("body", {}).get("delete"):
        return  # the first read deleted the points
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    real_clock = hour_cache.clock_ms
    monkeypatch.setattr(hour_cache, "clock_ms", lambda: real_clock() + 2 * 3600_000)
    for _ in range(2):
        assert _untimed(send(client, case).get_data(as_text=True)) == _untimed(cold_text)
    monkeypatch.setattr(hour_cache, "clock_ms", real_clock)


def _untimed(text: str) -> str:
    """The answer without its timings (``show_summary``, ``show_stats``)."""
    return _TIMING.sub(r"\1 0", text)


def send(client: FlaskClient, case: dict[str, Any]) -> Any:
    if "body" in case:
        return client.post(case.get("path", "/api/query"), data=json.dumps(case["body"]))
    return client.get(case["query"])


@pytest.mark.parametrize("case", load_cases())
def test_query_case(case: dict[str, Any], tsd_config: dict[str, Any],
                    request: pytest.FixtureRequest) -> None:
    tsd_config.update(case.get("config", {}))  # before the store is built
    tsdb: TSDB = request.getfixturevalue("tsdb")
    client: FlaskClient = request.getfixturevalue("client")
    now_s = int(time.time())
    load_points(tsdb, client, case, now_s)
    response = send(client, case)
    expected = case["expect"]
    text = response.get_data(as_text=True)
    if response.status_code == 200:
        assert_same_when_warm(client, case, text, request)
    assert response.status_code == expected.get("status", 200), text[:2000]
    body = json.loads(text)
    if "error" in expected:
        for key, value in expected["error"].items():
            assert body["error"][key] == value
    if "body" in expected:
        found = mismatch(body, expand(expected["body"], now_s))
        assert found is None, found
    texts = expected.get("text", [])
    for snippet in [texts] if isinstance(texts, str) else texts:
        assert snippet in text
