"""Finding series without ``tsdb-meta``: key-only scans of the data table.

Grammar of a lookup expression (``/api/search/lookup?m=``, ``Tags.parseWithMetric``)::

    m      = metric | [metric] "{" pair ("," pair)* "}"     ; a metric, some pairs, or both
    pair   = tagk "=" value | "=" value | tagk "="          ; an empty side means "any"
    tagk   = "*" | name                                     ; "*": any key
    value  = "*" | <filter value, see app.query.filters>    ; "a|b", "web*", "regexp(...)"

A series matches when its metric is the one asked for and, for every tag key named, it carries
the key with a value matching one of the pairs given for that key (pairs on one key are ORed).
Pairs without a key (``=v``, ``*=v``) are ORed among themselves and need some tag with such a
value. Plain literals become tagv UIDs compared on bytes; other filter values are matched on the
tag value's name, once per series.

OpenTSDB's data-table lookup returns one entry per hour row; this returns each series once.
The cost is one key-only row per series per hour in the scanned range (``start_s``/``end_s``,
or the metric's whole history), without reading any cell values.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from app.errors import (
    BadRequestError,
    NoSuchUniqueId,
    NoSuchUniqueName,
    NotFoundError,
)
from app.query.filters import NotKeyFilter, TagFilter, build_filter, filter_from_tag
from app.query.limits import NO_DEADLINE, Deadline
from app.storage.base import prefix_stop
from app.tsdb import TSDB
from app.tsdb.tsuid import tsuid_tags

log = logging.getLogger(__name__)

Pair = tuple[str | None, str | None]
"""A ``(tagk, value)`` pair of a lookup; None on either side means "any"."""

MAX_BASE_TIME_S = 0xFFFFFFFF
_DEADLINE_CHECK_ROWS = 4096


def _parse_pair(tag: str, pairs: list[Pair]) -> None:
    if len(tag) < 2:
        raise ValueError("Missing tag pair")
    if tag[0] == "=":
        pairs.append((None, tag[1:]))
    elif tag[-1] == "=":
        pairs.append((tag[:-1], None))
    else:
        parts = tag.split("=")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise ValueError(f"invalid tag: {tag}")
        pairs.append((parts[0], parts[1]))


def parse_lookup_m(text: str) -> tuple[str | None, list[Pair]]:
    """Split ``metric{k=v,...}`` into the metric (None when absent) and its pairs.

    Raises :class:`BadRequestError` "Unable to parse query" with OpenTSDB's message as details.
    """
    try:
        return _parse_with_metric(text)
    except ValueError as exc:
        raise BadRequestError("Unable to parse query", str(exc)) from None


def _parse_with_metric(text: str) -> tuple[str | None, list[Pair]]:
    curly = text.find("{")
    if curly < 0:
        if not text:
            raise ValueError("Metric string was empty")
        return text, []
    if text[-1] != "}":
        raise ValueError(f"Missing '}}' at the end of: {text}")
    if curly == len(text) - 2:
        if text[0] == "{":
            raise ValueError(f"Missing metric and tags: {text}")
        return text[:-2], []
    pairs: list[Pair] = []
    for tag in text[curly + 1:-1].split(","):
        try:
            _parse_pair(tag, pairs)
        except ValueError as exc:
            raise ValueError(f"When parsing tag '{tag}': {exc}") from None
    return (None if curly == 0 else text[:curly]), pairs


def _any(side: str | None) -> bool:
    return side is None or side == "" or side == "*"


@dataclass
class ValueMatch:
    """What one tag key (or "any key") accepts: the OR of the pairs given for it."""

    any_value: bool = False
    excluded: bool = False
    uids: set[bytes] = field(default_factory=set)
    patterns: list[TagFilter] = field(default_factory=list)


class SeriesMatcher:
    """Tag constraints of a lookup, resolved to UIDs, tested against row-key tag pairs."""

    def __init__(self, keyed: dict[bytes, ValueMatch], any_key: ValueMatch | None,
                 tagv_name: Callable[[bytes], str]) -> None:
        self.keyed = keyed
        self.any_key = any_key
        self._tagv_name = tagv_name

    def matches(self, tags: Sequence[tuple[bytes, bytes]]) -> bool:
        tag_map = dict(tags)
        for tagk_uid, accept in self.keyed.items():
            tagv_uid = tag_map.get(tagk_uid)
            if accept.excluded:
                if tagv_uid is not None:
                    return False
            elif tagv_uid is None or not self._accepts(accept, tagv_uid):
                return False
        if self.any_key is not None:
            return any(self._accepts(self.any_key, tagv_uid) for tagv_uid in tag_map.values())
        return True

    def _accepts(self, accept: ValueMatch, tagv_uid: bytes) -> bool:
        if accept.any_value or tagv_uid in accept.uids:
            return True
        if not accept.patterns:
            return False
        try:
            name = self._tagv_name(tagv_uid)
        except NoSuchUniqueId:
            return False
        return any(pattern.matches(name) for pattern in accept.patterns)


def compile_matcher(tsdb: TSDB, pairs: Sequence[Pair]) -> SeriesMatcher:
    """Resolve the pairs' names to UIDs; unknown names raise :class:`NoSuchUniqueName`."""
    keyed: dict[bytes, ValueMatch] = {}
    any_key: ValueMatch | None = None
    for tagk, value in pairs:
        if _any(tagk):
            any_key = any_key or ValueMatch()
            _add_value(tsdb, any_key, "*", value)
        else:
            assert tagk is not None
            accept = keyed.setdefault(tsdb.tagk.get_id(tagk), ValueMatch())
            _add_value(tsdb, accept, tagk, value)
    return SeriesMatcher(keyed, any_key, tsdb.tagv.get_name)


