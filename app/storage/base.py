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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Protocol

Row = dict[bytes, bytes]
"""The cells of one row, keyed by ``b"family:qualifier"``."""


class Table(Protocol):
    """One HBase table."""

    name: str

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

    def scan_stamps(self, row_start: bytes, row_stop: bytes | None,
                    family: str) -> Iterator[tuple[bytes, int, int]]:
        """``(row, cells, newest write time in ms)`` of each row of ``family`` in the range,
        without the values (docs/cache.md: a row's stamp)."""
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


def scan_ranges(table: Table, ranges: Sequence[tuple[bytes | None, bytes | None]],
                columns: Sequence[bytes] | None = None) -> Iterator[tuple[bytes, Row]]:
    """The rows of each ``[start, stop)`` range in turn (e.g. one per salt bucket).

    A backend whose table has ``scan_many(ranges, columns)`` (HBase) fetches the ranges
    concurrently; otherwise they are scanned one after the other.
    """
    scan_many = getattr(table, "scan_many", None)
    if scan_many is not None:
        rows: Iterator[tuple[bytes, Row]] = scan_many(ranges, columns)
        return rows
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
