"""The storage interface: a small, happybase-shaped view of HBase tables.

Both backends implement it: ``sqlite.py`` (embedded) stores the very same rows, families,
qualifiers and values as HBase does, and ``hbase.py`` is a thin adapter over happybase. Everything
above this layer (UIDs, put, query, annotations) sees only these two protocols.

Conventions, as in happybase:

* Row keys, qualifiers and values are ``bytes``; a column is ``b"family:qualifier"``.
* Scans return rows in ascending byte order of row key; ``row_start`` is inclusive and
  ``row_stop`` exclusive.
* ``columns`` narrows what is returned: ``b"t"`` (a whole family) or ``b"t:\\x00\\x00"``
  (one column).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast, runtime_checkable

import numpy as np
import numpy.typing as npt

Row = dict[bytes, bytes]
"""The cells of one row, keyed by ``b"family:qualifier"``."""


class Table(Protocol):
    """One HBase table."""

    name: str
    #: The optional abilities (below) this table has: names of ``ABILITIES``. The read
    #: path asks :func:`able`, never ``hasattr``; the store contract tests check that each
    #: declared ability is there and behaves, and that none is left undeclared.
    abilities: frozenset[str]

    def row(self, row: bytes, columns: Sequence[bytes] | None = None) -> Row:
        """Return the cells of one row (empty when the row does not exist)."""
        ...

    def row_write_times(self, row: bytes) -> dict[bytes, int]:
        """Return each cell's write time in ms (HBase's cell timestamp), for last-write-wins."""
        ...

    def rows(
        self, rows: Sequence[bytes], columns: Sequence[bytes] | None = None
    ) -> list[tuple[bytes, Row]]:
        """Return the rows that exist among ``rows``, in the order asked, without empty ones."""
        ...

    def scan(
        self,
        row_start: bytes | None = None,
        row_stop: bytes | None = None,
        row_prefix: bytes | None = None,
        columns: Sequence[bytes] | None = None,
        limit: int | None = None,
        batch_size: int = 1000,
        keys_only: bool = False,
    ) -> Iterator[tuple[bytes, Row]]:
        """Yield ``(row_key, cells)`` for rows in ``[row_start, row_stop)`` in key order.

        :param row_prefix: shorthand for the range of keys starting with it; excludes
            ``row_start``/``row_stop``.
        :param keys_only: values come back empty (HBase's KeyOnlyFilter): for cheap key scans.
        :param batch_size: rows fetched per round trip; a tuning knob, not a semantic one.
        """
        ...

    def put(self, row: bytes, data: Mapping[bytes, bytes]) -> None:
        """Write cells to one row (overwriting existing cells of the same column)."""
        ...

    def put_many(self, puts: Iterable[tuple[bytes, Mapping[bytes, bytes]]]) -> None:
        """Write many rows in one batch: all are durable when this returns."""
        ...

    def append(self, row: bytes, column: bytes, value: bytes) -> None:
        """Atomically append ``value`` to the cell (HBase's Append): OpenTSDB's append mode."""
        ...

    def delete(self, row: bytes, columns: Sequence[bytes] | None = None,
               up_to_ms: int | None = None) -> None:
        """Delete whole row, or only the given columns of it; with ``up_to_ms``, only what
        was written at or before that write time (a later write survives)."""
        ...

    def counter_inc(self, row: bytes, column: bytes, value: int = 1) -> int:
        """Atomically add ``value`` to the 8-byte big-endian counter cell; return the new value."""
        ...

    def check_and_put(
        self, row: bytes, column: bytes, expected: bytes | None, value: bytes
    ) -> bool:
        """Atomically write ``value`` to ``column`` iff its current value is ``expected``.

        ``expected=None`` means the cell must not exist (HBase's checkAndPut with a null value).
        Returns whether the write happened.
        """
        ...


class Store(Protocol):
    """A set of tables on one backend."""

    #: True when the backend creates OpenTSDB's tables on first use (the embedded store);
    #: False where they must exist beforehand, as OpenTSDB requires on HBase.
    sets_itself_up: bool
    #: True when the backend offers :class:`PromptWrites` (the embedded store): writes that
    #: neither wait for another writer nor for the disk, acknowledged once durable.
    writes_promptly: bool

    def table(self, name: str) -> Table:
        """Return a handle on an existing table."""
        ...

    def create_table(self, name: str, families: Mapping[str, Mapping[str, object]]) -> bool:
        """Create a table with the given column families; False if it already existed."""
        ...

    def table_names(self) -> list[str]:
        """Names of the tables that exist."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


class WriteBusy(Exception):
    """A prompt write (:class:`PromptWrites`) found another writer under way: the
    transaction that raised it wrote nothing. Not a ``StorageError``: the store works; the
    caller writes again without hurry."""


class FdReaders(Protocol):
    """What an event loop offers to watch a file descriptor (asyncio's loops do)."""

    def add_reader(self, fd: int, callback: Callable[[], object]) -> object: ...

    def remove_reader(self, fd: int) -> object: ...

    def is_closed(self) -> bool: ...


class PromptWrites(Protocol):
    """A store whose writes can be asked to be prompt (``Store.writes_promptly``)."""

    def prompt(self) -> AbstractContextManager[None]:
        """Within it, this thread's writes do not wait: another writer under way raises
        :class:`WriteBusy`, and a commit returns before the disk has synced it."""
        ...

    def durable(self) -> Future[None]:
        """Done when every prompt write of this process so far is on disk."""
        ...

    def read_syncs_on(self, readers: FdReaders) -> None:
        """The server's event loop learns of the disk's syncs (no thread of the process
        wakes for them): :meth:`durable` is called, and its futures are done, in its thread."""
        ...


@dataclass(frozen=True)
class StoreSpace:
    """One embedded store's disk use."""

    file_bytes: int  # the database file and its WAL
    wal_bytes: int
    page_size_bytes: int
    pages: int
    free_pages: int
    points: int  # data points of the data table
    auto_vacuum: bool  # whether the file gives freed pages back by itself

    @property
    def used_bytes(self) -> int:
        return (self.pages - self.free_pages) * self.page_size_bytes

    @property
    def file_bytes_per_point(self) -> float:
        return self.file_bytes / self.points if self.points else 0.0

    @property
    def used_bytes_per_point(self) -> float:
        return self.used_bytes / self.points if self.points else 0.0


# --- optional abilities ------------------------------------------------------------------
# A backend may offer faster ways to read (or to write: ``put_block``); the caller uses each
# when the table declares it (``Table.abilities``) and the plain ``scan``/``rows``/``put_many``
# otherwise, with the same answers.

Range = tuple[bytes | None, bytes | None]
A = TypeVar("A")


@runtime_checkable
class ScanStamps(Protocol):
    def scan_stamps(self, row_start: bytes, row_stop: bytes | None, family: str,
                    limit: int | None = None) -> Iterator[tuple[bytes, int, int]]:
        """``(row, cells, newest write time in ms)`` of each row of ``family`` in the range
        (the first ``limit`` rows), without reading the values: what the hour cache
        validates a kept row with."""
        ...


@runtime_checkable
class ScanStamped(Protocol):
    def scan_stamped(self, row_start: bytes, row_stop: bytes | None,
                     family: str) -> Iterator[tuple[bytes, Row, int, int, int]]:
        """``(row, cells, cell count, newest write time in ms, stored bytes)`` per row: the
        values and the stamp of the very cells returned, in one scan."""
        ...


@runtime_checkable
class ScanStampsSized(Protocol):
    def scan_stamps_sized(self, row_start: bytes, row_stop: bytes | None,
                          family: str) -> Iterator[tuple[bytes, int, int, int]]:
        """:meth:`ScanStamps.scan_stamps` and each row's stored bytes, values left unread."""
        ...


@runtime_checkable
class StampCost(Protocol):
    def stamp_dearer_than_values(self, cells: int) -> bool:
        """Whether a row of ``cells`` cells costs the storage servers more to stamp
        (:meth:`ScanStamps.scan_stamps`) than to read whole, values and all: then a read
        that might find it kept reads it whole instead."""
        ...


@runtime_checkable
class ScanMany(Protocol):
    def scan_many(self, ranges: Sequence[Range],
                  columns: Sequence[bytes] | None = None) -> Iterator[tuple[bytes, Row]]:
        """The rows of several ranges, in range order, fetched concurrently."""
        ...


@runtime_checkable
class RangeStamp(Protocol):
    def range_stamp(self, ranges: Sequence[tuple[bytes, bytes]],
                    family: str) -> tuple[int, int]:
        """``(cells, newest write time in ms)`` over every cell of ``family`` in the ranges."""
        ...


@runtime_checkable
class ScanPacked(Protocol):
    def scan_packed(self, row_start: bytes, row_stop: bytes | None, family: str,
                    qualifier_prefixes: Sequence[bytes]
                    ) -> Iterator[tuple[bytes, int, int, bytes, bytes]]:
        """``(row, cells, newest write time, qualifiers joined, values joined)`` per row,
        over the cells whose qualifier starts with one of ``qualifier_prefixes``."""
        ...


@runtime_checkable
class ScanStampsPacked(Protocol):
    def scan_stamps_packed(self, row_start: bytes, row_stop: bytes | None, family: str,
                           qualifier_prefixes: Sequence[bytes]
                           ) -> Iterator[tuple[bytes, int, int]]:
        """:meth:`ScanStamps.scan_stamps` over the cells :meth:`ScanPacked.scan_packed` reads."""
        ...


@runtime_checkable
class SpaceUsed(Protocol):
    def space_used(self) -> StoreSpace:
        """The store's disk use and this table's data points (bytes per point)."""
        ...


@runtime_checkable
class StoreStats(Protocol):
    def store_stats(self) -> list[tuple[str, float | int, dict[str, str]]]:
        """The store's own figures for ``/api/stats`` as ``(metric, value, tags)``, of this
        process (HBase: which RPC its data scans take)."""
        ...


@runtime_checkable
class AppendMany(Protocol):
    def append_many(self, cells: Sequence[tuple[bytes, bytes, bytes]]) -> None:
        """:meth:`Table.append` of each ``(row, column, value)``, in order within a row and
        column, as few calls as the backend can (HBase: one per row, concurrently)."""
        ...


@runtime_checkable
class RowRegex(Protocol):
    def with_row_regex(self, regex: str) -> Table:
        """This table, its scans (every scan method, ``scan_many`` too; not ``row``/``rows``)
        keeping only the rows whose key matches ``regex`` on the storage servers.

        ``regex`` is HBase's ``RegexStringComparator``'s: Java syntax, found (not matched)
        in the key decoded as UTF-8, as ``app.tsdb.read.key_regex`` builds it. A row that
        does not match may still be returned; one that matches never is dropped, so the
        caller keeps testing the rows it gets."""
        ...


@dataclass(frozen=True)
class CellBlock:
    """Data cells (family ``t``) in columnar form: what the writer encodes a batch into.

    Cell ``i`` is in row ``rows[row_of[i]]``; its qualifier is the next ``qualifier_lengths[i]``
    bytes of ``qualifiers`` and its value the next ``value_lengths[i]`` bytes of ``values``
    (both concatenated in cell order). Of two cells with the same row and qualifier the later
    one is the one stored, as in a ``put_many`` of the cells in this order."""

    rows: Sequence[bytes]
    row_of: npt.NDArray[np.int64]
    qualifiers: bytes
    qualifier_lengths: npt.NDArray[np.int64]
    values: bytes
    value_lengths: npt.NDArray[np.int64]

    @classmethod
    def of_cells(cls, rows: Sequence[bytes], row_of: Sequence[int],
                 qualifiers: Sequence[bytes], values: Sequence[bytes]) -> CellBlock:
        """A block from each cell's row index, qualifier and value (a batch too small for
        numpy's fixed cost per call)."""
        count = len(row_of)
        return cls(rows, np.array(row_of, np.int64), b"".join(qualifiers),
                   np.fromiter(map(len, qualifiers), np.int64, count), b"".join(values),
                   np.fromiter(map(len, values), np.int64, count))

    def __len__(self) -> int:
        return int(self.row_of.size)

    def puts(self) -> list[tuple[bytes, Row]]:
        """The cells as ``put_many``'s argument, rows in key order (any table takes these)."""
        q_ends = np.cumsum(self.qualifier_lengths).tolist()
        v_ends = np.cumsum(self.value_lengths).tolist()
        rows: dict[bytes, Row] = {}
        q_at = v_at = 0
        for row_index, q_end, v_end in zip(self.row_of.tolist(), q_ends, v_ends):
            cells = rows.setdefault(self.rows[row_index], {})
            cells[b"t:" + self.qualifiers[q_at:q_end]] = self.values[v_at:v_end]
            q_at, v_at = q_end, v_end
        return sorted(rows.items())


@runtime_checkable
class PutBlock(Protocol):
    def put_block(self, block: CellBlock) -> None:
        """Store the block's cells as ``put_many(block.puts())`` would, without a Python
        object per cell (the embedded store stages the block as it is: sqlite_block.py)."""
        ...


@dataclass(frozen=True)
class ColumnsRead:
    """What :meth:`ScanColumns.scan_columns` found: the rows whose columns are not current
    (changed since they were put, or never put), each with the generation to put them at,
    and per part asked, the current rows' blobs of it joined (in no promised order: a blob
    is the caller's, so it names its row itself)."""

    dirty: list[tuple[bytes, int]]
    parts: dict[int, bytes]
    # Per part, the kept blocks of the block ranges asked (one blob each, in the order
    # asked), and the block ranges with no kept block (their rows are in ``parts``).
    blocks: dict[int, list[bytes]] = field(default_factory=dict)
    unbuilt: list[tuple[bytes, bytes]] = field(default_factory=list)


@dataclass(frozen=True)
class ColumnsPut:
    """One row's columns: ``parts`` as ``(part, blob)``, made from its cells read at
    ``generation`` (:attr:`ColumnsRead.dirty`)."""

    row: bytes
    generation: int
    parts: Sequence[tuple[int, bytes]]


@runtime_checkable
class ScanColumns(Protocol):
    def scan_columns(self, ranges: Sequence[tuple[bytes, bytes | None]],
                     parts: Sequence[int],
                     blocks: Sequence[tuple[bytes, bytes]] = ()) -> ColumnsRead:
        """The columnar form the caller put (:meth:`put_columns`) of the rows of ``ranges``,
        for the rows no cell of which changed since; the others listed. The store keeps it
        beside the cells and never returns a part of a row changed after it was put.
        ``blocks``: key ranges read as one kept block each (:meth:`put_column_blocks`) where
        one is kept for every part, else row by row as ``ranges`` are."""
        ...

    def put_column_blocks(self, blocks: Sequence[tuple[bytes, bytes]], parts: Sequence[int],
                          encode: Callable[[bytes], bytes | None]) -> int:
        """Keep each key range's rows of each part as one block: ``encode`` of their joined
        blobs (None: keep no block of that range), only where every row's columns are
        current (and dropped the moment one is not); the blocks kept."""
        ...

    def put_columns(self, rows: Sequence[ColumnsPut]) -> int:
        """Keep each row's parts (replacing its earlier ones) unless a cell of it changed
        since the generation given; the rows kept."""
        ...


@dataclass(frozen=True)
class HourPut:
    """One hour's columnar blob, made from its cells read at ``stamp`` (their count and
    newest write time): ``prefix`` is the hour's row-key prefix (salt, metric, base time)."""

    prefix: bytes
    stamp: tuple[int, int]
    data: bytes


@runtime_checkable
class HourColumn(Protocol):
    def hour_prefixes(self, ranges: Sequence[tuple[bytes, bytes]]) -> list[bytes]:
        """The hour prefixes in ``ranges`` with a kept blob (:meth:`hour_column`), in order."""
        ...

    def hour_column(self, prefix: bytes) -> bytes | None:
        """The blob the caller put for the hour of ``prefix`` (:meth:`put_hour_columns`),
        None when none is kept or a cell of the hour changed since. The store keeps it beside
        the cells and drops it when a cell of its hour changes."""
        ...

    def put_hour_columns(self, prefix_bytes: int, hours: Sequence[HourPut]) -> int:
        """Keep each hour's blob (``prefix_bytes``: the length of every hour prefix of this
        table) unless its cells changed since they were read at its stamp; the hours kept."""
        ...

    def strip_hour_values(self, after: bytes, most: int) -> tuple[bytes | None, int]:
        """One copy of up to ``most`` kept hours after the prefix ``after`` whose cells still
        hold their values (they give them to the blob, which gives back their very bytes):
        the last hour done (None when none is left) and the cells stripped. The background
        work's (``app.tsdb.hour_strip``), never a read's."""
        ...

    def hours_to_strip(self) -> bool:
        """Whether a kept hour's cells still hold their values (a read, no write)."""
        ...


@dataclass(frozen=True)
class Ability(Generic[A]):
    """One optional ability: the name a table declares, the protocol that types it."""

    name: str
    protocol: object


SCAN_STAMPS: Ability[ScanStamps] = Ability("scan_stamps", ScanStamps)
SCAN_STAMPED: Ability[ScanStamped] = Ability("scan_stamped", ScanStamped)
SCAN_STAMPS_SIZED: Ability[ScanStampsSized] = Ability("scan_stamps_sized", ScanStampsSized)
SCAN_MANY: Ability[ScanMany] = Ability("scan_many", ScanMany)
STAMP_COST: Ability[StampCost] = Ability("stamp_dearer_than_values", StampCost)
RANGE_STAMP: Ability[RangeStamp] = Ability("range_stamp", RangeStamp)
SCAN_PACKED: Ability[ScanPacked] = Ability("scan_packed", ScanPacked)
SCAN_STAMPS_PACKED: Ability[ScanStampsPacked] = Ability("scan_stamps_packed", ScanStampsPacked)
SPACE_USED: Ability[SpaceUsed] = Ability("space_used", SpaceUsed)
APPEND_MANY: Ability[AppendMany] = Ability("append_many", AppendMany)
STORE_STATS: Ability[StoreStats] = Ability("store_stats", StoreStats)
PUT_BLOCK: Ability[PutBlock] = Ability("put_block", PutBlock)
ROW_REGEX: Ability[RowRegex] = Ability("with_row_regex", RowRegex)
SCAN_COLUMNS: Ability[ScanColumns] = Ability("scan_columns", ScanColumns)
HOUR_COLUMN: Ability[HourColumn] = Ability("hour_column", HourColumn)

ABILITIES: tuple[Ability[Any], ...] = (
    SCAN_STAMPS, SCAN_STAMPED, SCAN_STAMPS_SIZED, SCAN_MANY, RANGE_STAMP, SCAN_PACKED,
    SCAN_STAMPS_PACKED, SPACE_USED, APPEND_MANY, PUT_BLOCK, ROW_REGEX, SCAN_COLUMNS,
    HOUR_COLUMN, STORE_STATS, STAMP_COST)
"""Every optional ability (its name is the method it adds)."""


def able(table: Table, ability: Ability[A]) -> A | None:
    """``table`` typed as the ability's protocol when it declares it, else None."""
    return cast(A, table) if ability.name in table.abilities else None


def narrowed(table: Table, row_regex: str | None) -> Table:
    """``table`` with its scans narrowed to the rows whose key matches ``row_regex`` on the
    storage servers when it has that ability (``ROW_REGEX``), else ``table`` itself."""
    filtering = able(table, ROW_REGEX) if row_regex is not None else None
    return table if filtering is None or row_regex is None else \
        filtering.with_row_regex(row_regex)


def scan_ranges(table: Table, ranges: Sequence[tuple[bytes | None, bytes | None]],
                columns: Sequence[bytes] | None = None) -> Iterator[tuple[bytes, Row]]:
    """The rows of each ``[start, stop)`` range in turn (e.g. one per salt bucket).

    A backend whose table has ``scan_many`` (HBase) fetches the ranges concurrently;
    otherwise they are scanned one after the other.
    """
    many = able(table, SCAN_MANY)
    if many is not None:
        return many.scan_many(ranges, columns)
    return itertools.chain.from_iterable(
        table.scan(row_start=start, row_stop=stop, columns=columns) for start, stop in ranges)


def prefix_stop(prefix: bytes) -> bytes | None:
    """Return the smallest key greater than every key that starts with ``prefix``.

    None means "no upper bound" (the prefix is all 0xFF bytes).
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
