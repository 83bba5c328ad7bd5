"""The background rollup pass runs in one holder of a lease in storage, on both backends.

Two :class:`RollupPass` objects over two TSDB objects on the same store stand for two pytsd
processes (they share nothing but the store); ``tests/e2e/test_rollup_background.py`` runs
two real server processes.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.tsdb import TSDB
from app.tsdb.rollup_lease import LEASE_COLUMN, LeaseState, RollupLease
from app.tsdb.rollups import RollupPass
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import make_tsdb
from tests.rollup_fixtures import ROLLUP_SETTINGS

DAY = 1370476800  # Thu, 06 Jun 2013 00:00:00 GMT
LEASE_S = 7200  # longer than the hour between two passes below


@pytest.fixture
def two_processes(tsd_config: dict[str, Any], request: pytest.FixtureRequest
                  ) -> tuple[TSDB, TSDB]:
    """Two TSDB objects (caches, connections of their own) over one store."""
    tsd_config.update(ROLLUP_SETTINGS)
    first: TSDB = request.getfixturevalue("tsdb")
    second = make_tsdb(dict(first.config))
    request.addfinalizer(second.close)
    return first, second


def _load(tsdb: TSDB, hours: int) -> None:
    points = [DataPoint("m", ts, 1, {"host": "a"}) for ts in range(DAY, DAY + hours * 3600, 60)]
    assert not any(PointWriter(tsdb).write(points))


def _pass(tsdb: TSDB, owner: str) -> RollupPass:
    return RollupPass(tsdb, RollupLease(tsdb, LEASE_S, owner))


def _hour_end(tsdb: TSDB, hour: int) -> float:
    """An instant at which ``hour`` hours since DAY have closed (lag included)."""
    return DAY + hour * 3600 + tsdb.config["tsd.rollups.compute.lag_s"] + 1


def test_only_the_holder_rolls_up(two_processes: tuple[TSDB, TSDB]) -> None:
    a_tsdb, b_tsdb = two_processes
    _load(a_tsdb, hours=4)
    a, b = _pass(a_tsdb, "a"), _pass(b_tsdb, "b")
    first = a.run_once(now_s=_hour_end(a_tsdb, 2))
    assert first.points_read > 0 and not first.held_by_other
    # b sees a's lease, live, and does nothing, even with an hour closed since
    skipped = b.run_once(now_s=_hour_end(a_tsdb, 3))
    assert skipped.held_by_other and skipped.points_read == 0
    # a renews its own lease and carries on from where it stopped: one hour, 60 points a table
    again = a.run_once(now_s=_hour_end(a_tsdb, 3))
    assert again.points_read == 60 * 3 and not again.held_by_other


def test_an_expired_lease_is_taken_over_with_its_progress(
        two_processes: tuple[TSDB, TSDB]) -> None:
    a_tsdb, b_tsdb = two_processes
    _load(a_tsdb, hours=6)
    a, b = _pass(a_tsdb, "a"), _pass(b_tsdb, "b")
    a.run_once(now_s=_hour_end(a_tsdb, 2))  # rolls up hour 1, then "dies"
    later = _hour_end(a_tsdb, 2) + LEASE_S + 1
    taken = b.run_once(now_s=later)
    # b goes on from hour 2 (a's progress): hours 2 and 3, not only the hour before its
    # horizon (hour 3) as a pass with no progress stored does
    assert taken.points_read == 2 * 60 * 3 and not taken.held_by_other
    raw, state = b.lease.current()
    assert raw is not None and state is not None
    assert (state.owner, state.expires_s) == ("b", later + LEASE_S)
    assert a.run_once(now_s=later + 1).held_by_other  # the old holder is now refused


def test_check_and_put_lets_one_of_two_racers_win(two_processes: tuple[TSDB, TSDB]) -> None:
    """Both read the lease as free, both try to write it: the store lets one through."""
    a_tsdb, b_tsdb = two_processes
    a, b = RollupLease(a_tsdb, LEASE_S, "a"), RollupLease(b_tsdb, LEASE_S, "b")
    raw, _ = a.current()
    assert raw is None
    assert a._swap(raw, LeaseState("a", DAY + LEASE_S, None))
    assert not b._swap(raw, LeaseState("b", DAY + LEASE_S, None))
    assert b.acquire(DAY) is None


def test_a_damaged_lease_cell_counts_as_expired(two_processes: tuple[TSDB, TSDB]) -> None:
    tsdb, _ = two_processes
    lease = RollupLease(tsdb, LEASE_S, "a")
    lease.table.put(lease.row, {LEASE_COLUMN: b"{not json"})
    state = lease.acquire(DAY)
    assert state is not None and state.owner == "a" and state.done_until_s is None
