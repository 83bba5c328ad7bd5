"""Unique IDs: OpenTSDB's name <-> UID mappings in the ``tsdb-uid`` table.

Layout (``UniqueId.java``)::

    row = name (UTF-8)   family id   qualifier kind  -> uid (width bytes)       forward
    row = uid            family name qualifier kind  -> name (UTF-8)            reverse
    row = 0x00           family id   qualifier kind  -> max uid (8-byte long)   MAXID counter

``kind`` is ``metrics``, ``tagk`` or ``tagv``. Assignment follows 2.4's
``UniqueIdAllocator`` step by step, so pytsd and Java TSDs can assign at the same time:
increment MAXID, check-and-put the reverse mapping (the cell must be absent), then
check-and-put the forward mapping. The increment makes every UID unique; the forward
check-and-put makes every name map to one UID; the reverse is written first so that a
forward mapping never points at a UID that cannot be resolved.

Where pytsd departs (docs/differences.md): OpenTSDB leaves the loser of a race with an
orphan reverse row, which its fsck then reports. pytsd

* assigns each name once per process: threads asking for a name being assigned wait for
  that assignment (OpenTSDB's ``pending_assignments``);
* reads the forward mapping from storage again just before taking a UID, so a name another
  process assigned since this one's lookup costs no UID;
* and when it still loses the forward check-and-put, deletes the reverse row it wrote (no
  forward mapping can name that UID: only this writer ever held it). The UID stays burned:
  MAXID never goes down, as OpenTSDB requires.
"""

from __future__ import annotations

import logging
import threading
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future

from app.errors import (
    BadRequestError,
    NoSuchUniqueId,
    NoSuchUniqueName,
    StorageError,
    UidExhaustedError,
)
from app.query.limits import NO_DEADLINE, Deadline
from app.storage.base import Table, prefix_stop
from app.tsdb.points import echo

log = logging.getLogger(__name__)

KINDS = ("metrics", "tagk", "tagv")
MAXID_ROW = b"\x00"
ID_FAMILY = b"id"
NAME_FAMILY = b"name"
# HBase's longest row key (Short.MAX_VALUE): no forward mapping can have a longer name.
MAX_ROW_KEY_BYTES = 32767
# UniqueId.MAX_ATTEMPTS_ASSIGN_ID: tries before an assignment fails.
MAX_ATTEMPTS_ASSIGN_ID = 3

# What Tags.validateString calls each kind in its messages.
KIND_LABELS = {"metrics": "metric", "tagk": "tag name", "tagv": "tag value"}


def validate_name(what: str, name: str, special_chars: str = "") -> None:
    """OpenTSDB's ``Tags.validateString``: ``a-zA-Z0-9-_./``, Unicode letters, configured extras."""
    if name is None:
        raise BadRequestError(f"Invalid {what}: null")
    if name == "":
        raise BadRequestError(f"Invalid {what}: empty string")
    for char in name:
        if not (char.isascii() and (char.isalnum() or char in "-_./")
                or unicodedata.category(char).startswith("L") or char in special_chars):
            raise BadRequestError(f'Invalid {what} ("{echo(name)}"): illegal character: {char}')


def check_row_key_size(kind: str, name: str) -> None:
    """A name is the row key of its forward mapping: HBase refuses keys over 32,767 bytes
    (an error mid-assignment, after MAXID moved), so such a name is a 400 beforehand."""
    size = len(name.encode("utf-8"))
    if size > MAX_ROW_KEY_BYTES:
        raise BadRequestError(f'Invalid {kind} name ("{echo(name)}"): {size} bytes, more than '
                              f"the {MAX_ROW_KEY_BYTES} a UID table row key can hold")


def name_row_key(name: str) -> bytes | None:
    """The forward row key of ``name``, or None when no name can have it: a NUL (the MAXID
    row is ``b"\x00"``, and no valid name holds one), text UTF-8 cannot encode (a lone
    surrogate from JSON), or more bytes than a row key holds (HBase would fail the get)."""
    if "\x00" in name:
        return None
    try:
        key = name.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return key if len(key) <= MAX_ROW_KEY_BYTES else None


AssignFilter = Callable[[str, str, "str | None", "Mapping[str, str] | None"], None]


