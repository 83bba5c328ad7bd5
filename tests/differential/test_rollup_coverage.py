"""Rollups pytsd computes itself never answer differently from the real OpenTSDB 2.4.1 reading
raw rows: one table set, a pytsd server with background rollups on (and its coverage record),
and an OpenTSDB TSD over the same tables with no rollups (compaction off, so it never
rewrites what it reads).

The raw data of past hours is written before any pass ran; every rollup-eligible query
(downsamples the configured 1m, 10m and 1h rollups answer, with and without a group-by) is
asked of both before the backfill (pytsd in-process, no pass yet), during it and after it
(the server), after a late point into a rolled hour (before and after it is rolled again),
after ``pytsd import`` into a rolled hour and an older one, after a query delete in a
rolled hour, and after OpenTSDB's own put into a rolled hour once pytsd's verifier found it
(until then pytsd reads the stale rollup: docs/rollups.md). Any difference not claimed by a
declared departure fails. The planner reading a rollup for an hour it has not rolled (or
whose raw rows changed since) is exactly what this catches: Java has no rollups to be stale.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner

from app import create_app
from app.cli import main as pytsd_cli
from app.tsdb import TSDB
from app.tsdb import rollup_coverage as coverage
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import make_tsdb
from tests.differential.compare import compare
from tests.differential.oracle import OpenTSDB, opentsdb_settings
from tests.differential.queries import Case
from tests.differential.test_differential import ARTIFACTS, Tally, _hbase
from tests.e2e.tsd_process import TsdProcess, env_name, start_tsd
from tests.rollup_fixtures import ROLLUP_SETTINGS

HOURS = 6
METRIC = "cov.m"
QUERIES = ["sum:1m-avg:{m}", "max:10m-max:{m}{{host=*}}", "sum:1m-sum:{m}",
           "avg:10m-avg:{m}{{host=*}}", "sum:1h-sum:{m}", "min:1h-min:{m}{{host=*}}",
           "zimsum:20m-sum:{m}", "max:2h-max:{m}", "sum:1m-max:{m}{{host=*}}",
           "avg:1h-avg:{m}{{host=*}}"]
# One pass rolls one hour (the last closed one first, then one past hour a pass): the
# backfill of HOURS takes several passes, long enough to be asked during it.
BACKGROUND = {**ROLLUP_SETTINGS, "tsd.rollups.compute.background": "true",
              "tsd.rollups.compute.interval_s": "3", "tsd.rollups.compute.lag_s": "0",
              "tsd.rollups.compute.hours_per_pass": "1", "tsd.query.allow_delete": "true"}
BACKFILL_TIMEOUT_S = 120


class Scenario:
    """The shared tables, the OpenTSDB reader, the pytsd server and an in-process TSDB."""

    def __init__(self, thrift: str, tmp: Path) -> None:
        self.prefix = f"cov{uuid.uuid4().hex[:8]}_"
        self.settings = {"tsd.storage": f"hbase://{thrift}",
                         "tsd.storage.hbase.table_prefix": self.prefix,
                         "tsd.core.auto_create_metrics": "true", **BACKGROUND}
        self.tmp = tmp
        self.tsdb: TSDB = make_tsdb(dict(self.settings))
        self.java = OpenTSDB("rollup-coverage", self.prefix, thrift,
                             opentsdb_settings(0, appends=False, compaction=False))
        self.server: TsdProcess | None = None
        self.hour = int(time.time()) // 3600 * 3600
        self.first = self.hour - HOURS * 3600  # closed hours, written before any pass
        self.tally = Tally()
        self.asked = 0

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        try:
            self.java.stop()
        finally:
            from app.storage.hbase import HBaseStore

            assert isinstance(self.tsdb.store, HBaseStore)
            self.tsdb.store.drop_tables()
            self.tsdb.close()

    def covered(self) -> list[int]:
        """The hours (since ``first``; -1 the hour before the data) whose rollups hold for
        every tracked interval."""
        record = coverage.read(self.tsdb)
        return [(h - self.first) // 3600 for h in sorted(record.hours())
                if self.first - 3600 <= h < self.hour
                and all(record.valid(h, i.interval) for i in coverage.tracked(self.tsdb))]

    def ranges(self) -> list[tuple[int, int]]:
        """The whole data (and an hour before it), and a window cutting hours and buckets."""
        return [(self.first - 3600, self.hour - 1),
                (self.first + 3600 + 600, self.first + 4 * 3600 + 1199)]


def _points(first: int) -> list[DataPoint]:
    """Two hosts, ragged steps; host a whole numbers, host b quarters (exact sums)."""
    out = []
    for n, host in enumerate(("a", "b")):
        ts, i = first + n * 7, 0
        while ts < first + HOURS * 3600:
            value: int | float = (ts // 60) % 41 - 9 if host == "a" else (i % 29) / 4
            out.append(DataPoint(METRIC, ts, value, {"host": host}))
            ts += 20 + (i * 13) % 31
            i += 1
    return out


@pytest.fixture
def scenario(tmp_path: Path) -> Iterator[Scenario]:
    thrift = _hbase()
    made = Scenario(thrift, tmp_path)
    try:
        with ThreadPoolExecutor(2) as pool:
            java = pool.submit(made.java.start)  # the JVM starts while the data is written
            assert not any(PointWriter(made.tsdb).write(_points(made.first)))
            java.result()
        yield made
    finally:
        made.close()


class InProcess:
    """pytsd's app over the scenario's TSDB, its own background pass off (none ran yet)."""

    def __init__(self, tsdb: TSDB) -> None:
        app = create_app({**tsdb.config, "tsd.rollups.compute.background": False})
        app.extensions["tsdb"] = tsdb  # coverage mode on: the record decides per hour
        app.config["TESTING"] = True
        self.client = app.test_client()

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, str]:
        response = self.client.open(path, method=method, data=body,
                                    content_type="application/json")
        return response.status_code, response.get_data(as_text=True)


class Served:
    """The pytsd server process, over HTTP."""

    def __init__(self, server: TsdProcess) -> None:
        self.url = server.url

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, str]:
        response = requests.request(method, self.url + path, data=body, timeout=120,
                                    headers={"Content-Type": "application/json"})
        return response.status_code, response.text


def check(scenario: Scenario, pytsd: Any, moment: str) -> None:
    """Every query asked of OpenTSDB and of pytsd (its default rollup usage) at once."""
    with ThreadPoolExecutor(2) as pool:
        for start, end in scenario.ranges():
            for template in QUERIES:
                m = template.format(m=METRIC)
                path = f"/api/query?start={start}&end={end}&m={m}"
                case = Case(f"{moment}-{scenario.asked}", "rollup", "GET", path, None,
                            [{"metric": METRIC}])
                scenario.asked += 1
                ref_future = pool.submit(scenario.java.request, "GET", path)
                got = pytsd.request("GET", path)
                ref = ref_future.result()
                assert ref[0] == 200 and json.loads(ref[1]), f"{moment} {path}: OpenTSDB {ref}"
                scenario.tally.record(case, "pytsd", compare(ref, got))


def _put(pytsd: Served, points: list[dict[str, Any]]) -> None:
    status, text = pytsd.request("POST", "/api/put?details&sync", json.dumps(points))
    assert status == 200, text


def _import(scenario: Scenario, lines: list[str]) -> None:
    """``pytsd import`` (the CLI, in-process) with the server's settings."""
    source = scenario.tmp / "late.txt"
    source.write_text("\n".join(lines) + "\n")
    env = {env_name(key): value for key, value in scenario.settings.items()}
    result = CliRunner().invoke(pytsd_cli, ["import", "--no-progress", str(source)],
                                env={**env, "TSD_CONFIG": ""}, catch_exceptions=False)
    assert result.exit_code == 0 and f"imported {len(lines)} points (0 failed)" in result.output, \
        result.output


