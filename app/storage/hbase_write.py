"""Group commit of one process's HBase writes: puts and appends of concurrent callers merged
into few large Thrift calls, each caller answered only once its cells are stored.

Measured through the Thrift1 gateway (bench/bench_hbase_put.py): HBase's cost of a
``mutateRows`` is per *row*, about the same for one cell of a row as for four, and several
calls in flight on separate connections go ~2x faster than one after the other. So:

* a caller's rows are queued. A caller that finds nobody gathering a batch (and fewer than
  ``writers`` callers writing) becomes the batch's *leader*: it waits up to ``linger_ms`` from
  the first queued row (less once ``max_cells`` are queued), takes everything queued, merges
  the cells of one row from every caller into one row mutation (a later put of a column wins,
  as it would in sequence) and writes them itself, in chunks on up to ``writers`` connections
  at once. The others queued meanwhile wait for it. No thread of the batcher's own: the
  hand-off to a writer thread and back cost ~3.5 µs per point of a 50-point request, more
  than the write itself (bench/bench_put_phases.py);
* appends of one row and column are concatenated in arrival order into one ``append`` call
  (the bytes the same appends in sequence leave in the cell), the rows' calls in parallel;
  or, given an ``appends_call`` (the native client's ``Multi``), into one append each of
  chunks of many rows and columns, like the puts;
* up to ``writers`` leaders write at once, so one batch is gathered while the last is
  written; a leader done writing leads again while rows wait with nobody gathering them;
* through the Thrift gateway (``gateway()``), a batch's puts are split over up to ``writers``
  calls at once, and a leader lingers as said above. Natively neither: one ``Multi`` per
  region server is cheaper for the region server and for pytsd than several (the calls to
  several servers are in flight at once already), and the rows queued while a write is in
  flight are the next batch without a timed wait (bench/bench_hbase_put.py --linger-ms 1,0:
  ~1.2x the points/s without the linger, about the same CPU per point).

A caller's :meth:`WriteBatcher.put` / :meth:`WriteBatcher.append` returns only when every call
holding its cells succeeded, and raises the failure (a :class:`StorageError`) otherwise: an
acknowledged point is in HBase. State belongs to the process that made it: after a fork the
child starts afresh.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

from app.errors import StorageError, StorageUnavailableError

# (table, rows) -> None: one mutateRows call; (table, row, column, value) -> None: one append.
PutCall = Callable[[bytes, list[tuple[bytes, dict[bytes, bytes]]]], None]
AppendCall = Callable[[bytes, bytes, bytes, bytes], None]
# (table, [(row, column, value)]) -> None: many appends in one call.
AppendsCall = Callable[[bytes, list[tuple[bytes, bytes, bytes]]], None]
ROWS_PER_CALL_MIN = 64  # below this, splitting a batch over connections costs more than it saves


class _Ticket:
    """One caller's wait for the calls that hold its cells."""

    __slots__ = ("_event", "error")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.error: BaseException | None = None

    def done(self, error: BaseException | None) -> None:
        self.error = error
        self._event.set()

    def wait(self, timeout_s: float) -> None:
        if not self._event.wait(timeout_s):
            raise StorageUnavailableError(
                f"HBase write not confirmed within {timeout_s:.0f} s",
                "the batched write may still complete; writing the same points again is safe")
        if self.error is not None:
            if isinstance(self.error, StorageError):
                raise self.error
            raise StorageError(f"HBase write failed: {self.error}") from self.error


@dataclass
class _TableBatch:
    """What the callers of one table queued since the last take."""

    puts: dict[bytes, dict[bytes, bytes]] = field(default_factory=dict)
    put_cells: int = 0  # queued (a cell put twice counted twice)
    appends: dict[tuple[bytes, bytes], list[bytes]] = field(default_factory=dict)
    tickets: list[_Ticket] = field(default_factory=list)


