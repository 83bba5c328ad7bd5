"""Puts and appends over HBase's native RPC (``tsd.storage.hbase.write_rpc=native``): a batch
of rows grouped by region (the client's cached regions from ``hbase:meta``), one
``ClientService.Multi`` call per region server, the calls to different servers in flight at
once.

A ``MultiRequest`` (``Client.proto``) holds a ``RegionAction`` per region (region 1, action 3),
an ``Action`` per row (index 1, mutation 2) whose ``MutationProto`` says only row 1,
mutate_type 2 = PUT and associated_cell_count 8: the cells themselves follow the request as a
``KeyValueCodec`` cell block, in the actions' order, as HBase's own client sends them: no
nested protobuf per cell (bench/bench_hbase_multi.py, one-cell rows: 1.1–1.4 against
4.8–5.0 µs of pytsd's CPU per row for a ``ColumnValue`` per cell built with ``wire``, and
about half the region server's CPU). Each cell has HBase's "latest" timestamp, which the region
server replaces with its clock, as for a Thrift ``mutateRows`` without a timestamp.

The ``MultiResponse`` has a ``RegionActionResult`` per ``RegionAction`` in order (a
``ResultOrException`` per action: index 1, exception 3; or the region's exception 2). Every
action must come back without an exception. Rows whose region moved, split or is not served
yet (``NotServingRegionException``, ``RegionMovedException``, ...), or whose server's
connection broke, are sent again once with the table's regions read again from ``hbase:meta``;
what fails again, or times out, is a :class:`StorageUnavailableError` (a 503: nothing is
acknowledged that HBase may not hold). Puts are idempotent, so sending a row twice is safe;
an append (``APPEND`` actions asking for no result) is sent again only when the server said it
did not apply it, or when its request never reached a socket (a refused connection).

When the native RPC cannot reach HBase at all (ZooKeeper, ``hbase:meta``'s server or a region
server not answering: no exception from HBase, no timeout) the error is :class:`Unreached`,
holding the rows another RPC may write instead: every row not known written for puts, only
the appends known not applied (none may have reached a region server) for appends;
``tsd.storage.hbase.write_rpc=auto`` sends them through Thrift (``app/storage/hbase.py``).
"""

from __future__ import annotations

import bisect
import itertools
import os
import struct
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from app.errors import StorageError, StorageUnavailableError
from app.storage.hbase_native import messages, wire
from app.storage.hbase_native.messages import Region
from app.storage.hbase_native.rpc import RpcError, unreachable
from app.storage.hbase_native.zk import ZooKeeperError

Rows = Sequence[tuple[bytes, dict[bytes, bytes]]]
Cells = Sequence[tuple[bytes, bytes, bytes]]  # (row, column, value): appends
Call = Callable[[str, str, bytes, bytes], tuple[bytes, bytes]]  # server, method, request, cells
Regions = Callable[[bytes, bool], list[Region]]  # (table, refresh) -> regions in key order
Encode = Callable[[Any], tuple[list[bytes], list[bytes]]]  # put_actions or append_actions

APPEND, PUT = 0, 2  # MutationProto.MutationType
# MutationProto.attribute 5 = NameBytesPair "_rr_" (Mutation's RETURN_RESULTS) = false: the
# server answers an append without the cell it made (the whole row's bytes so far).
_NO_RESULTS = b"\x2a\x09\x0a\x04_rr_\x12\x01\x00"
LATEST_TIMESTAMP = b"\x7f\xff\xff\xff\xff\xff\xff\xff"  # HConstants.LATEST_TIMESTAMP
_CELL_HEAD = struct.Struct(">III")  # length of the rest, key length, value length
_LATEST_PUT = LATEST_TIMESTAMP + b"\x04"  # a cell key's end: its timestamp, type Put
_VARINTS = [wire.varint(i) for i in range(1 << 14)]  # indexes and lengths up to 16383
_BYTES = [bytes((i,)) for i in range(256)]  # a family's length (HBase's limit: 127)
_ACTION_HEADS = [b"\x1a" + wire.varint(i) for i in range(1 << 14)]  # RegionAction.action 3
_NUMBERS: list[bytes] = []  # Action.index 1 of 0, 1, ... (``_numbers``)
# Rows whose Action and key start, and columns whose key end, were made (``put_actions``):
# an hour row gets a put per point, request after request, and a column (an offset in the
# hour) recurs in every row. Each dropped whole past this many entries.
MAX_KNOWN = 100_000
_ROWS: dict[bytes, tuple[int, bytes, bytes]] = {}
_KEY_ENDS: dict[bytes, bytes] = {}