def _wait_covered(scenario: Scenario, hours: list[int]) -> None:
    deadline = time.monotonic() + BACKFILL_TIMEOUT_S
    while scenario.covered() != hours:
        assert time.monotonic() < deadline, f"covered {scenario.covered()}, not {hours}"
        time.sleep(0.5)


def _read_from_rollups(scenario: Scenario, pytsd: Served) -> None:
    """The rolled answer reads far fewer points than the raw one: rollups do answer."""
    start, end = scenario.ranges()[0]
    read = []
    for usage in ("", "rollup_raw:"):
        path = f"/api/query?start={start}&end={end}&m=sum:{usage}1h-sum:{METRIC}&show_stats=true"
        status, text = pytsd.request("GET", path)
        assert status == 200, text
        read.append(json.loads(text)[0]["stats"]["dpsRead"])
    assert read[0] * 10 < read[1], f"dpsRead rolled {read[0]} vs raw {read[1]}"


def _java_write(scenario: Scenario, pytsd: Served) -> None:
    """OpenTSDB puts a point into rolled hour 1; pytsd reads the stale rollup until a pass
    verifies the hour's raw stamp (docs/rollups.md), then rolls it again."""
    at = scenario.first + 3600 + 13
    status, text = scenario.java.request("POST", "/api/put?details", json.dumps(
        {"metric": METRIC, "timestamp": at, "value": 4321, "tags": {"host": "b"}}))
    assert status == 200, text
    hour = f"start={scenario.first + 3600}&end={scenario.first + 2 * 3600 - 1}"
    path = f"/api/query?{hour}&m=max:1h-max:{METRIC}{{host=b}}"
    deadline = time.monotonic() + 60
    while True:
        status, text = pytsd.request("GET", path)
        assert status == 200, text
        if json.loads(text)[0]["dps"] == {str(scenario.first + 3600): 4321}:
            return
        assert time.monotonic() < deadline, f"OpenTSDB's write never seen: {text}"
        time.sleep(0.5)


