"""The compaction sweep compacts closed hours whoever wrote them, one process of the fleet at
a time, resuming where the last holder of its lease stopped; on every backend.

Two :class:`CompactionSweep` objects over two TSDB objects on the same store stand for two
pytsd processes (they share nothing but the store); ``tests/e2e/test_compaction_fleet.py``
kills a real server process that holds the lease.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.tsdb import TSDB
from app.tsdb.compaction_sweep import SWEEP_COLUMN, SWEEP_ROW, CompactionSweep
from app.tsdb.lease import Lease
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import make_tsdb

T0 = 1346846400  # 2012-09-05 12:00:00 UTC, an hour boundary
HOUR = 3600
GRACE_S = 600
INTERVAL_S = 60  # the lease lasts three intervals: 180 s
SETTINGS = {"tsd.storage.compaction.sweep.interval_s": INTERVAL_S,
            "tsd.storage.compaction.sweep.grace_s": GRACE_S}
# sys.cpu.nice{host=web01} at T0: metric 000001, hour, tagk 000001, tagv 000001
ROW = bytes.fromhex("00000150473EC0000001000001")
# 1 at +0 s, 2 at +10 s: OpenTSDB's compacted column (qualifiers, values, meta byte 0x00)
COMPACTED = {b"t:" + bytes.fromhex("000000A0"): bytes.fromhex("010200")}
# The sweep compacts rows of single cells as OpenTSDB writes them; the embedded store's
# writer would otherwise hand its batches over as blocks, merged into a compacted cell.
pytestmark = pytest.mark.usefixtures("single_cells")


def write(tsdb: TSDB, hosts: list[str], hours: list[int]) -> None:
    """Two points (1 at +0 s, 2 at +10 s) per host and hour: uncompacted rows of 2 cells."""
    points = [DataPoint("sys.cpu.nice", T0 + hour * HOUR + offset, value, {"host": host})
              for hour in hours for host in hosts for offset, value in ((0, 1), (10, 2))]
    assert not any(PointWriter(tsdb).write(points))


def cells_per_row(tsdb: TSDB) -> list[int]:
    return [len(cells) for _, cells in tsdb.data_table().scan(columns=[b"t"])]


@pytest.fixture
def process(tsd_config: dict[str, Any], request: pytest.FixtureRequest
            ) -> Callable[[str, int], CompactionSweep]:
    """``process(owner, rows_per_pass)``: a sweep in a TSDB of its own over the test's store."""
    first: TSDB = request.getfixturevalue("tsdb")

    def make(owner: str, rows_per_pass: int = 200_000) -> CompactionSweep:
        tsdb = make_tsdb({**first.config, **SETTINGS,
                          "tsd.storage.compaction.sweep.rows_per_pass": rows_per_pass})
        request.addfinalizer(tsdb.close)
        return CompactionSweep(tsdb, Lease(tsdb.uid_table, SWEEP_ROW, SWEEP_COLUMN,
                                           3 * INTERVAL_S, owner))

    return make


def test_due_hours_are_compacted_whoever_wrote_them(
        tsdb: TSDB, process: Callable[..., CompactionSweep]) -> None:
    write(tsdb, ["web01", "web02"], [0, 1, 2])  # written by this "process", compacted by another
    sweep = process("a")
    # Hours 0 and 1 ended at least GRACE_S ago; hour 2 is still open.
    stats = sweep.run_once(now_s=T0 + 2 * HOUR + GRACE_S)
    assert (stats.rows_scanned, stats.rows_compacted, stats.cells_merged) == (4, 4, 8)
    assert (stats.done_until_s, stats.lag_s) == (T0 + 2 * HOUR, 0)
    assert tsdb.data_table().row(ROW) == COMPACTED
    assert sorted(cells_per_row(tsdb)) == [1, 1, 1, 1, 2, 2]
    # The next pass has nothing due; once hour 2 is, it scans that hour alone.
    assert sweep.run_once(now_s=T0 + 2 * HOUR + GRACE_S + 60).rows_scanned == 0
    later = sweep.run_once(now_s=T0 + 3 * HOUR + GRACE_S)
    assert (later.rows_scanned, later.rows_compacted) == (2, 2)
    assert cells_per_row(tsdb) == [1] * 6


def test_salted_rows_are_swept_in_every_bucket(
        tsd_config: dict[str, Any], request: pytest.FixtureRequest) -> None:
    tsd_config.update({**SETTINGS, "tsd.storage.salt.width": 1, "tsd.storage.salt.buckets": 4})
    tsdb: TSDB = request.getfixturevalue("tsdb")
    hosts = [f"web{n:02d}" for n in range(8)]
    write(tsdb, hosts, [0])
    salts = {row[:1] for row, _ in tsdb.data_table().scan(keys_only=True)}
    assert len(salts) > 1  # the rows are spread over several buckets
    stats = process_in(tsdb, "a").run_once(now_s=T0 + HOUR + GRACE_S)
    assert (stats.rows_scanned, stats.rows_compacted) == (8, 8)
    assert cells_per_row(tsdb) == [1] * 8