def _add_value(tsdb: TSDB, accept: ValueMatch, tagk: str, value: str | None) -> None:
    if _any(value):
        accept.any_value = True
        return
    assert value is not None
    try:
        tag_filter = build_filter(filter_from_tag(tagk, value, False))
    except BadRequestError as exc:
        raise BadRequestError("Unable to parse query",
                              f"When parsing tag '{tagk}={value}': {exc.message}") from None
    if isinstance(tag_filter, NotKeyFilter):
        if tagk == "*":
            raise BadRequestError("not_key() needs a tag key")
        accept.excluded = True
    elif tag_filter.literals is not None and not tag_filter.negated:
        accept.uids.update(tsdb.tagv.get_id(name) for name in sorted(tag_filter.literals))
    elif tag_filter.match_any:
        accept.any_value = True
    else:
        accept.patterns.append(tag_filter)


def _scan_ranges(tsdb: TSDB, metric_uid: bytes | None, first_base_s: int,
                 last_base_s: int) -> Iterator[tuple[bytes, bytes | None]]:
    layout = tsdb.layout
    for salt in layout.salt_prefixes():
        if metric_uid is not None:
            yield layout.metric_scan_range(salt, metric_uid, first_base_s, last_base_s)
        else:
            yield salt, prefix_stop(salt) if salt else None


