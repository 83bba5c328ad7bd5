"""What the workers of one server count together, in memory the arbiter maps before it forks.

``WorkerShares`` (made by ``TsdWorker.setup``, which gunicorn calls in the arbiter) holds
anonymous ``MAP_SHARED`` blocks every forked worker inherits:

* a slot per worker: its pid and the connections it holds, for spreading accepts evenly
  (``app/server/accept.py``);
* per slot, a row of ``ADDRESS_BUCKETS`` counters: the connections the worker holds from each
  client address, hashed (CRC-32) into a bucket, for ``tsd.core.connections.per_ip_limit``
  over the whole server. An address's count is its bucket's column summed over the rows of
  live workers. Two addresses in one bucket share a count: a collision can only make the cap
  stricter for them, never looser;
* per slot, the queries the worker runs now and when its last one ended, so that a worker
  splits a read over a second core (``app/server/split_helper.py``) only while no other
  worker of the server is querying: with both cores taken by queries, a split adds a third
  busy process and the light requests (``/api/version``, a one-series panel) wait for a CPU.

Each worker writes only its own slot and row (from its event loop, so without a lock) and
reads the others'. Two workers counting the same address at the same instant may both see the
other's connection and both refuse (stricter again). A worker's counts end with it: it clears
its row when it leaves; a worker that died without leaving (killed, ``os._exit``) is cleared by
the arbiter when it reaps it (``forget``, from gunicorn's ``child_exit`` hook), by the worker
that takes its slot, and is skipped by the sum while its pid is gone. The lock guards only who
owns which slot.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import time
import zlib

from app.observe import pid_alive

SLOTS = 64  # the most workers that share counts; more fall back to counting alone
ADDRESS_BUCKETS = 16384  # per worker: 64 KiB of int32 counters
LOCK_TIMEOUT_S = 1.0  # the arbiter never blocks on a lock a killed worker may have held
_NOT_ACCEPTING = -1  # a slot whose worker drains its connections: not in the accept shares


class WorkerShares:
    """Worker slots ``[pid, count] * SLOTS``, their address rows and query counts, shared
    across fork."""

    def __init__(self) -> None:
        self._creator = os.getpid()
        self._lock = multiprocessing.Lock()  # only for claiming and freeing a slot
        self._memory = mmap.mmap(-1, SLOTS * 2 * 8)  # anonymous and shared across fork
        self._cells = memoryview(self._memory).cast("q")
        self._address_memory = mmap.mmap(-1, SLOTS * ADDRESS_BUCKETS * 4)
        self._addresses = memoryview(self._address_memory).cast("i")
        # Per slot: [queries running, CLOCK_MONOTONIC ms when the last one ended]; the clock
        # is the machine's, the same in every process.
        self._query_memory = mmap.mmap(-1, SLOTS * 2 * 8)
        self._queries = memoryview(self._query_memory).cast("q")
        self._slot = -1

    @classmethod
    def private(cls) -> WorkerShares:
        """Counts for this process alone (no arbiter made shared ones): per-worker limits."""
        shares = cls()
        shares._cells[0], shares._slot = os.getpid(), 0
        return shares

    def join(self) -> bool:
        """Claim a slot for this worker (a free one, or a dead worker's); False if unshared."""
        if os.getpid() == self._creator:
            return False  # created in this very process: nobody else sees it
        pid = os.getpid()
        with self._lock:
            for slot in range(SLOTS):
                owner = self._cells[2 * slot]
                if owner == 0 or not pid_alive(owner):
                    self._clear_row(slot)
                    self._cells[2 * slot], self._cells[2 * slot + 1] = pid, 0
                    self._slot = slot
                    return True
        return False

    def stop_accepting(self) -> None:
        """Out of the accept shares; the row still counts the connections being drained."""
        if self._slot >= 0:
            self._cells[2 * self._slot + 1] = _NOT_ACCEPTING

    def leave(self) -> None:
        """Free the slot and its counts (this worker holds no more connections)."""
        if self._slot >= 0:
            self._clear_row(self._slot)
            self._cells[2 * self._slot + 1] = 0
            self._cells[2 * self._slot] = 0
            self._slot = -1

    def forget(self, pid: int) -> None:
        """In the arbiter, once worker ``pid`` is reaped: free its slot and its counts."""
        if not self._lock.acquire(timeout=LOCK_TIMEOUT_S):
            return  # join reclaims the slot later: its pid is dead
        try:
            for slot in range(SLOTS):
                if self._cells[2 * slot] == pid:
                    self._clear_row(slot)
                    self._cells[2 * slot + 1] = 0
                    self._cells[2 * slot] = 0
        finally:
            self._lock.release()

    def set_mine(self, count: int) -> None:
        if self._slot >= 0 and self._cells[2 * self._slot + 1] != _NOT_ACCEPTING:
            self._cells[2 * self._slot + 1] = count

    def over_share(self, mine: int, slack_fraction: int, slack_from_share: int) -> bool:
        """Whether ``mine`` is more than an even share of the connections of the workers
        that accept now (one still booting or draining does not count: nobody would take
        its share), with a slack of ``1/slack_fraction`` of the share once the share reaches
        ``slack_from_share``."""
        if self._slot < 0:
            return False
        cells = self._cells
        counts = [cells[2 * slot + 1] for slot in range(SLOTS)
                  if cells[2 * slot] != 0 and cells[2 * slot + 1] != _NOT_ACCEPTING]
        if len(counts) < 2:
            return False
        share = sum(counts) / len(counts)
        slack = share // slack_fraction if share >= slack_from_share else 0
        return mine > share + slack

    def hold_address(self, address: str) -> int:
        """Count one more connection from ``address`` in this worker; the connections the
        server holds from it now (this one included)."""
        if self._slot < 0:
            return 0
        self._addresses[self._slot * ADDRESS_BUCKETS + _bucket(address)] += 1
        return self.held_from(address)

    def release_address(self, address: str) -> None:
        """The connection ``hold_address`` counted has closed. After ``leave`` the row is
        not ours any more (another worker may own it): nothing to do."""
        if self._slot >= 0:
            cell = self._slot * ADDRESS_BUCKETS + _bucket(address)
            self._addresses[cell] = max(0, self._addresses[cell] - 1)

    def held_from(self, address: str) -> int:
        """The connections the live workers hold from ``address`` (and any address sharing
        its bucket)."""
        cells, counts, bucket = self._cells, self._addresses, _bucket(address)
        total = 0
        for slot in range(SLOTS):
            count = counts[slot * ADDRESS_BUCKETS + bucket]
            # A dead worker's row counts no more, even before anyone clears it.
            if count > 0 and cells[2 * slot] != 0 and (
                    slot == self._slot or pid_alive(cells[2 * slot])):
                total += count
        return total

    def query_started(self) -> None:
        """This worker runs one more query (called from its event loop only)."""
        if self._slot >= 0:
            self._queries[2 * self._slot] += 1

    def query_ended(self) -> None:
        if self._slot >= 0:
            self._queries[2 * self._slot] = max(0, self._queries[2 * self._slot] - 1)
            self._queries[2 * self._slot + 1] = _now_ms()

    def others_querying(self, within_ms: int) -> bool:
        """Whether another live worker runs a query now or ended one in the last
        ``within_ms`` (a client's next query, a dashboard's next panel, usually follows)."""
        cells, queries = self._cells, self._queries
        since_ms = _now_ms() - within_ms
        return any(
            slot != self._slot and cells[2 * slot] != 0
            and (queries[2 * slot] > 0 or queries[2 * slot + 1] > since_ms)
            and pid_alive(cells[2 * slot])
            for slot in range(SLOTS))

    def _clear_row(self, slot: int) -> None:
        self._queries[2 * slot] = self._queries[2 * slot + 1] = 0
        start = slot * ADDRESS_BUCKETS * 4
        self._address_memory[start:start + ADDRESS_BUCKETS * 4] = bytes(ADDRESS_BUCKETS * 4)


def _now_ms() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1_000_000


def _bucket(address: str) -> int:
    # CRC-32, not hash(): the same bucket in every process whatever its hash seed.
    return zlib.crc32(address.encode("utf-8", "surrogateescape")) % ADDRESS_BUCKETS