def process_in(tsdb: TSDB, owner: str) -> CompactionSweep:
    return CompactionSweep(tsdb, Lease(tsdb.uid_table, SWEEP_ROW, SWEEP_COLUMN,
                                       3 * INTERVAL_S, owner))


def test_an_hour_within_its_grace_is_not_due(
        tsdb: TSDB, process: Callable[..., CompactionSweep]) -> None:
    write(tsdb, ["web01"], [0, 1])
    stats = process("a").run_once(now_s=T0 + 2 * HOUR + GRACE_S - 1)
    assert (stats.rows_compacted, stats.done_until_s) == (1, T0 + HOUR)
    assert cells_per_row(tsdb) == [1, 2]


def test_only_the_holder_sweeps_and_the_next_resumes_where_it_died(
        tsdb: TSDB, process: Callable[..., CompactionSweep]) -> None:
    write(tsdb, ["web01", "web02", "web03"], [0, 1])
    now = T0 + 2 * HOUR + GRACE_S
    a, b = process("a", rows_per_pass=4), process("b")
    first = a.run_once(now_s=now)  # a's budget runs out inside the window, then a "dies"
    # The first window reaches back a day; it is not done, its position is stored.
    assert (first.rows_scanned, first.rows_compacted) == (4, 4)
    assert first.done_until_s == T0 + 2 * HOUR - 86400
    assert sorted(cells_per_row(tsdb)) == [1, 1, 1, 1, 2, 2]
    assert b.run_once(now_s=now + 60).held_by_other  # a's lease is live for 180 s
    assert sorted(cells_per_row(tsdb)) == [1, 1, 1, 1, 2, 2]
    taken = b.run_once(now_s=now + 3 * INTERVAL_S + 1)
    # b carries on from a's position: the two rows left, none scanned again
    assert (taken.rows_scanned, taken.rows_compacted) == (2, 2)
    assert (taken.held_by_other, taken.done_until_s) == (False, T0 + 2 * HOUR)
    assert cells_per_row(tsdb) == [1] * 6
    assert a.run_once(now_s=now + 3 * INTERVAL_S + 2).held_by_other


def test_stats_report_the_fleet_position_and_lag(
        tsdb: TSDB, process: Callable[..., CompactionSweep]) -> None:
    write(tsdb, ["web01", "web02"], [0])
    a, b = process("a", rows_per_pass=1), process("b")
    a.run_once(now_s=T0 + HOUR + GRACE_S)
    # The stored position is read by every process alike: b reports a's (the window a
    # started reaches a day back and is not done), and a lag of years by the real clock.
    lines = {metric: value for metric, value, _ in b.stat_lines()}
    assert lines["tsd.compaction.sweep.done_until_s"] == T0 + HOUR - 86400
    assert lines["tsd.compaction.sweep.lag_s"] > 10 * 365 * 86400
    assert lines["tsd.compaction.sweep.holder"] == 0
    assert (lines["tsd.compaction.sweep.rows_scanned"], a.totals.rows_scanned) == (0, 1)
    a_lines = {metric: value for metric, value, _ in a.stat_lines()}
    assert a_lines["tsd.compaction.sweep.rows_compacted"] == 1
    assert a_lines["tsd.compaction.sweep.holder"] == 0  # its 2012 lease expired long ago


def test_a_window_in_progress_is_resumed_after_the_horizon_moves() -> None:
    from app.tsdb.compaction_sweep import Window, window_of
    from app.tsdb.lease import LeaseState

    day_ago = T0 - 86400
    stored = LeaseState("a", 0, day_ago, Window(day_ago, T0, b"\x01\x02").cursor())
    # Two days on, the stored window still goes on from its row (no rescan from its start) ...
    assert window_of(stored, T0 + 2 * 86400) == Window(day_ago, T0, b"\x01\x02")
    # ... and once done, the next window starts at most a day before the horizon.
    done = LeaseState("a", 0, T0, None)
    assert window_of(done, T0 + 2 * 86400) == Window(T0 + 86400, T0 + 2 * 86400)
    assert window_of(done, T0 + HOUR) == Window(T0, T0 + HOUR)
    assert window_of(done, T0) is None
    # A damaged cursor restarts the window from its stored start.
    assert window_of(LeaseState("a", 0, T0, "x:zz"), T0 + HOUR) == Window(T0, T0 + HOUR)
