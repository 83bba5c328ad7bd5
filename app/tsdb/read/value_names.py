"""The tag value names of one TSDB's UID table (UID -> name), kept per process and read
incrementally, for ``value_uids`` to resolve value filters with.

Tag value UIDs come from the MAXID counter (``UniqueId.java``'s ``maxid`` row, pytsd's
``UniqueId._take_id``), so a refresh reads MAXID, then the reverse rows from just above the
highest UID read before up to it. Assignment is increment, then the reverse row, then the
forward row, and a series' rows only after that: a UID at or below MAXID whose reverse row is
not there yet is a *gap*, asked for again at every refresh; no row of its series can be
older than its reverse row, so a read that began before the reverse row was written misses
only rows it may miss anyway. A gap still empty ``GAP_WAIT_S`` after it was first seen is a
burned UID (a lost race, a failed write: the writer's own timeout gave up on it long before,
so no forward mapping will ever name it) and is no longer asked for.

Time: a query reads at most ``READ_PER_QUERY`` reverse rows, so a large table's first read
spreads over queries, which leave the value filters to the reader until it is complete.

Renames change a name in place: one in this process (``UniqueId.renamed``) drops the names,
read whole again from the next query; one in another process (pytsd or a Java TSD) is seen
once the names are read whole again, ``REREAD_AFTER_S`` after the last whole read (the old
names, kept up to date, serve meanwhile). Until then a query filters on the old name, as the
UID caches of every TSD in the fleet do.

Memory: a name costs its ``str`` (49 bytes + 1 a character when ASCII), a list slot (8) and
its UID (``tagv_width`` bytes): about 70 bytes for a 12-character name, so ``MAX_NAMES``
(1,000,000) holds ~70 MB; past it ``names`` answers None and the value filters are left to
the reader, as they were.
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass, field

from app.storage.base import Table
from app.tsdb import TSDB

# Past this many tag values (or this many gaps) the names are not kept (the memory bound).
MAX_NAMES = 1_000_000
MAX_GAPS = 100_000
# Reverse rows a query reads at most (a whole read of a large table spreads over queries,
# which leave the value filters to the reader meanwhile).
READ_PER_QUERY = 100_000
# A gap (UID at or below MAXID without a reverse row) is a burned UID after this long.
GAP_WAIT_S = 600.0
# The names are read whole again after this long, to see other processes' renames.
REREAD_AFTER_S = 900.0
# Filters whose matches are kept per set of names (their text): cleared when full.
MAX_MEMOS = 256
TAGV_NAME_COLUMN = b"name:tagv"


@dataclass
class Memo:
    """The UIDs of the names ``names[:checked]`` a filter matches (None: more than a
    row-key regexp takes, then it stays None: names are only added)."""

    checked: int = 0
    uids: set[bytes] | None = field(default_factory=set)


@dataclass
class Names:
    """One TSDB's tag values: ``names[i]`` is the name of ``uids[i*w:(i+1)*w]`` (None: not
    UTF-8, so kept whatever the filter). Append-only until read whole again."""

    width: int
    read_at: float
    renamed: int
    high: int = 0  # every UID at or below it was read, or is in ``gaps``
    uids: bytearray = field(default_factory=bytearray)
    names: list[str | None] = field(default_factory=list)
    gaps: dict[int, float] = field(default_factory=dict)  # UID -> when first seen empty
    memos: dict[tuple[tuple[str, str], ...], Memo] = field(default_factory=dict)
    # When read whole again: the ``high`` and ``gaps`` read before. A UID at or below that
    # high found empty now and not a gap then was burned long ago (or deleted): asking for it
    # again at every refresh would cost a look-up per burned UID for GAP_WAIT_S.
    before: tuple[int, dict[int, float]] = (0, {})
    complete: bool = False  # every UID up to MAXID when last refreshed read (or a gap)

    def add(self, uid: bytes, raw: bytes) -> None:
        try:
            name: str | None = raw.decode("utf-8")
        except UnicodeDecodeError:
            name = None
        self.uids += uid
        self.names.append(name)

    def uid(self, i: int) -> bytes:
        return bytes(self.uids[i * self.width:(i + 1) * self.width])


class TooMany(Exception):
    """More tag values (or gaps) than kept."""


@dataclass
class Kept:
    """One TSDB's names: ``current`` is served once complete; ``building`` is being read
    whole (a rename elsewhere may have changed any name) and replaces it when complete."""

    current: Names | None = None
    building: Names | None = None


_KEPT: weakref.WeakKeyDictionary[TSDB, Kept | None] = weakref.WeakKeyDictionary()
LOCK = threading.Lock()  # held while the names are read or matched (value_uids)


def names(tsdb: TSDB, now: float | None = None) -> Names | None:
    """``tsdb``'s tag values, brought up to date (call with ``LOCK`` held); None past the
    bounds (remembered for the process: tag values only grow) or while they are not all
    read yet (``READ_PER_QUERY`` a query)."""
    now = time.monotonic() if now is None else now
    if tsdb in _KEPT and _KEPT[tsdb] is None:
        return None
    kept = _KEPT.get(tsdb) or Kept()
    renamed = tsdb.tagv.renamed
    if kept.current is not None and kept.current.renamed != renamed:
        kept.current = None  # renamed here: no name kept may be served any more
    if kept.building is not None and kept.building.renamed != renamed:
        kept.building = None
    current = kept.current
    if kept.building is None and (current is None or now - current.read_at > REREAD_AFTER_S):
        kept.building = Names(tsdb.layout.tagv_width, now, renamed,
                              before=(current.high, current.gaps) if current else (0, {}))
    try:
        for read in (current, kept.building):
            if read is not None:
                _refresh(tsdb, read, now)
    except TooMany:
        _KEPT[tsdb] = None
        return None
    if kept.building is not None and kept.building.complete:
        kept.current, kept.building = kept.building, None
    _KEPT[tsdb] = kept
    return kept.current if kept.current is not None and kept.current.complete else None


def _refresh(tsdb: TSDB, kept: Names, now: float) -> None:
    # MAXID first: a UID above it is assigned after this read began (see the docstring).
    max_id = tsdb.tagv.max_id()
    table = tsdb.uid_table()
    width = kept.width
    _fill_gaps(table, kept, now)
    kept.complete = max_id <= kept.high
    if kept.complete:
        return
    if max_id - kept.high > MAX_NAMES + MAX_GAPS or max_id >= 1 << (8 * width):
        raise TooMany
    found: set[int] = set()
    high, read = max_id, 0
    for uid, cells in table.scan(row_start=(kept.high + 1).to_bytes(width, "big"),
                                 row_stop=max_id.to_bytes(width, "big") + b"\x00",
                                 columns=[TAGV_NAME_COLUMN], batch_size=4096):
        raw = cells.get(TAGV_NAME_COLUMN)
        if raw is None or len(uid) != width:
            continue  # a forward row whose name sorts among the UIDs
        kept.add(uid, raw)
        found.add(int.from_bytes(uid, "big"))
        read += 1
        if len(kept.names) > MAX_NAMES:
            raise TooMany
        if read >= READ_PER_QUERY:
            high = int.from_bytes(uid, "big")  # the rest by the next query
            break
    _add_gaps(kept, range(kept.high + 1, high + 1), found, now)
    kept.high = high
    kept.complete = high == max_id
    if kept.complete:
        kept.before = (0, {})


def _add_gaps(kept: Names, scanned: range, found: set[int], now: float) -> None:
    high_before, gaps_before = kept.before
    for gap in scanned:
        if gap not in found and (gap > high_before or gap in gaps_before):
            kept.gaps[gap] = gaps_before.get(gap, now)
    if len(kept.gaps) > MAX_GAPS:
        raise TooMany


def _fill_gaps(table: Table, kept: Names, now: float) -> None:
    """Ask again for the gaps' reverse rows; forget the gaps older than ``GAP_WAIT_S``."""
    if not kept.gaps:
        return
    keys = [gap.to_bytes(kept.width, "big") for gap in sorted(kept.gaps)]
    for uid, cells in table.rows(keys, [TAGV_NAME_COLUMN]):
        raw = cells.get(TAGV_NAME_COLUMN)
        if raw is not None:
            kept.add(uid, raw)
            del kept.gaps[int.from_bytes(uid, "big")]
    for gap in [g for g, seen in kept.gaps.items() if now - seen > GAP_WAIT_S]:
        del kept.gaps[gap]
