"""One query over two processes (``app.tsdb.read.split``): on both backends, with the hour cache
off, cold and warm, a downsampled query whose later hours a real helper process reads answers
exactly (to the byte of the JSON, counts included) what one process answers; a helper that
dies, refuses or is busy changes nothing but the time."""

from __future__ import annotations

import os
import re
import resource
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.engine.staged import StagedSeries
from app.query.ast import Downsample, SubQuery
from app.server import split_helper
from app.server.shares import WorkerShares
from app.tsdb import TSDB, hour_cache
from app.tsdb.read import seen, split_choice
from app.tsdb.reader import SeriesReader
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import app_over, drop_tables, make_tsdb
from tests.functional.test_fused_read import BASE_S, END_S, HOUR_S, QUERIES, _answer, _points
from tests.unit.test_server_shares import workers

START_S, STOP_S = BASE_S + 1800, END_S - 1200  # the scan window is wider than the query


@pytest.fixture(params=["off", "cold", "warm"])
def cache_mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=[0, 1], ids=["unsalted", "salted"])
def store(tsd_config: dict[str, Any], cache_mode: str, request: pytest.FixtureRequest
          ) -> Iterator[TSDB]:
    salt = {"tsd.storage.salt.width": 1, "tsd.storage.salt.buckets": 3} if request.param else {}
    cache = {"tsd.query.cache.max_bytes": 0} if cache_mode == "off" else {}
    tsdb = make_tsdb({**tsd_config, **salt, **cache, "tsd.query.split.min_points": 0})
    assert not any(PointWriter(tsdb).write(_points()))
    client = app_over(tsdb).test_client()
    found = client.get(f"/api/query?start={BASE_S}&end={END_S}&m=sum:fuse.m{{host=web0}}"
                       "&show_tsuids").get_json()
    note = {"tsuid": found[0]["tsuids"][0], "startTime": END_S - 1500, "description": "late"}
    assert client.post("/api/annotation", json=note).status_code == 200
    yield tsdb
    split_helper.helper_for(tsdb).stop()
    drop_tables(tsdb)


@pytest.fixture
def helper(store: TSDB, cache_mode: str, monkeypatch: pytest.MonkeyPatch) -> split_helper.Helper:
    """The store's helper, up; a core counted idle (the machine's load is not the test's)."""
    monkeypatch.setattr(split_choice, "core_idle", lambda: True)
    if cache_mode == "warm":  # this process's rows and ranges settled: its half kept
        later_ms = hour_cache.clock_ms() + 60_000
        monkeypatch.setattr(hour_cache, "clock_ms", lambda: later_ms)
    helper = split_helper.helper_for(store)
    helper.prepare()
    _wait_up(helper)
    return helper


def _wait_up(helper: split_helper.Helper) -> None:
    assert helper.wait_ready(30), "the helper did not start"


@contextmanager
def _split_store(tsd_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                 points: list[DataPoint], **settings: Any
                 ) -> Iterator[tuple[split_helper.Helper, FlaskClient]]:
    """A store of its own holding ``points`` (``settings`` added), its helper up, a core
    counted idle; the helper stopped and the tables dropped on the way out."""
    tsdb = make_tsdb({**tsd_config, **settings})
    try:
        assert not any(PointWriter(tsdb).write(points))
        monkeypatch.setattr(split_choice, "core_idle", lambda: True)
        helper = split_helper.helper_for(tsdb)
        helper.prepare()
        _wait_up(helper)
        yield helper, app_over(tsdb).test_client()
    finally:
        split_helper.helper_for(tsdb).stop()
        drop_tables(tsdb)


def _one_process(client: FlaskClient, m: str, monkeypatch: pytest.MonkeyPatch,
                 start_s: int = START_S, stop_s: int = STOP_S) -> Any:
    with monkeypatch.context() as patch:
        patch.setattr(split_choice, "core_idle", lambda: False)
        return _answer(client, m, start_s, stop_s)