# Exceptions after which the rows are sent again, to where hbase:meta now says: the region is
# elsewhere (moved, split, closing, its server stopping) or busy for a moment.
RELOCATE = frozenset({"NotServingRegionException", "RegionMovedException",
                      "RegionOpeningException", "RegionServerStoppedException",
                      "ServerNotRunningYetException", "RegionTooBusyException",
                      "CallQueueTooBigException", "WrongRegionException",
                      "MultiActionResultTooLarge", "RetryImmediatelyException"})


def _varint(value: int) -> bytes:
    return _VARINTS[value] if value < len(_VARINTS) else wire.varint(value)


def put_actions(rows: Rows) -> tuple[list[bytes], list[bytes]]:
    """The ``Action`` (without its index) of each row, and the rows' cells as one cell
    block's pieces. A column is ``family:qualifier``."""
    actions: list[bytes] = []
    cells: list[bytes] = []
    extend, head, known, key_ends = cells.extend, _CELL_HEAD.pack, _ROWS, _KEY_ENDS
    if len(known) > MAX_KNOWN or len(key_ends) > MAX_KNOWN:
        known.clear()
        key_ends.clear()
    for row, columns in rows:
        count = len(columns)
        found = known.get(row)
        if found is None or found[0] != count:  # the row's action and key start, made once
            found = known[row] = (count, _put_action(row, count), _row_key(row))
        actions.append(found[1])
        key_start = found[2]
        for column, value in columns.items():
            key_end = key_ends.get(column)
            if key_end is None:
                key_end = key_ends[column] = _key_end(column)
            key_size = len(key_start) + len(key_end)
            extend((head(8 + key_size + len(value), key_size, len(value)), key_start, key_end,
                    value))
    return actions, cells


def _put_action(row: bytes, cells: int) -> bytes:
    """A row's ``Action`` (mutation 2: row 1, mutate_type 2 = PUT, associated_cell_count 8)."""
    mutation = b"\x0a" + _varint(len(row)) + row + b"\x10\x02\x40" + _varint(cells)
    return b"\x12" + _varint(len(mutation)) + mutation


def _key_end(column: bytes) -> bytes:
    """The rest of a cell's key after its row: family length, family, qualifier (a column
    is ``family:qualifier``), timestamp, type."""
    family, _, qualifier = column.partition(b":")
    return _BYTES[len(family)] + family + qualifier + _LATEST_PUT


def _row_key(row: bytes) -> bytes:
    """The start of a cell's key: the row's length (2 bytes), the row."""
    return len(row).to_bytes(2, "big") + row


def append_actions(cells: Cells) -> tuple[list[bytes], list[bytes]]:
    """The ``Action`` of each append (an ``APPEND`` of one cell, no result asked), and the
    cells as a cell block's pieces (a cell of type Put, as HBase's ``Append.add`` makes)."""
    actions: list[bytes] = []
    block: list[bytes] = []
    extend, head = block.extend, _CELL_HEAD.pack
    for row, column, value in cells:
        mutation = b"\x0a" + _varint(len(row)) + row + b"\x10\x00" + _NO_RESULTS + b"\x40\x01"
        actions.append(b"\x12" + _varint(len(mutation)) + mutation)
        key_start, key_end = _row_key(row), _key_end(column)
        key_size = len(key_start) + len(key_end)
        extend((head(8 + key_size + len(value), key_size, len(value)), key_start, key_end,
                value))
    return actions, block