def test_computed_rollups_answer_as_opentsdb_reading_raw(scenario: Scenario) -> None:
    started = time.monotonic()
    check(scenario, InProcess(scenario.tsdb), "before")  # no pass yet: every hour raw
    assert scenario.covered() == []
    scenario.server = start_tsd(scenario.tmp, scenario.settings, workers=2)
    pytsd = Served(scenario.server)
    seen = set()
    while True:  # during the backfill (one hour a pass) and once it is done
        seen.add(len(scenario.covered()))
        check(scenario, pytsd, "backfill")
        seen.add(len(scenario.covered()))
        if HOURS in seen:
            check(scenario, pytsd, "after")
            break
        assert time.monotonic() - started < BACKFILL_TIMEOUT_S, f"backfill stuck: {seen}"
    assert any(0 < hours < HOURS for hours in seen), f"never asked during the backfill: {seen}"
    _read_from_rollups(scenario, pytsd)
    everything = list(range(HOURS))

    # a late point into a rolled hour: read raw at once, then rolled again
    _put(pytsd, [{"metric": METRIC, "timestamp": scenario.first + 2 * 3600 + 11, "value": 977,
                  "tags": {"host": "a"}}])
    assert scenario.covered() == [h for h in everything if h != 2]
    check(scenario, pytsd, "late")
    _wait_covered(scenario, everything)
    check(scenario, pytsd, "late-rolled")

    # an import into a rolled hour and into an hour before the data
    _import(scenario, [f"{METRIC} {scenario.first + 3 * 3600 + 1} 55 host=a",
                       f"{METRIC} {scenario.first + 3 * 3600 + 1801} 12.75 host=c",
                       f"{METRIC} {scenario.first - 1800} 4.5 host=b"])
    assert scenario.covered() == [h for h in everything if h != 3]
    check(scenario, pytsd, "import")
    everything = [-1, *everything]  # the imported hour before the data is rolled too
    _wait_covered(scenario, everything)
    check(scenario, pytsd, "import-rolled")

    # a query delete inside a rolled hour (part of one host's points)
    delete = {"start": scenario.first + 4 * 3600 + 900, "end": scenario.first + 4 * 3600 + 1500,
              "delete": True, "queries": [{"aggregator": "sum", "metric": METRIC,
                                           "tags": {"host": "a"}}]}
    status, text = pytsd.request("POST", "/api/query", json.dumps(delete))
    assert status == 200, text
    assert scenario.covered() == [h for h in everything if h != 4]
    check(scenario, pytsd, "delete")
    _wait_covered(scenario, everything)
    check(scenario, pytsd, "delete-rolled")

    # a Java TSD's put into a rolled hour: no mark, found by the next pass's verifier
    _java_write(scenario, pytsd)
    check(scenario, pytsd, "java-write")

    tally = scenario.tally
    print(f"\nrollup coverage: {tally.agreed}/{tally.total()} agree, declared "
          f"{tally.declared_cases} {dict(sorted(tally.declared.items()))}, "
          f"{len(tally.failures)} undeclared; coverage seen during the backfill {sorted(seen)}; "
          f"{time.monotonic() - started:.1f} s")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "differential-rollup-coverage.txt").write_text(
        "\n".join(tally.failures) + "\n")
    assert not tally.failures, (f"{len(tally.failures)} undeclared differences:\n"
                                + "\n".join(tally.failures[:20]))