class UniqueId:
    """Name/UID mapping of one kind, with in-process caches in both directions."""

    def __init__(self, table: Callable[[], Table], kind: str, width: int,
                 max_names: int = 1_000_000, max_ids: int = 1_000_000) -> None:
        self._table = table
        self.kind = kind
        self.width = width
        self._qualifier = kind.encode()
        self._by_name: dict[str, bytes] = {}
        self._by_id: dict[bytes, str] = {}
        # Each cache is emptied when it reaches its bound: simple, and refilled from the store.
        self._max_names, self._max_ids = max_names, max_ids
        self._lock = threading.Lock()
        # The assignment in flight per name: a second thread asking waits for the first.
        self._pending: dict[str, Future[bytes]] = {}
        # Called before a new UID is assigned (the UID filter plugins); raises to refuse.
        self.assign_filter: AssignFilter | None = None
        # Called with (table, kind, uid, name) once a UID is assigned (realtime UIDMeta).
        self.on_assigned: Callable[[Table, str, bytes, str], None] | None = None
        # For /api/stats (tsd.uid.cache-hit/-miss): lookups answered by the caches or not.
        self.cache_hits = 0
        self.cache_misses = 0
        # For /api/stats: names this process assigned, and UIDs it took from MAXID that name
        # nothing (a race lost to another process, or a damaged reverse row).
        self.ids_created = 0
        self.ids_burned = 0
        # Renames done by this process: the tag value names read for value filters
        # (app.tsdb.read.value_names) are read whole again when it moves.
        self.renamed = 0

    def _column(self, family: bytes) -> bytes:
        return family + b":" + self._qualifier

    def _remember(self, name: str, uid: bytes) -> None:
        if len(self._by_name) >= self._max_names:
            self._by_name.clear()
        if len(self._by_id) >= self._max_ids:
            self._by_id.clear()
        self._by_name[name] = uid
        self._by_id[uid] = name

    def drop_caches(self) -> None:
        self._by_name.clear()
        self._by_id.clear()

    def find_id(self, name: str) -> bytes | None:
        """The UID of ``name``, or None."""
        uid = self._by_name.get(name)
        if uid is not None:
            self.cache_hits += 1
        else:
            self.cache_misses += 1
            key = name_row_key(name)
            if key is None:
                return None  # no stored name has these bytes, so no UID
            cells = self._table().row(key, [self._column(ID_FAMILY)])
            uid = cells.get(self._column(ID_FAMILY))
            if uid is None or len(uid) != self.width:
                return None  # not a forward mapping (the MAXID row is b"\x00")
            self._remember(name, uid)
        return uid

    def get_id(self, name: str) -> bytes:
        """The UID of ``name``; :class:`NoSuchUniqueName` when it has none."""
        uid = self.find_id(name)
        if uid is None:
            raise NoSuchUniqueName(self.kind, name)
        return uid

    def get_name(self, uid: bytes) -> str:
        """The name of ``uid``; :class:`NoSuchUniqueId` when it has none."""
        name = self._by_id.get(uid)
        if name is not None:
            self.cache_hits += 1
        else:
            self.cache_misses += 1
            cells = self._table().row(uid, [self._column(NAME_FAMILY)])
            raw = cells.get(self._column(NAME_FAMILY))
            if raw is None:
                raise NoSuchUniqueId(self.kind, uid)
            name = raw.decode("utf-8")
            self._remember(name, uid)
        return name

    def prefetch_names(self, uids: Iterable[bytes]) -> None:
        """Read the names of the UIDs not in the cache in one request (a fresh process's
        first query: thousands of tag values, one look-up each otherwise); a UID without
        a name is left for :meth:`get_name` to report."""
        missing = sorted({uid for uid in uids if uid not in self._by_id})
        if not missing:
            return
        column = self._column(NAME_FAMILY)
        for uid, cells in self._table().rows(missing, [column]):
            raw = cells.get(column)
            if raw is not None:
                self._remember(raw.decode("utf-8"), uid)

    @property
    def cache_size(self) -> int:
        """Entries in both caches, as OpenTSDB's ``tsd.uid.cache-size`` counts them."""
        return len(self._by_name) + len(self._by_id)

    def max_id(self) -> int:
        """The MAXID counter: the highest UID assigned so far (0 when none)."""
        raw = self._table().row(MAXID_ROW, [self._column(ID_FAMILY)]).get(self._column(ID_FAMILY))
        return int.from_bytes(raw, "big", signed=True) if raw else 0

    def get_or_create_id(self, name: str, metric: str | None = None,
                         tags: Mapping[str, str] | None = None) -> bytes:
        """The UID of ``name``, assigning a new one the OpenTSDB way when it has none.

        ``metric`` and ``tags`` are the point that needs the UID, for the UID filter.
        """
        uid = self.find_id(name)
        if uid is not None:
            return uid
        check_row_key_size(self.kind, name)
        if self.assign_filter is not None:
            self.assign_filter(self.kind, name, metric, tags)
        return self._assign_once(name)

    def _assign_once(self, name: str) -> bytes:
        """Assign ``name`` in one thread of this process; the others asking meanwhile wait
        for its answer (or its error)."""
        with self._lock:
            flight = self._pending.get(name)
            leader = flight is None
            if flight is None:
                flight = self._pending[name] = Future()
        if not leader:
            return flight.result()
        try:
            uid = self._assign(name)
        except BaseException as exc:
            flight.set_exception(exc)
            raise
        else:
            flight.set_result(uid)
            return uid
        finally:
            with self._lock:
                del self._pending[name]

    def _stored_id(self, table: Table, name: str) -> bytes | None:
        uid = table.row(name.encode("utf-8"), [self._column(ID_FAMILY)]).get(
            self._column(ID_FAMILY))
        if uid is not None:
            self._remember(name, uid)
        return uid

    def _count(self, created: int = 0, burned: int = 0) -> None:
        with self._lock:
            self.ids_created += created
            self.ids_burned += burned

    def _assign(self, name: str) -> bytes:
        table = self._table()
        forward_row = name.encode("utf-8")
        for _ in range(MAX_ATTEMPTS_ASSIGN_ID):
            # Since this process looked, another may have assigned the name: no UID for that.
            found = self._stored_id(table, name)
            if found is not None:
                return found
            uid = self._take_id(table)
            if not table.check_and_put(uid, self._column(NAME_FAMILY), None, forward_row):
                # A reverse row already holds a UID MAXID just gave out: the table is damaged
                # (uid fsck says how). OpenTSDB takes another UID; so does pytsd.
                log.error("UID %s of %s was already assigned in reverse: run `pytsd uid fsck`",
                          uid.hex().upper(), self.kind)
                self._count(burned=1)
                continue
            if table.check_and_put(forward_row, self._column(ID_FAMILY), None, uid):
                self._count(created=1)
                self._remember(name, uid)
                if self.on_assigned is not None:
                    self.on_assigned(table, self.kind, uid, name)
                return uid
            # Another writer assigned the name first: its UID is the name's. Ours named
            # nothing but the reverse row just written, which goes (no forward mapping can
            # point at it: only this writer ever held the UID).
            table.delete(uid, [self._column(NAME_FAMILY)])
            self._count(burned=1)
            log.info("lost the race to assign %s %r: UID %s burned, its reverse row removed",
                     self.kind, name, uid.hex().upper())
        found = self._stored_id(table, name)
        if found is not None:
            return found
        raise StorageError(f"Failed to assign an ID for kind='{self.kind}' name='{name}'")

    def _take_id(self, table: Table) -> bytes:
        new_id = table.counter_inc(MAXID_ROW, self._column(ID_FAMILY))
        if new_id >= 1 << (8 * self.width):
            raise UidExhaustedError(
                f"All Unique IDs for {self.kind} on {self.width} bytes are already assigned!")
        return new_id.to_bytes(self.width, "big")

    def rename(self, old_name: str, new_name: str, table_label: str) -> None:
        """``UniqueId.rename``: reverse mapping first, then the new forward mapping, then the
        old forward mapping goes (a crash midway leaves both names on the UID, never none).
        Other processes keep the old name in their caches until they drop them."""
        uid = self.get_id(old_name)
        taken = self.find_id(new_name)
        if taken is not None:
            raise BadRequestError(
                f'When trying rename("{old_name}", "{new_name}") on UniqueId({table_label}, '
                f"{self.kind}, {self.width}): new name already assigned ID="
                f"[{', '.join(str(b - 256 if b > 127 else b) for b in taken)}]")
        check_row_key_size(self.kind, new_name)
        table = self._table()
        table.put(uid, {self._column(NAME_FAMILY): new_name.encode("utf-8")})
        table.put(new_name.encode("utf-8"), {self._column(ID_FAMILY): uid})
        with self._lock:
            self._by_name.pop(old_name, None)
            self._remember(new_name, uid)
            self.renamed += 1
        table.delete(old_name.encode("utf-8"), [self._column(ID_FAMILY)])

    def suggest(self, prefix: str, limit: int, deadline: Deadline = NO_DEADLINE) -> list[str]:
        """Names starting with ``prefix``, sorted, at most ``limit`` (a forward-row prefix
        scan; ``deadline``, the request's budget, checked every 256 rows)."""
        try:
            start = prefix.encode("utf-8")
        except UnicodeEncodeError:
            return []  # a lone surrogate: no stored name starts with it
        if len(start) > MAX_ROW_KEY_BYTES:
            return []  # no stored name is that long (and HBase refuses such a scan key)
        # Forward rows are names; skip the binary reverse/MAXID rows by starting above 0x00.
        names: list[str] = []
        deadline.check()
        scanned = 0
        for row, cells in self._table().scan(row_start=start or b"\x01",
                                             row_stop=prefix_stop(start) if start else None,
                                             columns=[self._column(ID_FAMILY)]):
            scanned += 1
            if scanned % 256 == 0:
                deadline.check()
            if len(cells.get(self._column(ID_FAMILY), b"")) != self.width:
                continue
            try:
                names.append(row.decode("utf-8"))
            except UnicodeDecodeError:
                continue
            if len(names) >= limit:
                break
        return names

    def grep(self, pattern: Callable[[str], bool]) -> list[tuple[str, bytes]]:
        """Every ``(name, uid)`` of this kind whose name satisfies ``pattern``."""
        found = []
        for row, cells in self._table().scan(row_start=b"\x01",
                                             columns=[self._column(ID_FAMILY)]):
            uid = cells.get(self._column(ID_FAMILY))
            if uid is None or len(uid) != self.width:
                continue
            try:
                name = row.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if pattern(name):
                found.append((name, uid))
        return found
