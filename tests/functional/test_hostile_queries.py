"""Heavy and hostile queries are refused or stopped before the work, on every backend:
the emitted-points limit (buckets x series, 413), the deadline inside the read and the engine
(408), and regexp filters that would pin a backtracking engine (issue 11 items 1-3).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from app.errors import QueryTimeoutError
from app.query.ast import Downsample, SubQuery
from app.query.limits import Deadline
from app.tsdb import TSDB
from app.tsdb.reader import CHECK_EVERY_ROWS, SeriesReader
from app.tsdb.writer import DataPoint, PointWriter
from tests.cases.datasets import long_seconds
from tests.conftest import app_over, drop_tables, make_tsdb

RANGE = "start=1356998400&end=1357041600"  # 12 h around data set L (2 hosts, 300 points each)


@pytest.fixture
def make_client(tsd_config: dict[str, Any]) -> Iterator[Callable[..., FlaskClient]]:
    made = []

    def build(points: list[DataPoint] | None = None, **overrides: Any) -> FlaskClient:
        tsdb = make_tsdb({**tsd_config, **overrides})
        made.append(tsdb)
        data = points if points is not None else [DataPoint(*p) for p in long_seconds()]
        assert not any(PointWriter(tsdb).write(data))
        return app_over(tsdb).test_client()

    yield build
    for tsdb in made:
        drop_tables(tsdb)


def error_of(response: TestResponse, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)[:500]
    body = json.loads(response.get_data(as_text=True))
    assert set(body) == {"error"} and body["error"]["code"] == status
    return dict(body["error"])


# ------------------------------------------------------------- emitted points (413, early)
@pytest.mark.parametrize("downsample", ["1s-avg-zero", "1m-avg-zero", "1m-sum-nan",
                                        "1m-avg-null"])
def test_filled_buckets_since_1970_are_refused_at_once(demo_app: Flask, downsample: str) -> None:
    # Today's server materialised every empty bucket since 1970 (22 GB for 1s, 39 s for 1m).
    started = time.perf_counter()
    response = demo_app.test_client().get(
        f"/api/query?start=0&m=sum:{downsample}:sys.cpu.user{{host=web01}}")
    elapsed_s = time.perf_counter() - started
    error = error_of(response, 413)
    assert error["message"].startswith("Sorry, you have attempted to emit more than our limit "
                                       "of 5000000 data points (sub query 0 would emit ")
    assert "filled buckets x 1 series" in error["message"]
    assert elapsed_s < 1.0


def test_buckets_times_series_is_checked_before_decoding(
        make_client: Callable[..., FlaskClient]) -> None:
    # 12 h of 1-minute buckets (plus the scan window's margins) for each of 2 hosts.
    client = make_client(**{"tsd.query.limits.emitted_points": 1000})
    error = error_of(client.get(f"/api/query?{RANGE}&m=none:1m-avg-zero:sys.cpu.user"), 413)
    # Margins: an hour and an interval each side -> (12 h + 2 h + 2 min) / 1 min + 1 buckets.
    assert error["message"] == (
        "Sorry, you have attempted to emit more than our limit of 1000 data points (sub query "
        "0 would emit 1686: 843 filled buckets x 2 series). Please try downsampling, a longer "
        "downsample interval, filtering using more tags or decrease your time range.")
    assert "TSSubQuery(metric=sys.cpu.user, " in error["details"]


def test_filled_query_within_the_limit_answers(make_client: Callable[..., FlaskClient]) -> None:
    client = make_client(**{"tsd.query.limits.emitted_points": 1686})
    response = client.get(f"/api/query?{RANGE}&m=none:1m-avg-zero:sys.cpu.user")
    assert response.status_code == 200, response.get_data(as_text=True)[:300]
    # The serializer keeps [start, end]: 12 h of minutes, both ends included, per host.
    assert [len(series["dps"]) for series in response.get_json()] == [721, 721]


def test_raw_output_is_bounded_before_serialising(make_client: Callable[..., FlaskClient]) -> None:
    client = make_client(**{"tsd.query.limits.emitted_points": 599})
    error = error_of(client.get(f"/api/query?{RANGE}&m=none:sys.cpu.user"), 413)
    assert "(sub query 0 would emit 600)" in error["message"]
    # Aggregated, the same 600 points read emit 300 (one per timestamp): allowed.
    response = client.get(f"/api/query?{RANGE}&m=sum:sys.cpu.user")
    assert response.status_code == 200
    assert len(response.get_json()[0]["dps"]) == 300


def test_byte_limit_names_the_sub_query(make_client: Callable[..., FlaskClient]) -> None:
    client = make_client(**{"tsd.query.limits.bytes.default": 100})
    error = error_of(client.get(f"/api/query?{RANGE}&m=sum:sys.cpu.user"), 413)
    assert error["message"].startswith("Sorry, you have attempted to fetch more than our "
                                       "maximum amount of 0MB from storage (sub query 0 read ")


# --------------------------------------------------------------------------- the deadline
HOURS = 3 * CHECK_EVERY_ROWS


@pytest.fixture
def many_rows(tsdb: TSDB) -> TSDB:
    """One series with one point in each of ``HOURS`` hour rows."""
    points = [DataPoint("sys.cpu.user", 1356998400 + 3600 * h, h, {"host": "web01"})
              for h in range(HOURS)]
    assert not any(PointWriter(tsdb).write(points))
    return tsdb


def _expired() -> Deadline:
    deadline = Deadline(1)
    time.sleep(0.005)
    return deadline


# The stopped scan must be closed at once, not by the garbage collector in the middle of a
# later Thrift call (which broke the connection on HBase).
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_deadline_stops_the_read_within_a_chunk_of_rows(many_rows: TSDB) -> None:
    reader = SeriesReader(many_rows, deadline=_expired())
    end_ms = (1356998400 + 3600 * HOURS) * 1000
    with pytest.raises(QueryTimeoutError) as info:
        reader.read(SubQuery("sum", index=2, metric="sys.cpu.user"), 1356998400000, end_ms)
    assert info.value.message.endswith(", in sub query 2 (tsd.query.timeout=1)")
    assert reader.stats.rows == CHECK_EVERY_ROWS  # stopped at the first check, not the end
    assert reader.stats.points == 0


def test_deadline_stops_the_engine(many_rows: TSDB) -> None:
    from app.engine.execute import run_subquery

    end_ms = (1356998400 + 3600 * HOURS) * 1000
    sub = SubQuery("sum", metric="sys.cpu.user",
                   downsample=Downsample("1h-avg", 3_600_000, 1, "h", "avg"))
    series = SeriesReader(many_rows).read(sub, 1356998400000, end_ms)
    assert sum(s.ts_ms.size for s in series) == HOURS
    with pytest.raises(QueryTimeoutError):
        run_subquery(sub, "sys.cpu.user", series, 1356998400000, end_ms, deadline=_expired())
    assert run_subquery(sub, "sys.cpu.user", series, 1356998400000, end_ms)[0].ts_ms.size


def test_default_timeout_is_set() -> None:
    from app.config import SETTINGS

    assert 0 < SETTINGS["tsd.query.timeout"].default <= 120_000


# ------------------------------------------------------------------- regexp in linear time
PATHOLOGICAL = "(a+)+$"


def _hosts_points() -> list[DataPoint]:
    values = {"a" * 30: 1, "a" * 29 + "-": 2, "web01": 3}
    return [DataPoint("sys.cpu.user", 1356998400 + 30 * k, value, {"host": host})
            for host, value in values.items() for k in range(3)]


def test_two_pathological_regexps_answer_correctly_within_a_second(
        make_client: Callable[..., FlaskClient]) -> None:
    client = make_client(_hosts_points())
    m = urllib.parse.quote(f"sum:sys.cpu.user{{host=regexp({PATHOLOGICAL})}}")
    url = f"/api/query?{RANGE}&m={m}"
    answers: list[TestResponse] = []

    def ask() -> None:
        answers.append(client.get(url))

    threads = [threading.Thread(target=ask, daemon=True) for _ in range(2)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    elapsed_s = time.perf_counter() - started
    assert len(answers) == 2, "a regexp filter pinned the worker"
    for response in answers:
        assert response.status_code == 200, response.get_data(as_text=True)[:300]
        [series] = response.get_json()
        # Only the value made of a's alone matches (a find() of (a+)+$ needs a's to the end).
        assert series["tags"] == {"host": "a" * 30}
        assert set(series["dps"].values()) == {1}
    assert elapsed_s < 1.0


def test_regexp_keeps_find_semantics(make_client: Callable[..., FlaskClient]) -> None:
    client = make_client(_hosts_points())
    for pattern, hosts in [("eb0", {"web01"}), ("^a+-", {"a" * 29 + "-"}),
                           ("a{30}", {"a" * 30}), ("[-1]$", {"a" * 29 + "-", "web01"})]:
        body = {"start": 1356998400, "end": 1357041600,
                "queries": [{"aggregator": "none", "metric": "sys.cpu.user",
                             "filters": [{"type": "regexp", "tagk": "host", "filter": pattern}]}]}
        response = client.post("/api/query", data=json.dumps(body))
        assert response.status_code == 200, response.get_data(as_text=True)[:300]
        assert {s["tags"]["host"] for s in response.get_json()} == hosts, pattern


@pytest.mark.parametrize("pattern", [r"(a)\1", "(?!b)a", "(?<!x)a", "a++"])
def test_patterns_needing_backtracking_are_a_clear_400(
        make_client: Callable[..., FlaskClient], pattern: str) -> None:
    client = make_client(_hosts_points())
    m = urllib.parse.quote(f"sum:sys.cpu.user{{host=regexp({pattern})}}")
    error = error_of(client.get(f"/api/query?{RANGE}&m={m}"), 400)
    assert error["message"].startswith(f"When parsing tag 'host=regexp({pattern})': "
                                       f"Invalid regular expression '{pattern}': ")
    assert "RE2" in error["details"]
