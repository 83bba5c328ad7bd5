"""Guardrails of ``/api/query``, on every backend: the data-point limit (413), the query timeout
(408), and malformed input, which OpenTSDB 2.4 often answers with a 500 and pytsd with a 400.

Data: spec §9's data set L (600 points of sys.cpu.user, 300 per host, and the same for
sys.cpu.system). Messages come from spec §2.3, §2.7 and §8 (OpenTSDB's wording), or from
docs/query-differences.md where pytsd deliberately differs.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from werkzeug.test import TestResponse

from app.tsdb.writer import DataPoint, PointWriter
from tests.cases.datasets import long_seconds
from tests.conftest import app_over, drop_tables, make_tsdb

RANGE = "start=1356998400&end=1357041600"
LIMIT_MESSAGE = ("Sorry, you have attempted to fetch more than our limit of {limit} data points "
                 "(sub query {index} read {read}). Please try filtering using more tags or "
                 "decrease your time range.")


@pytest.fixture
def make_client(tsd_config: dict[str, Any]) -> Iterator[Callable[..., FlaskClient]]:
    """Build an app over data set L with configuration overrides (as test_put.py does)."""
    made = []

    def build(**overrides: Any) -> FlaskClient:
        tsdb = make_tsdb({**tsd_config, **overrides})
        made.append(tsdb)
        assert not any(PointWriter(tsdb).write([DataPoint(*p) for p in long_seconds()]))
        app = app_over(tsdb)
        return app.test_client()

    yield build
    for tsdb in made:
        drop_tables(tsdb)


@pytest.fixture
def client_l(make_client: Callable[..., FlaskClient]) -> FlaskClient:
    return make_client()


def error_of(response: TestResponse, status: int) -> dict[str, Any]:
    """OpenTSDB's error JSON with the given status, ``code`` equal to it."""
    assert response.status_code == status, response.get_data(as_text=True)[:500]
    body = json.loads(response.get_data(as_text=True))
    assert set(body) == {"error"} and body["error"]["code"] == status
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return dict(body["error"])


# --------------------------------------------------------------------- data-point limit (413)
def test_data_point_limit_names_the_sub_query(make_client: Callable[..., FlaskClient],
                                              caplog: pytest.LogCaptureFixture) -> None:
    # Sub query 0 reads web01's 300 points of sys.cpu.system, sub query 1 all 600 of
    # sys.cpu.user: only the second is over 500.
    client = make_client(**{"tsd.query.limits.data_points.default": 500})
    with caplog.at_level(logging.WARNING):
        response = client.get(f"/api/query?{RANGE}&m=sum:sys.cpu.system{{host=web01}}"
                              "&m=sum:sys.cpu.user")
    error = error_of(response, 413)
    assert error["message"] == LIMIT_MESSAGE.format(limit=500, index=1, read=600)
    # The details carry the query text, as OpenTSDB's validation errors do.
    assert error["details"].startswith("TSQuery(start_time=1356998400, end_time=1357041600, ")
    assert "TSSubQuery(metric=sys.cpu.user, " in error["details"]
    logged = [r.getMessage() for r in caplog.records if "limit of 500" in r.getMessage()]
    assert len(logged) == 1 and "TSSubQuery(metric=sys.cpu.user, " in logged[0]  # once


def test_data_point_limit_in_a_post(make_client: Callable[..., FlaskClient]) -> None:
    client = make_client(**{"tsd.query.limits.data_points.default": 299})
    body = {"start": 1356998400, "end": 1357041600,
            "queries": [{"aggregator": "sum", "metric": "sys.cpu.user",
                         "tags": {"host": "web01"}}]}
    error = error_of(client.post("/api/query", data=json.dumps(body)), 413)
    assert error["message"] == LIMIT_MESSAGE.format(limit=299, index=0, read=300)


def test_data_point_limit_is_inclusive(make_client: Callable[..., FlaskClient]) -> None:
    # Exactly at the limit is allowed; the limit is per sub-query, not per request.
    client = make_client(**{"tsd.query.limits.data_points.default": 600})
    response = client.get(f"/api/query?{RANGE}&m=sum:sys.cpu.user&m=sum:sys.cpu.system")
    assert response.status_code == 200
    assert [len(series["dps"]) for series in response.get_json()] == [300, 300]


# --------------------------------------------------------------------------- timeout (408)
def test_query_timeout(make_client: Callable[..., FlaskClient],
                       caplog: pytest.LogCaptureFixture) -> None:
    # 1 ms cannot cover reading and aggregating 600 points.
    client = make_client(**{"tsd.query.timeout": 1})
    with caplog.at_level(logging.WARNING):
        response = client.get(f"/api/query?{RANGE}&m=sum:1m-avg:sys.cpu.user"
                              "&m=sum:rate:sys.cpu.system&m=max:sys.cpu.user{host=*}")
    error = error_of(response, 408)
    assert error["message"].startswith("Query timeout exceeded after ")
    assert error["message"].endswith(", in sub query 0 (tsd.query.timeout=1)")
    assert "TSSubQuery(metric=sys.cpu.system, " in error["details"]
    assert any("tsd.query.timeout=1" in r.getMessage() and "TSQuery(" in r.getMessage()
               for r in caplog.records)


