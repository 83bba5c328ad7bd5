"""kill -9 of the pytsd node that holds the compaction sweep's lease and wrote uncompacted
rows: another node takes the lease once it expires and compacts those rows within the bound
docs/fleet.md states (lease_s + interval_s after the kill, plus the pass), on every backend.

Node A sweeps with a grace of two hours, so the hour it writes into is not yet due for it
(it holds the lease and leaves the rows alone, as a node whose rows belong to an hour still
open would); its own compaction queue would wait an hour. Node B sweeps with no grace.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import requests

from app.tsdb import TSDB
from tests.e2e.tsd_process import TsdProcess, start_tsd

INTERVAL_S = 1
LEASE_S = 3 * INTERVAL_S
SERIES = 10
NODE = {"tsd.core.auto_create_metrics": "true", "tsd.storage.compaction.background": "true",
        "tsd.storage.compaction.interval_s": "3600",
        "tsd.storage.compaction.sweep.interval_s": str(INTERVAL_S)}


def sweep_stats(node: TsdProcess) -> dict[str, float]:
    return {point["metric"]: float(point["value"])
            for point in requests.get(f"{node.url}/api/stats", timeout=10).json()
            if point["metric"].startswith("tsd.compaction.sweep.")}


def cells_per_row(tsdb: TSDB) -> list[int]:
    return [len(cells) for _, cells in tsdb.data_table().scan(columns=[b"t"])]


def wait_for(condition: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def test_a_dead_holders_rows_are_compacted_by_another_node(
        tsd_config: dict[str, Any], tsdb: TSDB, tmp_path: Path) -> None:
    store = {key: str(value) for key, value in tsd_config.items()
             if key.startswith("tsd.storage")}
    a = start_tsd(tmp_path, {**store, **NODE, "tsd.storage.compaction.sweep.grace_s": "7200"})
    b: TsdProcess | None = None
    try:
        assert wait_for(lambda: sweep_stats(a)["tsd.compaction.sweep.holder"] == 1, 30)
        hour_s = int(time.time()) // 3600 * 3600 - 3600  # the last closed hour
        # Two cells a row: the embedded store's merge writes a row's points of one merge as
        # one compacted cell, so the second point is put after a read merged the first.
        for offset in (0, 10):
            points = [{"metric": "fleet.m", "timestamp": hour_s + offset, "value": offset,
                       "tags": {"host": f"h{n}"}} for n in range(SERIES)]
            assert requests.post(f"{a.url}/api/put", json=points, timeout=30).status_code == 204
            assert len(cells_per_row(tsdb)) == SERIES
        b = start_tsd(tmp_path, {**store, **NODE, "tsd.storage.compaction.sweep.grace_s": "0"})
        assert sweep_stats(b)["tsd.compaction.sweep.holder"] == 0  # a holds it, alive
        time.sleep(2 * INTERVAL_S)
        assert cells_per_row(tsdb) == [2] * SERIES  # nobody compacted a's rows
        a.stop(signal.SIGKILL)
        killed = time.monotonic()
        assert wait_for(lambda: cells_per_row(tsdb) == [1] * SERIES, 60)
        elapsed_s = time.monotonic() - killed
        # The bound: a's lease expires at most LEASE_S after the kill, b's next pass comes at
        # most INTERVAL_S later; the rest is slack for a loaded machine (b's pass itself).
        assert elapsed_s < LEASE_S + INTERVAL_S + 6, elapsed_s
        stats = sweep_stats(b)
        assert stats["tsd.compaction.sweep.holder"] == 1
        assert stats["tsd.compaction.sweep.rows_compacted"] == SERIES
        assert stats["tsd.compaction.sweep.lag_s"] == 0
        scraped = requests.get(f"{b.url}/metrics", timeout=30).text
        assert 'pytsd_background_lag_seconds{job="compaction.sweep"} 0.0' in scraped
        answer = requests.get(f"{b.url}/api/query?start={hour_s}&end={hour_s + 3599}"
                              "&m=sum:fleet.m", timeout=30).json()
        assert answer[0]["dps"] == {str(hour_s): 0, str(hour_s + 10): 10 * SERIES}
        assert "compaction sweep: scanned" in b.log.read_text()
    finally:
        a.stop(signal.SIGKILL)
        if b is not None:
            b.stop()
