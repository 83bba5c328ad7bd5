"""A lease in storage: one holder at a time among every pytsd process sharing a store.

Background work of the fleet (the rollup pass, the compaction sweep) runs in every worker of
every pytsd process, and only the holder of its lease does it. A lease is one cell, written
with check-and-put (HBase's ``checkAndPut``; a transaction on the embedded store), holding its
owner, its expiry and how far the work is done, so a process that takes over an expired lease
carries on where the last holder stopped instead of starting again. Memory is no help here:
the processes share nothing but the store.

Each job chooses where its cell lives (a row no reader of OpenTSDB's data reaches) and what its
progress means: ``done_until_s`` (everything before it is done), an optional ``cursor``
(a job's own position inside the span it is working on) and named ``positions`` (more of a
job's own marks, e.g. the rollup backfill's cursor and the oldest raw hour it found).
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from app.storage.base import Table


@dataclass(frozen=True)
class LeaseState:
    owner: str
    expires_s: float
    done_until_s: int | None
    cursor: str | None = None
    positions: Mapping[str, int] = field(default_factory=dict)

    def position(self, name: str) -> int | None:
        return self.positions.get(name)

    def with_positions(self, given: Mapping[str, int | None]) -> dict[str, int]:
        """These positions with ``given`` laid over them (a None leaves one as it was)."""
        return {**self.positions, **{k: v for k, v in given.items() if v is not None}}

    def encode(self) -> bytes:
        fields: dict[str, object] = {**self.positions, "owner": self.owner,
                                     "expires_s": self.expires_s,
                                     "done_until_s": self.done_until_s}
        if self.cursor is not None:  # absent otherwise: the rollup lease's bytes stay as they were
            fields["cursor"] = self.cursor
        return json.dumps(fields, sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> LeaseState | None:
        try:
            data = json.loads(raw)
            cursor = data.get("cursor")
            positions = {k: int(v) for k, v in data.items()
                         if k not in _OWN_FIELDS and v is not None}
            return cls(str(data["owner"]), float(data["expires_s"]),
                       None if data["done_until_s"] is None else int(data["done_until_s"]),
                       None if cursor is None else str(cursor), positions)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None  # a damaged cell: treated as expired, overwritten by check-and-put


_OWN_FIELDS = frozenset({"owner", "expires_s", "done_until_s", "cursor"})


def new_owner() -> str:
    """Unique per process and per lease object: host, PID and a random tail."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    """Acquire, renew and record progress under the lease; every write is a check-and-put
    against the cell last read, so two processes can never both believe they hold it."""

    def __init__(self, table: Callable[[], Table], row: bytes, column: bytes, lease_s: float,
                 owner: str | None = None) -> None:
        self._table = table  # opened on use: the store may not be reachable (or forked) yet
        self.row = row
        self.column = column
        self.lease_s = lease_s
        self.owner = owner or new_owner()
        self._held: bytes | None = None  # the cell as this owner last wrote it

    @property
    def table(self) -> Table:
        return self._table()

    def current(self) -> tuple[bytes | None, LeaseState | None]:
        raw = self.table.row(self.row, [self.column]).get(self.column)
        return raw, None if raw is None else LeaseState.decode(raw)

    def acquire(self, now_s: float) -> LeaseState | None:
        """The lease renewed for ``lease_s`` from ``now_s``, or None when another live
        owner holds it."""
        raw, state = self.current()
        if state is not None and state.owner != self.owner and state.expires_s > now_s:
            return None
        mine = (LeaseState(self.owner, now_s + self.lease_s, None) if state is None else
                LeaseState(self.owner, now_s + self.lease_s, state.done_until_s, state.cursor,
                           state.positions))
        return mine if self._swap(raw, mine) else None

    def record(self, state: LeaseState, done_until_s: int, **positions: int | None) -> bool:
        """Store progress (named ``positions`` laid over the state's; None keeps one); False
        when the lease was lost meanwhile (someone took it over: the cells written are the
        same bytes either way, only the work was doubled)."""
        return self._swap(self._held, LeaseState(self.owner, state.expires_s, done_until_s,
                                                 state.cursor, state.with_positions(positions)))

    def advance(self, done_until_s: int | None, cursor: str | None,
                now_s: float) -> LeaseState | None:
        """Store progress and renew the lease for ``lease_s`` from ``now_s``, in one write:
        a long pass checkpoints as it goes, so a holder killed mid-pass loses at most the
        work since its last checkpoint. None when the lease was lost meanwhile."""
        kept = LeaseState.decode(self._held) if self._held is not None else None
        state = LeaseState(self.owner, now_s + self.lease_s, done_until_s, cursor,
                           kept.positions if kept is not None else {})
        return state if self._swap(self._held, state) else None

    def _swap(self, expected: bytes | None, state: LeaseState) -> bool:
        value = state.encode()
        if self.table.check_and_put(self.row, self.column, expected, value):
            self._held = value
            return True
        self._held = None
        return False
