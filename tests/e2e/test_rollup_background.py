"""Two pytsd server processes (two gunicorn workers each) on one store: one rollup pass.

Every worker runs the background rollup loop once a second; the lease in storage lets one
of the four do each pass, and its progress stops the others from doing the same hours again.
Without the lease, each worker would roll the closed hour up and log it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import requests

from app.tsdb.rollup_lease import RollupLease
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import make_tsdb
from tests.e2e.tsd_process import TsdProcess, start_tsd
from tests.rollup_fixtures import ROLLUP_SETTINGS

ROLLED = re.compile(r"rolled up (\d+) points into (\d+) cells")
SETTINGS = {**ROLLUP_SETTINGS, "tsd.rollups.compute.background": "true",
            "tsd.rollups.compute.interval_s": "1", "tsd.rollups.compute.lag_s": "0"}


def _rolled(servers: list[TsdProcess]) -> list[str]:
    return [line for tsd in servers for line in tsd.log.read_text().splitlines()
            if ROLLED.search(line)]


def test_two_processes_roll_the_closed_hour_up_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    tsdb = make_tsdb({"tsd.storage": url, **SETTINGS, "tsd.core.auto_create_metrics": True})
    hour_s = int(time.time()) // 3600 * 3600 - 3600  # the last closed hour
    points = [DataPoint("m", ts, 2, {"host": h}) for h in ("a", "b")
              for ts in range(hour_s, hour_s + 3600, 30)]
    assert not any(PointWriter(tsdb).write(points))
    servers = []
    try:
        for _ in range(2):
            servers.append(start_tsd(tmp_path, {"tsd.storage": url, **SETTINGS}, workers=2))
        deadline = time.monotonic() + 60
        while not _rolled(servers) and time.monotonic() < deadline:
            time.sleep(0.5)
        first = time.monotonic()
        # Every worker gets several more passes (1 s apart) in which to do it again.
        while time.monotonic() < first + 5:
            time.sleep(0.5)
        lines = _rolled(servers)
        assert len(lines) == 1, lines
        match = ROLLED.search(lines[0])
        assert match is not None
        assert match.group(1) == str(3 * len(points))  # read once for each rollup table
        _, state = RollupLease(tsdb, 3).current()
        assert state is not None and state.done_until_s == hour_s + 3600
        answer = requests.get(f"{servers[0].url}/api/query?start={hour_s}&end={hour_s + 3599}"
                              "&m=sum:rollup_nofallback:1h-sum:m", timeout=30).json()
        assert answer[0]["dps"] == {str(hour_s): 2 * len(points)}
    finally:
        for server in servers:
            server.stop()
        tsdb.close()
