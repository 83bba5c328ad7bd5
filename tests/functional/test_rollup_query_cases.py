"""Every /api/query case again with rollups on, computed by pytsd: the same answers.

The cases' expected bodies were written by hand for raw data (``test_query_cases.py``); here
the rollup tables are filled from the same points (``compute_rollups``) before the query, so
every downsample the planner can answer exactly is answered from rollups, and must still
match. Annotations live in raw rows only, so cases expecting them in rolled-up hours are the
one documented departure (OpenTSDB 2.4 drops them on rollup reads too) and are listed here.
Each case is then asked twice more with the hour cache's clock moved on, so the rollup rows
read are kept and then answered from the cache: the same bytes again.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from flask.testing import FlaskClient

from app import create_app
from app.tsdb import TSDB
from app.tsdb.read.rollup_choice import rollup_horizon_ms
from app.tsdb.rollups import compute_rollups
from tests.functional.test_query_cases import (
    _points,
    assert_same_when_warm,
    expand,
    load_cases,
    load_points,
    mismatch,
    send,
)
from tests.rollup_fixtures import ROLLUP_SETTINGS

DAY_S = 86400


def _roll_up(tsdb: TSDB, case: dict[str, Any], now_s: int) -> None:
    stamps = [p.timestamp // 1000 if p.timestamp > 9_999_999_999 else p.timestamp
              for p in _points(case, now_s)]
    if not stamps:
        return
    start = min(stamps) - min(stamps) % DAY_S
    end = min(max(stamps) + DAY_S, rollup_horizon_ms(tsdb.config["tsd.rollups.compute.lag_s"])
              // 1000)
    compute_rollups(tsdb, start, end)


@pytest.mark.parametrize("case", load_cases())
def test_query_case_with_rollups(case: dict[str, Any], tsd_config: dict[str, Any],
                                 request: pytest.FixtureRequest) -> None:
    tsd_config.update(case.get("config", {}))
    tsd_config.update(ROLLUP_SETTINGS)
    tsdb: TSDB = request.getfixturevalue("tsdb")
    client: FlaskClient = request.getfixturevalue("client")
    _check(tsdb, client, case, request)


def _downsampled(cases: list[Any]) -> list[Any]:
    """The cases with a downsample (the planner reads rollups for no other query)."""
    return [case for case in cases if re.search(r'"downsample"|:\d+[a-z]+-[a-z]', json.dumps(
        {key: case.values[0].get(key) for key in ("query", "body")}))]


@pytest.mark.parametrize("case", _downsampled(load_cases()))
def test_query_case_with_rollups_by_coverage(case: dict[str, Any], tsd_config: dict[str, Any],
                                             request: pytest.FixtureRequest) -> None:
    """The same with pytsd computing the rollups (``tsd.rollups.compute.background``): rolled
    hours read where the coverage record says they hold, the others raw (the app's own
    background pass stays off: the rollups are computed here)."""
    tsd_config.update(case.get("config", {}))
    tsd_config.update({**ROLLUP_SETTINGS, "tsd.rollups.compute.background": True})
    tsdb: TSDB = request.getfixturevalue("tsdb")
    app = create_app({**tsdb.config, "tsd.rollups.compute.background": False})
    app.extensions["tsdb"] = tsdb
    app.config["TESTING"] = True
    _check(tsdb, app.test_client(), case, request)


@pytest.mark.parametrize("case", _downsampled(load_cases()))
def test_query_case_with_rollups_cache_off(case: dict[str, Any], tsd_config: dict[str, Any],
                                           request: pytest.FixtureRequest) -> None:
    """The same with the hour cache off: the embedded store answers from the row columns
    it keeps beside the rollup cells (built by the first read, read by the next two, which
    count the rows as closed: ``assert_same_when_warm``), HBase from the cells."""
    tsd_config.update(case.get("config", {}))
    tsd_config.update({**ROLLUP_SETTINGS, "tsd.query.cache.max_bytes": 0})
    tsdb: TSDB = request.getfixturevalue("tsdb")
    client: FlaskClient = request.getfixturevalue("client")
    _check(tsdb, client, case, request)


def _check(tsdb: TSDB, client: FlaskClient, case: dict[str, Any],
           request: pytest.FixtureRequest) -> None:
    now_s = int(time.time())
    load_points(tsdb, client, case, now_s)
    _roll_up(tsdb, case, now_s)
    response = send(client, case)
    expected = case["expect"]
    text = response.get_data(as_text=True)
    assert response.status_code == expected.get("status", 200), text[:2000]
    body = json.loads(text)
    if "body" in expected:
        found = mismatch(body, expand(expected["body"], now_s))
        assert found is None, found
    if response.status_code == 200:
        assert_same_when_warm(client, case, text, request)  # rollup rows from the cache
