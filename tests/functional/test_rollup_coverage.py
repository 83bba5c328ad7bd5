"""Rollups that are never wrong, on both backends: with pytsd computing the rollups (the
background pass), every rollup-eligible query answers exactly as ``rollupUsage=ROLLUP_RAW``
before, during and after the backfill, after late points, an import, a query delete, and a
write that bypasses pytsd's writer (a Java TSD's put, here the storage Table API).

The pass is driven by hand at chosen instants (the app's own background thread is left off);
``tests/e2e/test_rollup_coverage.py`` runs it in two real server processes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from app import create_app
from app.storage import codec
from app.tsdb import TSDB
from app.tsdb import rollup_coverage as coverage
from app.tsdb.importer import Importer
from app.tsdb.rollup_lease import RollupLease
from app.tsdb.rollups import RollupPass, RollupStats
from app.tsdb.writer import DataPoint, PointWriter
from tests.rollup_fixtures import ROLLUP_SETTINGS

DAY = 1370476800  # Thu, 06 Jun 2013 00:00:00 GMT
HOURS = 6
NOW = DAY + HOURS * 3600 + 1  # the horizon (lag 0) is the end of the data
QUERIES = ["sum:1m-avg:m", "max:10m-max:m{host=*}", "sum:1m-sum:m", "avg:10m-avg:m{host=*}",
           "sum:1h-avg:m", "min:1h-min:m{host=*}", "sum:1m-min:m{host=*}", "zimsum:20m-sum:m",
           "max:2h-max:m", "sum:7m-avg:m{host=*}"]
RANGES = [(DAY - 3600, DAY + HOURS * 3600 - 1), (DAY + 3600 + 600, DAY + 4 * 3600 + 1199)]
SETTINGS = {**ROLLUP_SETTINGS, "tsd.rollups.compute.background": "true",
            "tsd.rollups.compute.lag_s": "0", "tsd.rollups.compute.hours_per_pass": "2",
            "tsd.query.allow_delete": "true", "tsd.rollups.compute.verify_s": "3600"}


@pytest.fixture
def covered_tsdb(tsd_config: dict[str, Any], request: pytest.FixtureRequest) -> TSDB:
    tsd_config.update(SETTINGS)
    tsdb: TSDB = request.getfixturevalue("tsdb")
    points = [DataPoint("m", ts, (ts // 20) % 50 + (0.25 if host == "b" else 0), {"host": host})
              for host in ("a", "b") for ts in range(DAY, DAY + HOURS * 3600, 20)]
    assert not any(PointWriter(tsdb).write(points))
    return tsdb


@pytest.fixture
def client(covered_tsdb: TSDB) -> FlaskClient:
    """The app over the test's TSDB, its own background pass off (driven by hand here)."""
    app = create_app({**covered_tsdb.config, "tsd.rollups.compute.background": False})
    app.extensions["tsdb"] = covered_tsdb
    app.config["TESTING"] = True
    return app.test_client()


def _query(client: FlaskClient, m: str, start: int, end: int, extra: str = "") -> Any:
    response = client.get(f"/api/query?start={start}&end={end}&m={m}{extra}")
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def _raw(m: str) -> str:
    return m.replace(":", ":rollup_raw:", 1)


def assert_as_raw(client: FlaskClient) -> None:
    """Every query answers what reading raw data answers (and that is not nothing)."""
    for start, end in RANGES:
        for m in QUERIES:
            raw = _query(client, _raw(m), start, end)
            assert raw and all(s["dps"] for s in raw), (m, start)
            rolled = _query(client, m, start, end)
            assert rolled == raw, (m, start, end, _diff(rolled, raw))


def _diff(rolled: Any, raw: Any) -> list[tuple[str, Any, Any]]:
    """The first few points where two answers differ (for the failure message)."""
    if len(rolled) != len(raw):
        return [("series", len(rolled), len(raw))]
    return [(ts, a["dps"].get(ts), b["dps"].get(ts)) for a, b in zip(rolled, raw)
            for ts in sorted(set(a["dps"]) | set(b["dps"]))
            if a["dps"].get(ts) != b["dps"].get(ts)][:5]


def _pass(tsdb: TSDB, now_s: float = NOW) -> RollupStats:
    return RollupPass(tsdb, RollupLease(tsdb, 3600, "test")).run_once(now_s=now_s)