@pytest.mark.parametrize("m", QUERIES)
def test_a_split_query_answers_as_one_process(store: TSDB, helper: split_helper.Helper, m: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    client = app_over(store).test_client()
    whole = _one_process(client, m, monkeypatch)
    for _ in range(2):  # the second time, what the first kept
        before = helper.parts_read
        parts = _answer(client, m, START_S, STOP_S)
        assert helper.parts_read == before + 1  # the helper read the later hours
        assert isinstance(parts, str), parts
        assert parts == whole


def test_what_is_not_split(store: TSDB, helper: split_helper.Helper,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    client = app_over(store).test_client()
    before = helper.parts_read
    _answer(client, "sum:fuse.m", START_S, STOP_S)  # not downsampled
    _answer(client, "sum:1m-avg:fuse.m", END_S - HOUR_S + 60, END_S - 60)  # one hour
    _answer(client, "sum:7m-avg:fuse.m", START_S, STOP_S)  # buckets straddle hours
    _one_process(client, "sum:1m-avg:fuse.m", monkeypatch)  # no idle core
    assert helper.parts_read == before


def test_no_split_while_another_worker_queries(store: TSDB, helper: split_helper.Helper,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The split's second core is taken while another worker of the server runs a query
    (issue 25: a third busy process on two cores makes the light requests wait)."""
    client = app_over(store).test_client()
    shares = WorkerShares()
    split_helper.yield_to(shares)
    try:
        with workers(shares, 1) as (other,):
            other.ask("query", True)
            before = helper.parts_read
            whole = _answer(client, "sum:1m-avg:fuse.m", START_S, STOP_S)
            assert helper.parts_read == before  # read in one process
            other.ask("query", False)
            _answer(client, "sum:1m-avg:fuse.m", START_S, STOP_S)
            assert helper.parts_read == before  # it ended a query just now: still counts
            time.sleep(split_helper.OTHERS_RECENT_MS / 1000 + 0.05)
            assert _answer(client, "sum:1m-avg:fuse.m", START_S, STOP_S) == whole
            assert helper.parts_read == before + 1  # the other worker idle: split
    finally:
        split_helper.yield_to(None)


def test_a_query_not_run_yet_is_split_and_one_the_last_run_found_small_is_not(
        tsd_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    settings = {"tsd.query.split.min_points": 10_000}
    with _split_store(tsd_config, monkeypatch, _points(), **settings) as (helper, client):
        seen.forget()
        _answer(client, "sum:1m-avg:fuse.m", START_S, STOP_S)  # never seen: split
        assert helper.parts_read == 1
        # ~1,650 points an hour: 4 hours fall short of 10,000, a 12-hour scan does not
        _answer(client, "sum:1m-avg:fuse.m", START_S, STOP_S)
        assert helper.parts_read == 1
        _answer(client, "sum:1m-avg:fuse.m", END_S - 12 * HOUR_S, STOP_S)
        assert helper.parts_read == 2


def test_a_dead_helper_changes_nothing_but_the_time(store: TSDB, helper: split_helper.Helper,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    client = app_over(store).test_client()
    m = "avg:1m-avg:fuse.m{host=*}"
    whole = _one_process(client, m, monkeypatch)
    process = helper._process
    assert process is not None
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    before = helper.parts_read
    assert _answer(client, m, START_S, STOP_S) == whole  # read here
    assert helper.parts_read == before
    monkeypatch.setattr(split_helper, "RESTART_AFTER_S", 0.0)
    _answer(client, m, START_S, STOP_S)  # starts another one
    _wait_up(helper)
    assert helper._process is not None and helper._process.pid != process.pid
    assert _answer(client, m, START_S, STOP_S) == whole
    assert helper.parts_read == before + 1


@pytest.mark.parametrize("early_step_s, refused", [(60, True), (2, False)],
                         ids=["the helper's hours alone", "only the two parts together"])
def test_a_split_query_meets_the_point_limit_as_one_process(
        tsd_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch, early_step_s: int,
        refused: bool) -> None:
    # 4 hours; the later two at one point every 2 s (3,600 points): over a limit of 3,000
    # alone, when the helper refuses its part and the worker reads it again; or under it, and
    # then only the worker's check of both parts together finds the limit crossed.
    middle_s = BASE_S + 2 * HOUR_S
    points = [DataPoint("lim.m", ts, 1, {"host": "a"}) for ts in
              [*range(BASE_S, middle_s, early_step_s), *range(middle_s, END_S, 2)]]
    settings = {"tsd.query.split.min_points": 0,
                "tsd.query.limits.data_points.default": 3000 if refused else 6000}
    with _split_store(tsd_config, monkeypatch, points, **settings) as (helper, client):
        parts = _answer(client, "sum:1m-avg:lim.m", BASE_S, END_S - 1)
        assert helper.parts_read == (0 if refused else 1)
        alone = _one_process(client, "sum:1m-avg:lim.m", monkeypatch, BASE_S, END_S - 1)
        # The same error; the points counted when it was raised follow the order of reading.
        assert [_counted(answer) for answer in (parts, alone)] == [
            (413, "Sorry, you have attempted to fetch more than our limit of "
                  f"{3000 if refused else 6000} data points (sub query 0 read N). Please try "
                  "filtering using more tags or decrease your time range.")] * 2


def _counted(answer: Any) -> tuple[int, str]:
    status, body = answer
    return status, re.sub(r"read \d+", "read N", body["error"]["message"])


def test_a_split_with_descriptors_past_1024(tsd_config: dict[str, Any],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # A busy server holds thousands of sockets: the helper's pipes then get numbers select()
    # cannot watch.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.fail(f"the test needs 1,200 descriptors; this machine allows {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with _split_store(tsd_config, monkeypatch, _points(),
                          **{"tsd.query.split.min_points": 0}) as (helper, client):
            _split_with_many_descriptors(helper, client, monkeypatch)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _split_with_many_descriptors(helper: split_helper.Helper, client: FlaskClient,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert helper._process is not None and helper._process.stdout is not None
    assert helper._process.stdout.fileno() > 1024
    m = "sum:1m-avg:fuse.m{dc=*}"
    assert _answer(client, m, START_S, STOP_S) == _one_process(client, m, monkeypatch)
    assert helper.parts_read == 1


def test_the_helper_leaves_with_its_worker(store: TSDB, helper: split_helper.Helper) -> None:
    process = helper._process
    assert process is not None and process.poll() is None
    helper.stop()
    assert process.poll() is not None


def test_a_forked_process_does_not_share_its_parents_helper(store: TSDB,
                                                            helper: split_helper.Helper) -> None:
    pid = os.fork()
    if pid == 0:  # the child: its helper is the parent's, not to be claimed nor stopped
        split_helper.RESTART_AFTER_S = float("inf")  # nor one of its own started
        ok = not helper.claim()
        helper.stop()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert helper._process is not None and helper._process.poll() is None
    _wait_up(helper)


def test_a_query_too_large_for_the_cache_is_read_a_chunk_at_a_time(
        tsd_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch, stamps_cheap: None) -> None:
    # ~6,000 points read: 120 KB kept, over a budget of 100 KB; half of it would fit.
    settings = {"tsd.query.cache.max_bytes": 100_000, "tsd.query.split.min_points": 0}
    with _split_store(tsd_config, monkeypatch, _points(), **settings) as (helper, client):
        tsdb = client.application.extensions["tsdb"]
        cache = hour_cache.cache_for(tsdb)
        assert cache is not None
        later_ms = hour_cache.clock_ms() + 60_000  # the rows just written settled
        monkeypatch.setattr(hour_cache, "clock_ms", lambda: later_ms)
        m, spec = "sum:1m-avg:fuse.m", Downsample("1m-avg", 60_000, 1, "m", "avg")
        seen.forget()
        whole = _one_process(client, m, monkeypatch)  # never seen: read through the cache
        cache.clear()
        with monkeypatch.context() as patch:
            patch.setattr(split_choice, "core_idle", lambda: False)
            reader = SeriesReader(tsdb)
            series = reader.read(SubQuery("sum", metric="fuse.m", downsample=spec),
                                 START_S * 1000, STOP_S * 1000)
        assert series and all(isinstance(s, StagedSeries) for s in series)  # fused
        assert cache.bytes == 0 and reader.stats.points > 5000
        assert _one_process(client, m, monkeypatch) == whole
        # Two halves. Each half's first read by its process takes the hour columns where the
        # store has them (keeping nothing); the next keeps it.
        assert _answer(client, m, START_S, STOP_S) == whole
        before = helper.parts_read
        assert _answer(client, m, START_S, STOP_S) == whole  # two halves: each kept
        assert helper.parts_read == before + 1 and cache.bytes > 0
