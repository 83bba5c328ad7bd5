"""One background rollup pass among every pytsd process sharing a store: a lease in storage.

Several stateless pytsd processes (and every gunicorn worker of each) may run the background
pass; only the holder of the lease does (:mod:`app.tsdb.lease`). The lease keeps how far the
rollups are done, so a process that takes over an expired lease carries on where the last
holder stopped.

The cell lives in the finest rollup table, in a row whose metric UID is 0: UIDs start at 1,
so no query, rollup scan or OpenTSDB reader ever reaches it, and OpenTSDB's fsck reads only
the raw data table.
"""

from __future__ import annotations

from app.tsdb import TSDB
from app.tsdb.lease import Lease, LeaseState, new_owner

__all__ = ["LEASE_COLUMN", "LEASE_TAIL", "LeaseState", "RollupLease", "new_owner"]

LEASE_TAIL = b"pytsd.rollup.lease"
LEASE_COLUMN = b"t:lease"


class RollupLease(Lease):
    """The rollup pass's lease, in the finest rollup table."""

    def __init__(self, tsdb: TSDB, lease_s: float, owner: str | None = None) -> None:
        assert tsdb.rollup_config is not None
        name = tsdb.rollup_config.rollups()[0].table
        super().__init__(
            lambda: tsdb.table(name),
            bytes(tsdb.layout.salt_width + tsdb.layout.metric_width) + LEASE_TAIL,
            LEASE_COLUMN, lease_s, owner)
