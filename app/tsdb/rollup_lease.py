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
from dataclasses import dataclass, replace

from app.storage.base import Table
from app.tsdb import TSDB

LEASE_TAIL = b"pytsd.rollup.lease"
LEASE_COLUMN = b"t:lease"


@dataclass(frozen=True)
class LeaseState:
    owner: str
    expires_s: float
    done_until_s: int | None
    # The backfill (rollup_backfill): hours from backfill_s to done_until_s were rolled at least
    # once; oldest_s is the oldest raw hour found (at oldest_at_s), where the backfill stops.
    backfill_s: int | None = None
    oldest_s: int | None = None
    oldest_at_s: int | None = None
    sweep_s: int | None = None  # the verifier's cursor through the older rolled hours

    def encode(self) -> bytes:
        return json.dumps({"owner": self.owner, "expires_s": self.expires_s,
                           "done_until_s": self.done_until_s, "backfill_s": self.backfill_s,
                           "oldest_s": self.oldest_s, "oldest_at_s": self.oldest_at_s,
                           "sweep_s": self.sweep_s},
                          sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> LeaseState | None:
        try:
            data = json.loads(raw)
            return cls(str(data["owner"]), float(data["expires_s"]),
                       *(None if data.get(name) is None else int(data[name])
                         for name in ("done_until_s", "backfill_s", "oldest_s", "oldest_at_s",
                                      "sweep_s")))
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
        mine = (LeaseState(self.owner, now_s + self.lease_s, None) if state is None
                else replace(state, owner=self.owner, expires_s=now_s + self.lease_s))
        return mine if self._swap(raw, mine) else None

    def record(self, state: LeaseState, done_until_s: int, backfill_s: int | None = None,
               oldest_s: int | None = None, oldest_at_s: int | None = None,
               sweep_s: int | None = None) -> bool:
        """Store progress (the backfill's too, unchanged where None); False when the lease
        was lost meanwhile (someone took it over: the cells written are the same bytes
        either way, only the work was doubled)."""
        def given(value: int | None, kept: int | None) -> int | None:
            return kept if value is None else value

        return self._swap(self._held, replace(
            state, owner=self.owner, done_until_s=done_until_s,
            backfill_s=given(backfill_s, state.backfill_s),
            oldest_s=given(oldest_s, state.oldest_s),
            oldest_at_s=given(oldest_at_s, state.oldest_at_s),
            sweep_s=given(sweep_s, state.sweep_s)))

    def _swap(self, expected: bytes | None, state: LeaseState) -> bool:
        value = state.encode()
        if self.table.check_and_put(self.row, LEASE_COLUMN, expected, value):
            self._held = value
            return True
        self._held = None
        return False