def _covered(tsdb: TSDB) -> list[int]:
    """The hours (since DAY) whose rollups hold, for every tracked interval."""
    record = coverage.read(tsdb)
    return [(h - DAY) // 3600 for h in sorted(record.hours())
            if all(record.valid(h, i.interval) for i in coverage.tracked(tsdb))]


def _backfilled(tsdb: TSDB) -> None:
    while _pass(tsdb).hours_rolled:
        pass
    assert _covered(tsdb) == list(range(HOURS))


def test_past_hours_are_read_raw_until_rolled(covered_tsdb: TSDB, client: FlaskClient) -> None:
    assert_as_raw(client)  # nothing rolled yet: every hour raw
    first = _pass(covered_tsdb)  # the last closed hour, then one past hour (2 an hour)
    assert first.hours_rolled == 2 and _covered(covered_tsdb) == [4, 5]
    assert_as_raw(client)  # during the backfill: hours 4-5 from rollups, 0-3 raw
    assert _pass(covered_tsdb).hours_rolled == 2
    assert _covered(covered_tsdb) == [2, 3, 4, 5]
    assert_as_raw(client)
    _backfilled(covered_tsdb)
    assert_as_raw(client)
    # and the rollups do answer: far fewer points read than raw
    raw = _query(client, _raw("sum:1h-avg:m"), DAY, NOW, "&show_stats=true")
    rolled = _query(client, "sum:1h-avg:m", DAY, NOW, "&show_stats=true")
    assert rolled[0]["stats"]["dpsRead"] * 10 < raw[0]["stats"]["dpsRead"]


def test_a_late_point_invalidates_its_hour_at_once(covered_tsdb: TSDB,
                                                   client: FlaskClient) -> None:
    _backfilled(covered_tsdb)
    late = [DataPoint("m", DAY + 2 * 3600 + 7, 1000, {"host": "a"}),
            DataPoint("m", DAY + 2 * 3600 + 1807, 7.5, {"host": "c"})]  # a new series too
    assert not any(PointWriter(covered_tsdb).write(late))
    assert _covered(covered_tsdb) == [0, 1, 3, 4, 5]  # exactly that hour
    assert_as_raw(client)  # before any pass: hour 2 raw
    again = _pass(covered_tsdb)
    assert again.hours_rolled == 1
    assert _covered(covered_tsdb) == list(range(HOURS))
    assert_as_raw(client)


def test_an_import_into_rolled_and_older_hours(covered_tsdb: TSDB, client: FlaskClient) -> None:
    _backfilled(covered_tsdb)
    importer = Importer(PointWriter(covered_tsdb))
    for line in (f"m {DAY + 3 * 3600 + 1} 77 host=a", f"m {DAY - 3600 + 5} 3 host=a",
                 f"m {DAY - 1800} 4.5 host=b"):
        importer.add(line)
    importer.flush()
    assert _covered(covered_tsdb) == [0, 1, 2, 4, 5]
    assert_as_raw(client)
    assert _pass(covered_tsdb).hours_rolled == 2  # hour 3 again, and the imported hour -1
    assert _covered(covered_tsdb) == [-1, *range(HOURS)]
    assert_as_raw(client)


def test_a_query_delete_invalidates_its_hours(covered_tsdb: TSDB, client: FlaskClient) -> None:
    _backfilled(covered_tsdb)
    body = {"start": DAY + 3600 + 900, "end": DAY + 3600 + 1500, "delete": True,
            "queries": [{"aggregator": "sum", "metric": "m", "tags": {"host": "a"}}]}
    response = client.post("/api/query", data=json.dumps(body))
    assert response.status_code == 200, response.get_data(as_text=True)
    assert _covered(covered_tsdb) == [0, 2, 3, 4, 5]
    assert_as_raw(client)
    _pass(covered_tsdb)
    assert_as_raw(client)


