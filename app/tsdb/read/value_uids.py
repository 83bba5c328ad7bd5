"""The row-key regexp of a sub-query's scan (``key_regex``), with the value filters (regexp,
wildcard, not_literal_or, ...) resolved to the UIDs of the tag values they match: then the
region servers drop the other series' rows for those too.

The names come from the reverse rows of ``tsdb-uid`` (UID -> name, ``value_names``: kept per
process, read incrementally), where the reader's own name test (``RowReader.names``) gets
them, so a value the regexp lists is exactly one whose series that test keeps. A tag value
created after the names were brought up to date is not listed: every row of its series is
written after its reverse row, so after this read began, and a read may miss what is
written while it runs (as it would have without the regexp). A key whose filters match more
values than a row-key regexp takes (``MAX_REGEX_LITERALS``) is left to the reader. The
regexp is built once for every read's plan (``plan``), never kept.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.query.filters import TagFilter, merge_filters
from app.storage.base import ROW_REGEX, Table, able
from app.tsdb import TSDB
from app.tsdb.read import value_names
from app.tsdb.read.key_regex import MAX_REGEX_LITERALS, row_key_regex
from app.tsdb.read.keys import UidConstraint

# Names a query tests against its value filters at most (~2 us each: 0.2 s).
MATCH_PER_QUERY = 100_000


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
    resolved = list(constraints)
    with value_names.LOCK:
        names = value_names.names(tsdb)
        if names is None:
            return resolved
        for i in open_keys:
            uids = matching_uids(names, merged[i].post_filters)
            if uids is not None:
                resolved[i] = UidConstraint(constraints[i].tagk_uid, False, uids)
    return resolved


def matching_uids(names: value_names.Names, tests: Sequence[TagFilter]
                  ) -> frozenset[bytes] | None:
    """The UIDs of the names every one of ``tests`` matches (and of the names not UTF-8), or
    None when more than a row-key regexp takes, or when the names are not all tested yet.
    Kept per filter text, so a query tests only the names added since; at most
    ``MATCH_PER_QUERY`` per query (the rest by the next ones: the time a query spends on it
    is bounded, and a repeated filter is resolved after a few queries)."""
    key = tuple((type(test).__name__, test.filter) for test in tests)
    memo = names.memos.get(key)
    if memo is None:
        if len(names.memos) >= value_names.MAX_MEMOS:
            names.memos.clear()
        memo = names.memos[key] = value_names.Memo()
    total = len(names.names)
    stop = min(total, memo.checked + MATCH_PER_QUERY)
    if memo.uids is not None and memo.checked < stop:
        kept: Sequence[int] = range(memo.checked, stop)
        for test in tests:  # one comprehension per test: a name costs one call, ~2 us
            kept = [i for i in kept if (name := names.names[i]) is None or test.matches(name)]
        memo.uids.update(names.uid(i) for i in kept)
        if len(memo.uids) > MAX_REGEX_LITERALS:
            memo.uids = None
    memo.checked = stop
    if memo.uids is None or stop < total:
        return None
    return frozenset(memo.uids)
