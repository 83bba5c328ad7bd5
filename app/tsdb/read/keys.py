"""Which rows a sub-query reads: its UID constraints, scan ranges or exact keys (pure: no IO).

The filters' tag keys and literal values, resolved to UIDs, become :class:`UidConstraint`\\ s:
a byte-level test of a row key (:func:`passes`), the literal filter to narrow a scan with
(:func:`narrowing`), or, with explicitTags and only literals, the exact tag sets whose row
keys are fetched instead of scanned (:func:`exact_tag_sets`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.engine.execute import scan_bounds_ms
from app.query.ast import Downsample
from app.query.filters import TagFilter
from app.storage import codec
from app.storage.base import prefix_stop

MAX_TIMESPAN_S = codec.MAX_TIMESPAN
# Past this many hour rows per salt, one wide scan beats two narrow range scans per hour.
MAX_NARROWED_HOURS = 24 * 8
# Row keys fetched by exact gets at most (tsuids, explicitTags with literals): past it, or
# when a range scan of the metric would read fewer rows, the rows are scanned instead.
MAX_EXACT_KEYS = 4096
# Up to this many exact keys are fetched without first counting what a scan would read.
FEW_EXACT_KEYS = 64

KeyRange = tuple[bytes, bytes | None]


def scan_hours_s(start_ms: int, end_ms: int, spec: Downsample | None) -> tuple[int, int]:
    """First and last base time (inclusive) of the hour rows OpenTSDB scans for a query."""
    scan_start_ms, scan_end_ms = scan_bounds_ms(start_ms, end_ms, spec)
    last_s = (scan_end_ms - 1) // 1000
    return scan_start_ms // 1000, last_s - last_s % MAX_TIMESPAN_S


@dataclass(frozen=True)
class UidConstraint:
    """One tag key's constraint on row keys: present (or absent: ``excluded``), and when
    ``literal_uids`` is set, with one of those values."""

    tagk_uid: bytes
    excluded: bool
    literal_uids: frozenset[bytes] | None


@dataclass
class SeriesRows:
    """One series' rows as read (row key order), before decoding."""

    row_order: bytes
    tag_uids: tuple[tuple[bytes, bytes], ...]
    rows: list[tuple[bytes, Any]] = field(default_factory=list)


def series_order(layout: codec.RowKeyLayout, key: bytes) -> bytes:
    """A row key without its base time: the same for every row of one series."""
    time_start = layout.salt_width + layout.metric_width
    return key[:time_start] + key[time_start + 4:]


def base_time_s(layout: codec.RowKeyLayout, key: bytes) -> int:
    start = layout.salt_width + layout.metric_width
    return int.from_bytes(key[start:start + 4], "big")


def passes(layout: codec.RowKeyLayout, key: bytes,
           constraints: Sequence[UidConstraint]) -> bool:
    """The byte-level pre-filter: keys present (or absent for not_key), literal tagv UIDs."""
    if not constraints:
        return True
    tags = dict(layout.parse_row_key(key).tags)
    for constraint in constraints:
        tagv_uid = tags.get(constraint.tagk_uid)
        if constraint.excluded:
            if tagv_uid is not None:
                return False
            continue
        if tagv_uid is None:
            return False
        if constraint.literal_uids is not None and tagv_uid not in constraint.literal_uids:
            return False
    return True


def enforced_by_uids(tag_filter: TagFilter) -> bool:
    """A filter the row keys' UIDs already decide (a case-sensitive literal_or)."""
    return tag_filter.type == "literal_or" and not getattr(tag_filter, "negated", True)


def narrowing(constraints: Sequence[UidConstraint]) -> UidConstraint | None:
    """The literal constraint whose tagk sorts first: the best one to narrow scans with."""
    literal = [c for c in constraints if c.literal_uids and not c.excluded]
    return min(literal, key=lambda c: c.tagk_uid) if literal else None


def exact_tag_sets(constraints: Sequence[UidConstraint]
                   ) -> list[list[tuple[bytes, bytes]]] | None:
    """Every exact tag set the constraints allow, or None when some key is not literal."""
    if any(c.literal_uids is None or c.excluded for c in constraints):
        return None
    if math.prod(len(c.literal_uids or ()) for c in constraints) > MAX_EXACT_KEYS:
        return None  # too many to fetch by key, whatever the range: scan
    choices = [[(c.tagk_uid, v) for v in sorted(c.literal_uids or ())] for c in constraints]
    return [list(combo) for combo in itertools.product(*choices)]


def key_ranges(layout: codec.RowKeyLayout, metric_uid: bytes, first_s: int, last_s: int,
               narrow: UidConstraint | None, span_s: int) -> list[KeyRange]:
    """The key ranges of a metric's rows with base times in ``[first_s, last_s]`` (rows
    ``span_s`` apart), in every salt bucket (see :func:`salt_ranges`)."""
    return [key_range for salt in layout.salt_prefixes()
            for key_range in salt_ranges(layout, salt, metric_uid, first_s, last_s, narrow,
                                         span_s)]


def salt_ranges(layout: codec.RowKeyLayout, salt: bytes, metric_uid: bytes, first_s: int,
                last_s: int, narrow: UidConstraint | None, span_s: int) -> list[KeyRange]:
    """Key ranges to scan in one salt bucket: one, or per hour narrowed by a literal filter.

    Tags in a key are sorted by tagk UID, so a row holding ``tagk=v`` either starts its
    tags with that pair or with a tagk of a lower UID: each hour needs only
    ``[hour, hour+tagk)`` (unless no UID is lower) and ``[hour+tagk+v, next(hour+tagk+v))``
    for every literal v.
    """
    start, stop = layout.metric_scan_range(salt, metric_uid, first_s, last_s)
    hours = (last_s - first_s) // span_s + 1
    if narrow is None or narrow.literal_uids is None or hours > MAX_NARROWED_HOURS \
            or hours * (len(narrow.literal_uids) + 1) > MAX_EXACT_KEYS:
        return [(start, stop)]  # one wide scan beats that many narrow ones
    ranges: list[KeyRange] = []
    # OpenTSDB assigns UIDs from 1, so no row starts its tags below the first tag key ever
    # assigned (often ``host``): that range is empty, and a scan of it three round trips.
    lower_tagks = int.from_bytes(narrow.tagk_uid, "big") > 1
    for base_s in range(first_s, last_s + 1, span_s):
        hour = salt + metric_uid + base_s.to_bytes(4, "big")
        if lower_tagks:
            ranges.append((hour, hour + narrow.tagk_uid))
        for tagv_uid in sorted(narrow.literal_uids):
            prefix = hour + narrow.tagk_uid + tagv_uid
            ranges.append((prefix, prefix_stop(prefix)))
    return ranges