def scan_matching_rows(tsdb: TSDB, metric_uid: bytes | None, matcher: SeriesMatcher,
                       first_base_s: int = 0, last_base_s: int = MAX_BASE_TIME_S,
                       deadline: Deadline = NO_DEADLINE,
                       batch_size: int = 5000) -> Iterator[tuple[bytes, bytes]]:
    """Yield ``(tsuid, row_key)`` of every matching hour row in ``[first, last]`` base times.

    One key-only scan per salt bucket; a series' verdict is computed once and remembered.
    Without a metric the whole table is scanned, skipping global-annotation rows.
    """
    layout = tsdb.layout
    metric_start = layout.salt_width
    metric_end, tags_start = metric_start + layout.metric_width, layout.tags_start
    tagk_width, pair_width = layout.tagk_width, layout.tagk_width + layout.tagv_width
    tsuid_tags_start = layout.metric_width
    verdicts: dict[bytes, bool] = {}
    table = tsdb.data_table()
    scanned = 0
    for start, stop in _scan_ranges(tsdb, metric_uid, first_base_s, last_base_s):
        for key, _ in table.scan(row_start=start, row_stop=stop, keys_only=True,
                                 batch_size=batch_size):
            scanned += 1
            if scanned % _DEADLINE_CHECK_ROWS == 0:
                deadline.check()
            if len(key) < tags_start or (len(key) - tags_start) % pair_width:
                continue
            if metric_uid is None and not _in_time_range(key, layout.salt_width,
                                                         metric_end, first_base_s,
                                                         last_base_s):
                continue
            tsuid = key[metric_start:metric_end] + key[tags_start:]
            verdict = verdicts.get(tsuid)
            if verdict is None:
                # Slicing the TSUID here is ~3x cheaper than RowKeyLayout.parse_row_key.
                tags = [(tsuid[i:i + tagk_width], tsuid[i + tagk_width:i + pair_width])
                        for i in range(tsuid_tags_start, len(tsuid), pair_width)]
                verdict = verdicts[tsuid] = matcher.matches(tags)
            if verdict:
                yield tsuid, key


def _in_time_range(key: bytes, metric_start: int, metric_end: int, first_base_s: int,
                   last_base_s: int) -> bool:
    if not any(key[metric_start:metric_end]):
        return False  # the global annotation rows: no series there
    base_s = int.from_bytes(key[metric_end:metric_end + 4], "big")
    return first_base_s <= base_s <= last_base_s


@dataclass
class LookupSeries:
    tsuid: str
    metric: str
    tags: dict[str, str]


@dataclass
class LookupResult:
    series: list[LookupSeries]
    elapsed_ms: float


def lookup_series(tsdb: TSDB, metric: str | None, pairs: Sequence[Pair], limit: int,
                  start_s: int | None = None, end_s: int | None = None,
                  deadline: Deadline = NO_DEADLINE) -> LookupResult:
    """The first ``limit`` distinct series matching, sorted by TSUID.

    Unknown names are OpenTSDB's 404 "Unable to resolve one or more UIDs".
    """
    if metric is None and not pairs:
        raise BadRequestError("Missing metric and tags. Please supply at least one value.")
    started = time.monotonic()
    deadline.check()
    try:
        metric_uid = None if _any(metric) else tsdb.metrics.get_id(metric or "")
        matcher = compile_matcher(tsdb, pairs)
    except NoSuchUniqueName as exc:
        raise NotFoundError("Unable to resolve one or more UIDs", exc.message) from None
    first_s = max(start_s or 0, 0)
    last_s = min(end_s if end_s is not None else MAX_BASE_TIME_S, MAX_BASE_TIME_S)
    first_base_s, last_base_s = first_s - first_s % 3600, last_s - last_s % 3600
    found: list[bytes] = []
    seen: set[bytes] = set()
    if limit > 0 and first_base_s <= last_base_s:
        # Small limits usually stop early: don't fetch thousands of keys per round trip.
        batch_size = min(5000, max(256, 4 * limit))
        for tsuid, _ in scan_matching_rows(tsdb, metric_uid, matcher, first_base_s,
                                           last_base_s, deadline, batch_size):
            if tsuid not in seen:
                seen.add(tsuid)
                found.append(tsuid)
                if len(found) >= limit:
                    break
    series = [named for tsuid in sorted(found) if (named := name_series(tsdb, tsuid))]
    return LookupResult(series, (time.monotonic() - started) * 1000)


def name_series(tsdb: TSDB, tsuid: bytes) -> LookupSeries | None:
    """Resolve a TSUID's metric and tags; None (logged) when a UID has no name."""
    try:
        metric = tsdb.metrics.get_name(tsuid[:tsdb.layout.metric_width])
        tags = tsuid_tags(tsdb, tsuid)
    except NoSuchUniqueId as exc:
        log.warning("skipping series %s: %s", tsuid.hex().upper(), exc.message)
        return None
    return LookupSeries(tsuid.hex().upper(), metric, tags)