def region_action(region_name: bytes, actions: Sequence[bytes]) -> bytes:
    """A ``RegionAction``: region 1, then each action 3 with its index 1 (its position)."""
    parts = [wire.field_bytes(1, messages.region_specifier(region_name))]
    numbers = _numbers(len(actions))
    append = parts.append
    for number, action in zip(numbers, actions):  # tag 3, length, index 1, the action
        size = len(number) + len(action)
        append(_ACTION_HEADS[size] if size < len(_ACTION_HEADS) else b"\x1a" + _varint(size))
        append(number)
        append(action)
    return b"".join(parts)


def _numbers(count: int) -> list[bytes]:
    """``Action.index`` 1 of 0 .. count - 1, as bytes (grown once, read after)."""
    global _NUMBERS
    numbers = _NUMBERS
    if len(numbers) < count:
        numbers = _NUMBERS = [b"\x08" + _varint(index) for index in range(2 * count)]
    return numbers


def multi_request(region_actions: Sequence[bytes]) -> bytes:
    """A ``MultiRequest``: each ``RegionAction`` as field 1."""
    return b"".join(wire.field_bytes(1, action) for action in region_actions)


@dataclass
class Failure:
    """Why an action (or a region's actions, ``index`` None) failed: the server's exception."""

    region: int  # the RegionAction's position in the request
    index: int | None
    exception_class: str
    message: str

    @property
    def short_class(self) -> str:
        return self.exception_class.rpartition(".")[2]


def _exception(pair: bytes) -> tuple[str, str]:
    """A ``NameBytesPair`` (name 1, value 2) as ``(class name, first line of the value)``."""
    found = wire.message(pair)
    name = wire.first_bytes(found, 1).decode(errors="replace")
    text = wire.first_bytes(found, 2).decode(errors="replace").strip()
    return name, text.splitlines()[0] if text else name


def multi_failures(response: bytes, actions_per_region: Sequence[int]) -> list[Failure]:
    """The failed actions of a ``MultiResponse``; an action the server did not answer is a
    failure too (never taken as written)."""
    results = [value for number, value in wire.fields(response)
               if number == 1 and isinstance(value, bytes)]
    if len(results) != len(actions_per_region):
        raise RpcError(f"Multi answered {len(results)} of {len(actions_per_region)} regions")
    failures: list[Failure] = []
    for region, (result, expected) in enumerate(zip(results, actions_per_region, strict=True)):
        if result == _all_written(expected):  # what HBase answers when every action succeeded
            continue
        answered = 0
        for number, value in wire.fields(result):
            if not isinstance(value, bytes):
                continue
            if number == 2:  # the whole region failed
                failures.append(Failure(region, None, *_exception(value)))
                answered = expected
                break
            if number == 1:
                answered += 1
                failure = _action_failure(region, value)
                if failure is not None:
                    failures.append(failure)
        if answered != expected:
            failures.append(Failure(region, None, "",
                                    f"Multi answered {answered} of {expected} actions"))
    return failures


_written = (b"", [0])  # the answers of 0, 1, ... actions written: one prefix of the next


def _all_written(count: int) -> memoryview:
    """A ``RegionActionResult`` of ``count`` actions written: a ``ResultOrException`` each
    with its index 1 and an empty result 2 (read field by field otherwise: ~1.4 µs per row)."""
    global _written
    answers, ends = _written
    if count >= len(ends):  # grown to twice the count asked (threads: one of them wins)
        more = [b"\x08" + _varint(index) + b"\x12\x00"
                for index in range(len(ends) - 1, 2 * count)]
        pieces = [b"\x0a" + _varint(len(one)) + one for one in more]
        ends = ends + list(itertools.accumulate(map(len, pieces), initial=len(answers)))[1:]
        answers = answers + b"".join(pieces)
        _written = answers, ends
    return memoryview(answers)[:ends[count]]


