"""Two real pytsd server processes (two gunicorn workers each) over one store, both backends,
with background rollups and compaction on: rollup-eligible queries answer exactly as
``rollupUsage=ROLLUP_RAW`` before, during and after the backfill of hours written before the
servers started, after a late point put through one server (asked on the other at once), and
after a write that bypasses pytsd (a Java TSD's put, here the Table API), once a pass ran.
Then the server holding the rollup lease is killed (SIGKILL) and the other takes it over.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from app.storage import codec
from app.tsdb import TSDB
from app.tsdb import rollup_coverage as coverage
from app.tsdb.rollup_lease import RollupLease
from app.tsdb.writer import DataPoint, PointWriter
from tests.e2e.tsd_process import TsdProcess, start_tsd
from tests.rollup_fixtures import ROLLUP_SETTINGS

HOURS = 10
SETTINGS = {**ROLLUP_SETTINGS, "tsd.rollups.compute.background": "true",
            "tsd.rollups.compute.interval_s": "2", "tsd.rollups.compute.lag_s": "0",
            "tsd.rollups.compute.hours_per_pass": "1",
            "tsd.storage.compaction.background": "true",
            "tsd.storage.compaction.interval_s": "1"}
QUERIES = ["sum:1m-avg:m", "max:10m-max:m{host=*}", "sum:1m-sum:m", "avg:10m-avg:m{host=*}",
           "sum:1h-avg:m", "min:1h-min:m{host=*}"]


def _answer(server: TsdProcess, m: str, start: int, end: int) -> Any:
    response = requests.get(f"{server.url}/api/query?start={start}&end={end}&m={m}",
                            timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def _check(servers: list[TsdProcess], start: int, end: int) -> None:
    """Each query asked of one server, raw of the other: the same answer, not empty."""
    for i, m in enumerate(QUERIES):
        rolled = _answer(servers[i % 2], m, start, end)
        raw = _answer(servers[1 - i % 2], m.replace(":", ":rollup_raw:", 1), start, end)
        assert raw and rolled == raw, m


def _workers(server: TsdProcess) -> set[int]:
    """The PIDs of a server's gunicorn workers (the children of its master)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == server.process.pid:
            found.add(int(stat.parent.name))
    return found


def _covered(tsdb: TSDB, first_s: int) -> int:
    record = coverage.read(tsdb)
    return sum(1 for h in range(first_s, first_s + HOURS * 3600, 3600)
               if all(record.valid(h, i.interval) for i in coverage.tracked(tsdb)))


@pytest.fixture
def rollup_tsdb(tsd_config: dict[str, Any], request: pytest.FixtureRequest) -> TSDB:
    tsd_config.update(SETTINGS)
    tsdb: TSDB = request.getfixturevalue("tsdb")
    return tsdb


def test_two_servers_answer_as_raw_through_backfill_and_late_writes(
        tsd_config: dict[str, Any], rollup_tsdb: TSDB, tmp_path: Path) -> None:
    tsdb = rollup_tsdb
    settings = {key: str(value) for key, value in tsd_config.items()}
    hour = int(time.time()) // 3600 * 3600
    first = hour - HOURS * 3600  # ten closed hours, written before any server runs
    points = [DataPoint("m", ts, (ts // 60) % 37 + (0.5 if host == "b" else 0), {"host": host})
              for host in ("a", "b") for ts in range(first, hour, 60)]
    writer = PointWriter(tsdb)
    assert not any(writer.write(points))
    end = hour + 3599
    servers = []
    try:
        for _ in range(2):
            servers.append(start_tsd(tmp_path, settings, workers=2))
        seen = set()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            seen.add(_covered(tsdb, first))
            _check(servers, first, end)  # before and during the backfill
            if HOURS in seen:
                break
        # checked during the backfill (some hours rolled, not all) and after it
        assert HOURS in seen and any(0 < hours < HOURS for hours in seen), seen
        _check(servers, first, end)  # after
        # a late point through one server, asked of the other at once
        put = requests.post(f"{servers[0].url}/api/put", timeout=30,
                            json={"metric": "m", "timestamp": first + 3 * 3600 + 7,
                                  "value": 999, "tags": {"host": "a"}})
        assert put.status_code == 204
        _check(servers, first, end)
        # a write no pytsd sees: found by the next pass's verifier, then answered right
        table = tsdb.data_table()
        at = tsdb.layout.salt_width + tsdb.layout.metric_width
        target = hour - 2 * 3600
        key = next(k for k, _ in table.scan() if int.from_bytes(k[at:at + 4], "big") == target)
        _, qualifier, raw = codec.point_cell(target + 13, 4321)
        table.put(key, {b"t:" + qualifier: raw})
        deadline = time.monotonic() + 60
        m = "max:1h-max:m"
        while _answer(servers[1], m, target, target + 3599)[0]["dps"] != {str(target): 4321}:
            assert time.monotonic() < deadline, "the foreign write was never seen"
            time.sleep(0.5)
        _check(servers, first, end)
        stats = requests.get(f"{servers[1].url}/api/stats", timeout=30).json()
        named = {s["metric"]: s["value"] for s in stats if s["metric"].startswith("tsd.rollup")}
        assert named["tsd.rollup.backfill.hours_left"] == "0"
        assert int(named["tsd.rollup.lag_s"]) <= 3600
        # kill -9 the server holding the lease: the other takes the pass over (lease 6 s)
        # and rolls an hour written meanwhile, older than the data
        _, state = RollupLease(tsdb, 0).current()
        assert state is not None
        holder = next(i for i, server in enumerate(servers)
                      if int(state.owner.split(":")[1]) in _workers(server))
        servers[holder].stop(signal.SIGKILL)
        alive = servers[1 - holder]
        older = first - 3600
        put = requests.post(f"{alive.url}/api/put", timeout=30,
                            json={"metric": "m", "timestamp": older + 60, "value": 5,
                                  "tags": {"host": "a"}})
        assert put.status_code == 204
        deadline = time.monotonic() + 60
        while not all(coverage.read(tsdb).valid(older, i.interval)
                      for i in coverage.tracked(tsdb)):
            assert time.monotonic() < deadline, "no one took the pass over"
            time.sleep(0.5)
        _, state = RollupLease(tsdb, 0).current()
        assert state is not None and int(state.owner.split(":")[1]) in _workers(alive)
        _check([alive, alive], older, end)
    finally:
        for server in servers:
            server.stop()