class WriteBatcher:
    """Merges concurrent writes of one process into large Thrift calls (module docstring)."""

    def __init__(self, put_call: PutCall, append_call: AppendCall, writers: int,
                 linger_ms: float, max_cells: int, wait_s: float,
                 appends_call: AppendsCall | None = None,
                 gateway: Callable[[], bool] = lambda: True) -> None:
        self._put_call = put_call
        self._gateway = gateway
        self._append_call = append_call
        self._appends_call = appends_call
        self.writers = max(1, writers)
        self.linger_s = max(0.0, linger_ms) / 1000
        self.max_cells = max_cells
        self.wait_s = wait_s
        self._pid = 0
        self._start_lock = threading.Lock()
        self._cond = threading.Condition()
        self._pending: dict[bytes, _TableBatch] = {}
        self._pending_cells = 0
        self._first_at = 0.0
        self._leaders = 0  # callers writing a batch (or gathering one) now
        self._gathering = False  # one of them waits for more rows before taking the queue
        self._calls: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------ callers

    def put(self, table: bytes, rows: Iterable[tuple[bytes, Mapping[bytes, bytes]]]) -> None:
        """Store the rows' cells; returns once they are in HBase, raises if they may not be."""
        ticket = _Ticket()
        with self._queue(table, ticket) as queueing:
            puts, cells = queueing.batch.puts, 0
            for row, data in rows:
                row_cells = puts.get(row)
                if row_cells is None:
                    puts[row] = dict(data)
                else:
                    row_cells.update(data)
                cells += len(data)
            self._pending_cells += cells
            queueing.batch.put_cells += cells
        self._lead_or_wait(queueing.leads, ticket)

    def append(self, table: bytes, cells: Sequence[tuple[bytes, bytes, bytes]]) -> None:
        """Append each ``(row, column, value)`` (in this order for one row and column)."""
        ticket = _Ticket()
        with self._queue(table, ticket) as queueing:
            appends = queueing.batch.appends
            for row, column, value in cells:
                appends.setdefault((row, column), []).append(value)
            self._pending_cells += len(cells)
        self._lead_or_wait(queueing.leads, ticket)

    def _queue(self, table: bytes, ticket: _Ticket) -> _Queueing:
        self._ensure_fresh()
        return _Queueing(self, table, ticket)

    def _lead_or_wait(self, leads: bool, ticket: _Ticket) -> None:
        if leads:
            self._lead()
        ticket.wait(self.wait_s)

    # ------------------------------------------------------------ leaders

    def _ensure_fresh(self) -> None:
        if self._pid == os.getpid():
            return
        with self._start_lock:
            if self._pid == os.getpid():
                return
            # After a fork: the parent's queue and leaders are not ours (and never will run).
            self._cond = threading.Condition()
            self._pending, self._pending_cells = {}, 0
            self._leaders, self._gathering = 0, False
            self._calls = None
            self._pid = os.getpid()

    def close(self) -> None:
        """Wait (bounded) for the callers writing now, then stop the threads that split large
        batches over connections (a later write starts them again): a closed store leaves no
        thread behind."""
        with self._start_lock:
            if self._pid != os.getpid():
                return
            deadline = time.monotonic() + self.wait_s
            with self._cond:
                while self._leaders and time.monotonic() < deadline:
                    self._cond.wait(0.01)
            if self._calls is not None:
                self._calls.shutdown(wait=True)
            self._calls, self._pid = None, 0

    def _lead(self) -> None:
        """Gather a batch, write it, answer its callers; again while rows wait ungathered."""
        taken: dict[bytes, _TableBatch] | None = self._take()
        while taken is not None:
            for table, batch in taken.items():
                try:
                    self._write(table, batch)
                except BaseException as exc:  # noqa: BLE001 - every waiting caller hears of it
                    for ticket in batch.tickets:
                        ticket.done(exc)
                else:
                    for ticket in batch.tickets:
                        ticket.done(None)
            taken = self._next()

    def _take(self) -> dict[bytes, _TableBatch]:
        """As the gathering leader: everything queued, once it is worth writing."""
        with self._cond:
            deadline = self._first_at + (self.linger_s if self._gateway() else 0.0)
            while self._pending_cells < self.max_cells:
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    break
                self._cond.wait(left_s)
            taken, self._pending, self._pending_cells = self._pending, {}, 0
            self._gathering = False
            return taken

    def _next(self) -> dict[bytes, _TableBatch] | None:
        """After a write: gather the rows queued with nobody gathering them, or stop leading."""
        with self._cond:
            if not self._pending or self._gathering:
                self._leaders -= 1
                self._cond.notify_all()  # close() may be waiting for the last leader
                return None
            self._gathering = True
        return self._take()

    def _write(self, table: bytes, batch: _TableBatch) -> None:
        """Every call of the batch, in up to ``writers`` sequences run at once (a sequence per
        connection: a thread hand-off costs more than a call here); the first failure raises."""
        calls: list[Callable[[], None]] = []
        if batch.puts:
            rows = sorted(batch.puts.items())
            gateway = self._gateway()
            if not gateway and batch.put_cells <= self.max_cells:
                chunks = [rows]  # natively: one call (no walk of the rows to cut it)
            else:
                chunks = _chunks(rows, self.writers if gateway else 1, self.max_cells)
            for chunk in chunks:
                calls.append(partial(self._put_call, table, chunk))
        if self._appends_call is not None and batch.appends:
            appends = [(row, column, b"".join(values))
                       for (row, column), values in sorted(batch.appends.items())]
            for start in range(0, len(appends), self.max_cells):
                calls.append(partial(self._appends_call, table,
                                     appends[start:start + self.max_cells]))
        else:
            for (row, column), values in batch.appends.items():
                calls.append(partial(self._append_call, table, row, column, b"".join(values)))
        if not calls:
            return
        sequences = [calls[i::self.writers] for i in range(min(self.writers, len(calls)))]
        if len(sequences) == 1:
            _run(sequences[0])
            return
        futures = [self._executor().submit(_run, sequence) for sequence in sequences[1:]]
        error: BaseException | None = None
        try:
            _run(sequences[0])  # this thread's share
        except BaseException as exc:  # noqa: BLE001 - raised once the others are done
            error = exc
        errors = [future.exception() for future in futures]
        first = error or next((e for e in errors if e is not None), None)
        if first is not None:
            raise first

    def _executor(self) -> ThreadPoolExecutor:
        with self._start_lock:
            if self._calls is None:
                self._calls = ThreadPoolExecutor(max(1, self.writers - 1),
                                                 thread_name_prefix="pytsd-hbase-call")
            return self._calls