def _action_failure(region: int, result: bytes) -> Failure | None:
    """A ``ResultOrException``'s failure, if it has one (field 3)."""
    if b"\x1a" not in result:  # a quick no: an exception field starts with this byte
        return None
    found = wire.message(result)
    exception = found.get(3)
    if not exception or not isinstance(exception[-1], bytes):
        return None
    return Failure(region, wire.first_int(found, 1), *_exception(exception[-1]))


@dataclass
class _ServerBatch:
    """The rows of one region server's ``Multi``, by region."""

    regions: list[Region] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)  # puts' rows or appends' cells


class Unreached(StorageUnavailableError):
    """The native RPC could not reach HBase (module docstring): ``rows`` (puts' rows or
    appends' cells) were not written by it, and another RPC may write them."""

    def __init__(self, message: str, details: str, rows: list[Any]) -> None:
        super().__init__(message, details)
        self.rows = rows


class _Retry(Exception):
    """Rows to send again after re-locating their regions, and why they failed;
    ``unreached``: because their server could not be reached."""

    def __init__(self, rows: list[Any], reason: str, unreached: bool = False) -> None:
        super().__init__(reason)
        self.rows = rows
        self.reason = reason
        self.unreached = unreached


class MultiWriter:
    """Writes rows of puts with ``Multi`` calls (module docstring). ``call`` and ``regions``
    are a :class:`~app.storage.hbase_native.client.NativeClient`'s; ``zk_quorum`` names the
    cluster in errors."""

    def __init__(self, call: Call, regions: Regions, zk_quorum: str) -> None:
        self._call = call
        self._regions = regions
        self.zk_quorum = zk_quorum
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0

    def put(self, table: bytes, rows: Rows) -> None:
        """Store the rows' cells; returns once every action succeeded, raises otherwise."""
        self._write(table, "write to", list(rows), put_actions, idempotent=True)

    def append(self, table: bytes, cells: Cells) -> None:
        """Append each ``(row, column, value)`` (one append per row and column in a call).
        Sent again only when the server said it did not apply it (a moved region); a broken
        connection or a timeout leaves it unknown: a 503, never a second append."""
        self._write(table, "append to", list(cells), append_actions, idempotent=False)

    def _write(self, table: bytes, verb: str, items: list[Any], encode: Encode,
               idempotent: bool) -> None:
        op = f"{verb} {table.decode(errors='replace')} (native RPC, ZooKeeper quorum " \
             f"{self.zk_quorum})"
        pending, failed = items, _Retry([], "")
        for refresh in (False, True):
            try:
                failed = self._attempt(table, pending, refresh, encode, idempotent)
            except _Unsent as exc:  # hbase:meta or ZooKeeper: nothing sent in this pass
                raise Unreached(f"HBase is unreachable: {op} failed", str(exc.__cause__),
                                pending) from exc.__cause__
            except (RpcError, ZooKeeperError, OSError, wire.WireError) as exc:
                raise _storage_error(op, exc) from exc
            if not failed.rows:
                return
            pending = failed.rows
        message = f"{len(pending)} rows were not written ({op})"
        if failed.unreached:
            raise Unreached(f"HBase is unreachable: {message}", failed.reason, pending)
        raise StorageUnavailableError(f"HBase is unavailable: {message}", failed.reason)

    def _attempt(self, table: bytes, rows: list[Any], refresh: bool, encode: Encode,
                 idempotent: bool) -> _Retry:
        """One pass: a ``Multi`` per server; the rows to send again (none: all written)."""
        try:
            batches = self._by_server(table, rows, refresh)
        except (RpcError, ZooKeeperError) as exc:
            if unreachable(exc):
                raise _Unsent() from exc
            raise
        if len(batches) == 1:
            ((server, batch),) = batches.items()
            retries = [self._send(server, batch, encode, idempotent)]
        else:
            pool = self._executor()
            futures = [pool.submit(self._send, server, batch, encode, idempotent)
                       for server, batch in batches.items()]
            retries = [future.result() for future in futures]
        again = [row for retry in retries for row in retry.rows]
        reasons = [retry.reason for retry in retries if retry.reason]
        unreached = all(retry.unreached for retry in retries if retry.rows)
        return _Retry(again, "; ".join(reasons), unreached)

    def _by_server(self, table: bytes, rows: list[Any], refresh: bool
                   ) -> dict[str, _ServerBatch]:
        """The rows by region server, then region: the rows sorted by key (the batcher's
        are), each region's a slice of them (a bisection per region, none per row)."""
        regions = self._regions(table, refresh)
        keys = [row[0] for row in rows]
        if keys != sorted(keys):
            rows = sorted(rows, key=lambda row: row[0])
            keys = [row[0] for row in rows]
        batches: dict[str, _ServerBatch] = {}
        at = 0
        first = bisect.bisect_right([region.start for region in regions], keys[0]) - 1 \
            if keys else 0
        for region in regions[max(first, 0):]:
            if at == len(keys):
                break
            if keys[at] < region.start:
                break  # a row before this region: no region holds it
            end = bisect.bisect_left(keys, region.end, at) if region.end else len(keys)
            if end > at:
                batch = batches.setdefault(region.server, _ServerBatch())
                batch.regions.append(region)
                batch.rows.append(rows[at:end])
                at = end
        if at < len(keys):
            raise StorageError(f"HBase has no region of {table.decode(errors='replace')} "
                               "for a row (table missing?)", repr(keys[at]))
        return batches

    def _send(self, server: str, batch: _ServerBatch, encode: Encode,
              idempotent: bool) -> _Retry:
        """One server's ``Multi``; its rows to send again (moved regions; a broken connection
        if ``idempotent``). A timeout, or an exception that is not about where a region is,
        raises."""
        everything = [row for rows in batch.rows for row in rows]
        if not server:
            return _Retry(everything, "a region is not assigned to a server")
        region_actions: list[bytes] = []
        block: list[bytes] = []
        for region, rows in zip(batch.regions, batch.rows, strict=True):
            actions, cells = encode(rows)
            region_actions.append(region_action(region.name, actions))
            block += cells
        try:
            response, _ = self._call(server, "Multi", multi_request(region_actions),
                                     b"".join(block))
        except RpcError as exc:
            if (exc.timed_out or (exc.exception_class and exc.short_class not in RELOCATE)
                    or (not idempotent and not exc.exception_class and exc.sent)):
                raise  # an append that may have been applied is never sent again
            return _Retry(everything, str(exc), unreachable(exc))
        failures = multi_failures(response, [len(rows) for rows in batch.rows])
        again: list[Any] = []
        for failure in failures:
            if failure.exception_class and failure.short_class not in RELOCATE:
                raise RpcError(f"Multi on {server}: {failure.message}", failure.exception_class)
            if not failure.exception_class and not idempotent:  # unanswered: maybe applied
                raise RpcError(f"Multi on {server}: {failure.message}")
            rows = batch.rows[failure.region]
            again += rows if failure.index is None else [rows[failure.index]]
        reason = f"{server}: {failures[0].message}" if failures else ""
        return _Retry(again, reason)

    def _executor(self) -> ThreadPoolExecutor:
        """Threads for the calls to other servers, per process (threads do not survive a
        fork)."""
        with self._lock:
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool = ThreadPoolExecutor(8, thread_name_prefix="pytsd-hbase-multi")
                self._pool_pid = os.getpid()
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pool_pid == os.getpid():
            pool.shutdown(wait=True)


class _Unsent(Exception):
    """A pass that stopped before sending anything (its ``__cause__`` says why)."""


def _storage_error(op: str, exc: Exception) -> StorageError:
    if isinstance(exc, RpcError) and exc.exception_class:
        if exc.short_class in RELOCATE or exc.timed_out:
            return StorageUnavailableError(f"HBase is unavailable: {op} failed", str(exc))
        return StorageError(f"HBase failed to {op}", str(exc))
    if isinstance(exc, wire.WireError):
        return StorageError(f"HBase failed to {op}: unreadable reply", str(exc))
    return StorageUnavailableError(f"HBase is unavailable: {op} failed", str(exc))
