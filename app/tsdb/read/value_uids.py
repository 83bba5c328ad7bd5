"""The row-key regexp of a sub-query's scan (``key_regex``), with the value filters (regexp,
wildcard, not_literal_or, ...) resolved to the UIDs of the tag values they match when the
tag values are few: then the region servers drop the other series' rows for those too.

The names come from the reverse rows of ``tsdb-uid`` (UID -> name), where the reader's own
name test (``RowReader.names``) gets them, so a value the regexp lists is exactly one whose
series that test keeps. A tag value created after this scan is not listed: every row of its
series is written after the UID was assigned, so after this read began, and a read may miss
what is written while it runs (as it would have without the regexp). The regexp is built
once for every read's plan (``plan``), never kept.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

from app.query.filters import TagFilter, merge_filters
from app.storage.base import ROW_REGEX, Table, able
from app.tsdb import TSDB
from app.tsdb.read.key_regex import row_key_regex
from app.tsdb.read.keys import UidConstraint

# Read at most this many tag values (reverse rows) to resolve value filters; past it the
# value filters are left to the reader (one more scan of a large UID table costs more than
# it may save).
MAX_TAG_VALUES = 1024
TAGV_NAME_COLUMN = b"name:tagv"
# The TSDBs whose UID table held too many tag values when last asked.
_TOO_MANY: weakref.WeakKeyDictionary[TSDB, bool] = weakref.WeakKeyDictionary()


def scan_regex(tsdb: TSDB, table: Table, filters: Sequence[TagFilter],
               constraints: Sequence[UidConstraint], values: bool = True) -> str | None:
    """The row-key regexp to narrow ``table``'s scans with, or None when it cannot
    (a table without ``with_row_regex``) or nothing narrows. ``values``: with the value
    filters' values too; off for a read whose series are kept for any filter on the same
    keys (a range entry of the hour cache: its key is the constraints, not the filters)."""
    if able(table, ROW_REGEX) is None:
        return None
    resolved = with_value_uids(tsdb, filters, constraints) if values else constraints
    if all(c.literal_uids is None for c in resolved if not c.excluded):
        # Only keys that must be present (``{dc=*}``): nearly every series has them, and a
        # regexp on every row then cost more than it saved (bench_hbase_fresh.py).
        return None
    return row_key_regex(tsdb.layout, resolved)


def with_value_uids(tsdb: TSDB, filters: Sequence[TagFilter],
                    constraints: Sequence[UidConstraint]) -> list[UidConstraint]:
    """``constraints`` (``select.resolve`` of ``merge_filters(filters)``, in that order)
    with the values of keys that only value filters constrain listed as UIDs."""
    merged = merge_filters(filters)
    open_keys = [i for i, (key, uid) in enumerate(zip(merged, constraints))
                 if uid.literal_uids is None and not uid.excluded and key.post_filters]
    if not open_keys or len(merged) != len(constraints):
        return list(constraints)
    names = tag_value_names(tsdb)
    if names is None:
        return list(constraints)
    resolved = list(constraints)
    for i in open_keys:
        tests = merged[i].post_filters
        resolved[i] = UidConstraint(constraints[i].tagk_uid, False, frozenset(
            uid for uid, name in names
            if name is None or all(test.matches(name) for test in tests)))
    return resolved


def tag_value_names(tsdb: TSDB) -> list[tuple[bytes, str | None]] | None:
    """``(uid, name)`` of every tag value (name None: not UTF-8, then it is kept whatever the
    filters), or None when there are more than ``MAX_TAG_VALUES`` (remembered for the
    process: tag values only grow, so such a UID table is not scanned again)."""
    if tsdb in _TOO_MANY:
        return None
    rows = list(tsdb.uid_table().scan(columns=[TAGV_NAME_COLUMN], limit=MAX_TAG_VALUES + 1,
                                      batch_size=MAX_TAG_VALUES + 1))
    if len(rows) > MAX_TAG_VALUES:
        _TOO_MANY[tsdb] = True
        return None
    width = tsdb.layout.tagv_width
    found: list[tuple[bytes, str | None]] = []
    for uid, cells in rows:
        name = cells.get(TAGV_NAME_COLUMN)
        if name is not None and len(uid) == width:
            try:
                found.append((uid, name.decode("utf-8")))
            except UnicodeDecodeError:
                found.append((uid, None))
    return found