def test_generous_timeout_and_limit_let_queries_through(
        make_client: Callable[..., FlaskClient]) -> None:
    client = make_client(**{"tsd.query.timeout": 60_000,
                            "tsd.query.limits.data_points.default": 10_000})
    response = client.get(f"/api/query?{RANGE}&m=sum:sys.cpu.user")
    assert response.status_code == 200
    assert set(response.get_json()[0]["dps"].values()) == {301}


# -------------------------------------------------- malformed input: 400, never a 500 (§2.3)
# (m=, message). OpenTSDB answers the first group with a 500 (an IllegalArgumentException or
# StringIndexOutOfBounds escaping the parser, spec §2.3 and §8): pytsd keeps the message but
# answers 400 (docs/query-differences.md). None: only the status and error shape are checked.
BAD_M: list[tuple[str, str | None]] = [
    # unbalanced or misplaced braces
    ("sum:sys.cpu.user{host=web01", "Missing '}' at the end of: sys.cpu.user{host=web01"),
    ("sum:sys.cpu.user{host=web01}}", None),
    ("sum:sys.cpu.user}{host=web01}", None),
    ("sum:sys.cpu.user{{host=web01}", None),
    ("sum:sys.cpu.user{host=web01}{host=web02}{}", None),
    ("sum:sys.cpu.user{{{{}}}}", None),
    ("sum:sys.cpu.user{host=regexp(a{2})}", None),  # braces cannot appear in a filter
    # empty or broken parts
    ("sum:sys.cpu.user{host}", "When parsing tag 'host': invalid tag: host"),
    ("sum:sys.cpu.user{=web01}", "When parsing tag '=web01': invalid tag: =web01"),
    ("sum:sys.cpu.user{host=}", "When parsing tag 'host=': invalid tag: host="),
    ("sum:sys.cpu.user{host==web01}", "When parsing tag 'host==web01': invalid tag: host==web01"),
    ("sum:sys.cpu.user{}{dc}", "When parsing filter 'dc': invalid tag: dc"),
    ("sum::sys.cpu.user", None),  # an empty modifier: StringIndexOutOfBounds in OpenTSDB
    ("sum:1m-avg::sys.cpu.user", None),
    ("sum:", "Metric cannot be null or empty"),
    (":sys.cpu.user", "Missing the aggregation function"),
    ("sum", "Invalid parameter m=sum (not enough :-separated parts)"),
    ("sum:a:b:c:d:e", "Invalid parameter m=sum:a:b:c:d:e (too many :-separated parts)"),
    # filter types and expressions
    ("sum:sys.cpu.user{host=dummyfilter(*quirm)}",
     "When parsing tag 'host=dummyfilter(*quirm)': Could not find a tag value filter of the "
     "type: dummyfilter"),
    ("sum:sys.cpu.user{host=regexp(()}", None),
    ("sum:sys.cpu.user{}{host=regexp([)}", None),
    ("sum:sys.cpu.user{host=regexp(*)}", None),
    ("sum:sys.cpu.user{host=wildcard(web01)}",
     "When parsing tag 'host=wildcard(web01)': Filter must contain an asterisk"),
    ("sum:sys.cpu.user{host=literal_or(|)}",
     "When parsing tag 'host=literal_or(|)': Filter must contain more than just a pipe"),
    ("sum:sys.cpu.user{host=iliteral_or()}", None),
    ("sum:sys.cpu.user{host=not_key(x)}", None),  # not_key takes no value (pytsd)
    ("SUM:sys.cpu.user", "No such aggregation function: SUM"),
    # rate options
    ("sum:rate{:sys.cpu.user", "Invalid rate options specification: rate{"),
    ("sum:rate{counter:sys.cpu.user", "Invalid rate options specification: rate{counter"),
    ("sum:rate{counter,1,2,3}:sys.cpu.user",
     "Incorrect number of values in rate options specification, must be counter[,counter max "
     "value,reset value], recieved: 4 parts"),
    ("sum:rate{counter,abc}:sys.cpu.user",
     "Max value of counter was not a number, received 'abc'"),
    ("sum:rate{counter,,1.5}:sys.cpu.user",
     "Reset value of counter was not a number, received '1.5'"),
    # huge numbers
    ("sum:rate{counter,99999999999999999999999}:sys.cpu.user",
     "Max value of counter was not a number, received '99999999999999999999999'"),
    ("sum:99999999999999999999h-avg:sys.cpu.user", None),
    ("sum:1000000000000000y-avg:sys.cpu.user",
     "Duration must be < Long.MAX_VALUE ms: 1000000000000000y"),
    ("sum:percentiles[1e999]:sys.cpu.user", None),
    # downsample specs
    ("sum:0m-avg:sys.cpu.user", "Zero or negative duration: 0m"),
    ("sum:1m:sys.cpu.user",
     "Invalid downsampling specifier '1m': must provide at least interval and function"),
    ("sum:1m-avg-nan-x:sys.cpu.user", None),
    ("sum:1e3m-avg:sys.cpu.user", "Invalid duration (suffix): 1e3m"),
    ("sum:1m-avg-scalar:sys.cpu.user", None),  # OpenTSDB: a 500 on the first empty bucket
    ("sum:percentiles[abc]:sys.cpu.user", "Invalid percentiles specification: percentiles[abc]"),
    # unicode and control characters (names that do not exist)
    ("sum:sys.cpu.üser", "No such name for 'metrics': 'sys.cpu.üser'"),
    ("sum:sys.cpu.user{hôst=wéb01}", "No such name for 'tagk': 'hôst'"),
    ("sum:sys.cpu.user{host=💥}", "No such name for 'tagv': '💥'"),
    ("sum:sys.cpu.user\x00", None),
    ("sum:sys.cpu.user{host=web01|}{host=|}", None),
]