def test_a_write_bypassing_pytsd_is_found_by_the_next_pass(covered_tsdb: TSDB,
                                                           client: FlaskClient) -> None:
    """A Java TSD writing into a rolled hour: cells put with the Table API, no mark. The
    pass's verifier finds the hour's raw stamp changed and rolls exactly that hour again."""
    _backfilled(covered_tsdb)
    table = covered_tsdb.data_table()
    at = covered_tsdb.layout.salt_width + covered_tsdb.layout.metric_width
    key = next(k for k, _ in table.scan()
               if int.from_bytes(k[at:at + 4], "big") == DAY + 4 * 3600)
    _, qualifier, raw = codec.point_cell(DAY + 4 * 3600 + 11, 5000)
    table.put(key, {b"t:" + qualifier: raw})
    assert _covered(covered_tsdb) == list(range(HOURS))  # nothing told pytsd
    # Hour 4 is older than the verified window (the last hour): the sweep verifies two of
    # the five older hours a pass, so three passes verify them all; only hour 4 is rolled.
    assert sum(_pass(covered_tsdb).hours_rolled for _ in range(3)) == 1
    assert _covered(covered_tsdb) == list(range(HOURS))
    assert_as_raw(client)
    assert _query(client, "max:1h-max:m", DAY + 4 * 3600, DAY + 5 * 3600 - 1)[0]["dps"] == {
        str(DAY + 4 * 3600): 5000}


def test_an_explicit_nofallback_reads_rollups_and_says_what_was_not_rolled(
        covered_tsdb: TSDB, client: FlaskClient) -> None:
    m = "sum:rollup_nofallback:1h-avg:m"
    answer = _query(client, m, DAY, DAY + HOURS * 3600 - 1, "&show_summary=true")
    # 2.4's scan reaches the bucket after the end (TsdbQuery#getScanEndTimeSeconds): 7 hours
    assert answer[-1]["statsSummary"]["queryIdx_00"]["rollupHoursNotRolled"] == HOURS + 1
    assert len(answer) == 1  # OpenTSDB's meaning: the empty rollup table, nothing else
    _pass(covered_tsdb)  # hours 4 and 5
    answer = _query(client, m, DAY, DAY + HOURS * 3600 - 1, "&show_summary=true")
    assert answer[-1]["statsSummary"]["queryIdx_00"]["rollupHoursNotRolled"] == HOURS + 1 - 2
    assert sorted(answer[0]["dps"]) == [str(DAY + 4 * 3600), str(DAY + 5 * 3600)]


def test_the_backfill_resumes_where_a_dead_holder_stopped(covered_tsdb: TSDB,
                                                          client: FlaskClient) -> None:
    a = RollupPass(covered_tsdb, RollupLease(covered_tsdb, 60, "a"))
    assert a.run_once(now_s=NOW).hours_rolled == 2  # hours 5 and 4, then "killed"
    b = RollupPass(covered_tsdb, RollupLease(covered_tsdb, 60, "b"))
    assert b.run_once(now_s=NOW + 1).held_by_other  # a's lease is live
    taken = b.run_once(now_s=NOW + 61)  # expired: b carries on with hours 3 and 2
    assert taken.hours_rolled == 2 and _covered(covered_tsdb) == [2, 3, 4, 5]
    _, state = b.lease.current()
    assert state is not None
    assert (state.owner, state.position("backfill_s")) == ("b", DAY + 2 * 3600)
    assert_as_raw(client)
    stats = {p["metric"]: p["value"] for p in client.get("/api/stats").get_json()
             if p["metric"].startswith("tsd.rollup.")}
    assert stats["tsd.rollup.backfill.hours_left"] == "2"
    assert stats["tsd.rollup.backfill.cursor"] == str(DAY + 2 * 3600)


def test_a_roller_that_lost_a_race_marks_the_hour(covered_tsdb: TSDB) -> None:
    """Two rollers read the same record, both roll hour 0; the first records its cover, the
    second's check-and-put fails: which cells won is unknown, so the hour is marked."""
    hours = [DAY]
    intervals = coverage.tracked(covered_tsdb)
    stamps = coverage.raw_stamps(covered_tsdb, [covered_tsdb.metrics.get_id("m")], DAY,
                                 DAY + 3600)
    first, second = coverage.read(covered_tsdb), coverage.read(covered_tsdb)
    assert coverage.record(covered_tsdb, first, intervals, hours, stamps) == 0
    assert _covered(covered_tsdb) == [0]
    assert coverage.record(covered_tsdb, second, intervals, hours, stamps) == 1
    assert _covered(covered_tsdb) == []
