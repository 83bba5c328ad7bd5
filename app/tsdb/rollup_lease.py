"""One background rollup pass among every pytsd process sharing a store: a lease in storage.

Several stateless pytsd processes (and every gunicorn worker of each) may run the background
pass; only the holder of the lease does. The lease is one cell, written with check-and-put
(HBase's ``checkAndPut``; a transaction on the embedded store), holding its owner, its expiry
and how far the rollups are done, so a process that takes over an expired lease carries on
where the last holder stopped instead of starting again. Memory is no help here: the
processes share nothing but the store.

The cell lives in the finest rollup table, in a row whose metric UID is 0: UIDs start at 1,
so no query, rollup scan or OpenTSDB reader ever reaches it, and OpenTSDB's fsck reads only
the raw data table.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from dataclasses import dataclass

from app.storage.base import Table
from app.tsdb import TSDB

LEASE_TAIL = b"pytsd.rollup.lease"
LEASE_COLUMN = b"t:lease"


@dataclass(frozen=True)
class LeaseState:
    owner: str
    expires_s: float
    done_until_s: int | None

    def encode(self) -> bytes:
        return json.dumps({"owner": self.owner, "expires_s": self.expires_s,
                           "done_until_s": self.done_until_s}, sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> LeaseState | None:
        try:
            data = json.loads(raw)
            return cls(str(data["owner"]), float(data["expires_s"]),
                       None if data["done_until_s"] is None else int(data["done_until_s"]))
        except (ValueError, KeyError, TypeError):
            return None  # a damaged cell: treated as expired, overwritten by check-and-put


def new_owner() -> str:
    """Unique per process and per pass object: host, PID and a random tail."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class RollupLease:
    """Acquire, renew and record progress under the lease; every write is a check-and-put
    against the cell last read, so two processes can never both believe they hold it."""

    def __init__(self, tsdb: TSDB, lease_s: float, owner: str | None = None) -> None:
        assert tsdb.rollup_config is not None
        self.table: Table = tsdb.table(tsdb.rollup_config.rollups()[0].table)
        self.row = bytes(tsdb.layout.salt_width + tsdb.layout.metric_width) + LEASE_TAIL
        self.lease_s = lease_s
        self.owner = owner or new_owner()
        self._held: bytes | None = None  # the cell as this owner last wrote it

    def current(self) -> tuple[bytes | None, LeaseState | None]:
        raw = self.table.row(self.row, [LEASE_COLUMN]).get(LEASE_COLUMN)
        return raw, None if raw is None else LeaseState.decode(raw)

    def acquire(self, now_s: float) -> LeaseState | None:
        """The lease renewed for ``lease_s`` from ``now_s``, or None when another live
        owner holds it."""
        raw, state = self.current()
        if state is not None and state.owner != self.owner and state.expires_s > now_s:
            return None
        mine = LeaseState(self.owner, now_s + self.lease_s,
                          None if state is None else state.done_until_s)
        return mine if self._swap(raw, mine) else None

    def record(self, state: LeaseState, done_until_s: int) -> bool:
        """Store progress; False when the lease was lost meanwhile (someone took it over:
        the cells written are the same bytes either way, only the work was doubled)."""
        return self._swap(self._held, LeaseState(self.owner, state.expires_s, done_until_s))

    def _swap(self, expected: bytes | None, state: LeaseState) -> bool:
        value = state.encode()
        if self.table.check_and_put(self.row, LEASE_COLUMN, expected, value):
            self._held = value
            return True
        self._held = None
        return False