def _run(calls: Sequence[Callable[[], None]]) -> None:
    for call in calls:
        call()


class _Queueing:
    """``with``: the table's pending batch under the lock, the caller's ticket on it; on
    leaving, whether the caller leads (nobody gathers and fewer than ``writers`` write), and
    the gathering leader woken once the queue is full (it wakes at its linger's end anyway)."""

    def __init__(self, batcher: WriteBatcher, table: bytes, ticket: _Ticket) -> None:
        self.batcher = batcher
        self.table = table
        self.ticket = ticket
        self.leads = False
        self.batch = _TableBatch()

    def __enter__(self) -> _Queueing:
        batcher = self.batcher
        batcher._cond.acquire()
        if not batcher._pending:
            batcher._first_at = time.monotonic()
        self.batch = batcher._pending.setdefault(self.table, _TableBatch())
        self.batch.tickets.append(self.ticket)
        return self

    def __exit__(self, *exc: object) -> None:
        batcher = self.batcher
        try:
            if not batcher._gathering and batcher._leaders < batcher.writers:
                batcher._gathering, batcher._leaders, self.leads = True, batcher._leaders + 1, True
            elif batcher._pending_cells >= batcher.max_cells:
                batcher._cond.notify_all()
        finally:
            batcher._cond.release()


def _chunks(rows: list[tuple[bytes, dict[bytes, bytes]]], writers: int, max_cells: int
            ) -> list[list[tuple[bytes, dict[bytes, bytes]]]]:
    """Rows in up to ``writers`` chunks of at least ``ROWS_PER_CALL_MIN`` rows, each of at most
    ``max_cells`` cells (a bounded request size)."""
    per_chunk = max(ROWS_PER_CALL_MIN, -(-len(rows) // writers))
    chunks: list[list[tuple[bytes, dict[bytes, bytes]]]] = []
    chunk: list[tuple[bytes, dict[bytes, bytes]]] = []
    cells = 0
    for row in rows:
        if chunk and (len(chunk) >= per_chunk or cells + len(row[1]) > max_cells):
            chunks.append(chunk)
            chunk, cells = [], 0
        chunk.append(row)
        cells += len(row[1])
    if chunk:
        chunks.append(chunk)
    return chunks