@pytest.mark.parametrize(("m", "message"), BAD_M, ids=[repr(m) for m, _ in BAD_M])
def test_malformed_m_is_a_400(client_l: FlaskClient, m: str, message: str | None) -> None:
    response = client_l.get(f"/api/query?{RANGE}&m={urllib.parse.quote(m)}")
    error = error_of(response, 400)
    if message is not None:
        assert error["message"] == message


BAD_TSUID: list[tuple[str, str | None]] = [
    ("sum:XYZ", "Invalid TSUID: XYZ"),
    ("sum:00000100000100000", "Invalid TSUID: 00000100000100000"),  # odd length
    ("sum:0000010000", "Invalid TSUID: 0000010000"),  # not whole UIDs
    ("sum:", None),
    # OpenTSDB: IllegalArgumentException, a 500 (spec §2.4)
    ("sum:000001000001000001,000002000001000001",
     "One or more TSUIDs did not share the same metric [000001] [000002]"),
    ("sum:1m-avg:000001000001000001,00000200000100000A", None),
]


@pytest.mark.parametrize(("tsuid", "message"), BAD_TSUID)
def test_malformed_tsuid_is_a_400(client_l: FlaskClient, tsuid: str,
                                  message: str | None) -> None:
    error = error_of(client_l.get(f"/api/query?{RANGE}&tsuid={urllib.parse.quote(tsuid)}"), 400)
    if message is not None:
        assert error["message"] == message


BAD_BODIES = [
    ({"start": 1356998400}, "Missing queries"),  # OpenTSDB: an NPE, a 500 (spec §2.2)
    ({"start": 1356998400, "queries": [{"aggregator": "sum", "metric": "sys.cpu.user",
                                        "filters": [{"type": "regexp", "tagk": "host",
                                                     "filter": "("}]}]}, None),
    ({"start": 1356998400, "queries": [{"aggregator": "sum", "metric": "sys.cpu.user",
                                        "tsuids": ["0000010000"]}]}, "Invalid TSUID: 0000010000"),
    ({"start": 1356998400, "queries": [{"aggregator": "sum", "metric": "sys.cpu.user",
                                        "downsample": "99999999999999999999h-avg"}]}, None),
    ({"start": 1356998400, "queries": [{"aggregator": "sum", "metric": "sys.cpu.user",
                                        "rate": True, "rateOptions": {"counterMax": "x"}}]},
     None),
    ({"start": 1e300, "queries": [{"aggregator": "sum", "metric": "sys.cpu.user"}]}, None),
    ({"start": [1], "queries": {"aggregator": "sum"}}, None),
    ({"start": 1356998400, "queries": [None, 7, "m"]}, None),
]


@pytest.mark.parametrize(("body", "message"), BAD_BODIES)
def test_malformed_json_is_a_400(client_l: FlaskClient, body: dict[str, Any],
                                 message: str | None) -> None:
    error = error_of(client_l.post("/api/query", data=json.dumps(body)), 400)
    if message is not None:
        assert error["message"] == message


# Anything built from the grammar's own characters, names and numbers.
M_PIECES = st.sampled_from(["sum", "rate", "avg", "none", "p99", "ep50r7", "sys.cpu.user",
                            "host", "web01", "*", "{", "}", "=", ",", ":", "|", "(", ")", "[",
                            "]", "-", "1m", "0all", "1dc", "counter", "explicit_tags",
                            "regexp", "wildcard", "literal_or", "not_key", "nan", "null", "9" * 25,
                            "é", "💥", "\\", "%", " "])


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(M_PIECES, max_size=12))
def test_no_m_value_makes_a_500(client_l: FlaskClient, pieces: list[str]) -> None:
    m = "".join(pieces)
    response = client_l.get(f"/api/query?{RANGE}&m={urllib.parse.quote(m)}")
    assert response.status_code in (200, 400), (m, response.get_data(as_text=True)[:300])
    if response.status_code == 400:
        error_of(response, 400)
