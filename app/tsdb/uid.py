"""Unique IDs: OpenTSDB's name <-> UID mappings in the ``tsdb-uid`` table.

Layout (``UniqueId.java``)::

    row = name (UTF-8)   family id   qualifier kind  -> uid (width bytes)       forward
    row = uid            family name qualifier kind  -> name (UTF-8)            reverse
    row = 0x00           family id   qualifier kind  -> max uid (8-byte long)   MAXID counter

``kind`` is ``metrics``, ``tagk`` or ``tagv``. Assignment follows ``UniqueIdAllocator``:
increment MAXID, write the reverse mapping, then check-and-put the forward mapping. The
increment makes every UID unique; the check-and-put makes every name map to one UID. A
writer that loses the race reads the winner's UID; its own UID stays an unused orphan,
exactly as in OpenTSDB.
"""

from __future__ import annotations

import threading
import unicodedata
from collections.abc import Callable, Mapping

from app.errors import BadRequestError, NoSuchUniqueId, NoSuchUniqueName, UidExhaustedError
from app.query.limits import NO_DEADLINE, Deadline
from app.storage.base import Table, prefix_stop
from app.tsdb.points import echo

KINDS = ("metrics", "tagk", "tagv")
MAXID_ROW = b"\x00"
ID_FAMILY = b"id"
NAME_FAMILY = b"name"
# HBase's longest row key (Short.MAX_VALUE): no forward mapping can have a longer name.
MAX_ROW_KEY_BYTES = 32767

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
        # Called before a new UID is assigned (the UID filter plugins); raises to refuse.
        self.assign_filter: AssignFilter | None = None
        # For /api/stats (tsd.uid.cache-hit/-miss): lookups answered by the caches or not.
        self.cache_hits = 0
        self.cache_misses = 0

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
        with self._lock:
            return self._assign(name)

    def _assign(self, name: str) -> bytes:
        table = self._table()
        new_id = table.counter_inc(MAXID_ROW, self._column(ID_FAMILY))
        if new_id >= 1 << (8 * self.width):
            raise UidExhaustedError(
                f"All Unique IDs for {self.kind} on {self.width} bytes are already assigned!")
        uid = new_id.to_bytes(self.width, "big")
        table.put(uid, {self._column(NAME_FAMILY): name.encode("utf-8")})
        if table.check_and_put(name.encode("utf-8"), self._column(ID_FAMILY), None, uid):
            self._remember(name, uid)
            return uid
        # Another writer assigned this name first: use its UID (ours stays an orphan).
        return self.get_id(name)

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
