"""Which rows a sub-query reads, in UIDs: resolved once for its plan (``plan``).

The metric and the filters' tag keys and literal values become UIDs here (an unknown name is
OpenTSDB's 400, before any row is read); tsuids are checked as OpenTSDB checks them. What is
left is bytes: the :class:`Selection` every source of the read tests row keys with, and the
choice between fetching exact row keys (tsuids, explicitTags with only literal filters) and a
range scan, made by cost (:func:`fetch_by_key`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.errors import BadRequestError
from app.query.ast import SubQuery
from app.query.filters import KeyConstraint, TagFilter, merge_filters
from app.storage import codec
from app.tsdb import TSDB
from app.tsdb.read.keys import (
    FEW_EXACT_KEYS,
    MAX_EXACT_KEYS,
    MAX_TIMESPAN_S,
    UidConstraint,
    enforced_by_uids,
    exact_tag_sets,
    key_ranges,
    narrowing,
)
from app.tsdb.tsuid import parse_tsuid

TagSet = tuple[tuple[bytes, bytes], ...]


@dataclass(frozen=True, slots=True)
class Selection:
    """The rows of one sub-query, as bytes: its metric, the UID constraints of its filters,
    the series its tsuids name, the exact tag sets of literal explicitTags, and whether name
    filters (wildcard, regexp, case-insensitive) remain to be run once per series."""

    metric_uid: bytes
    constraints: tuple[UidConstraint, ...] = ()
    # The series named by tsuid (metric UID + tag pairs); empty for a metric query.
    tsuids: frozenset[bytes] = frozenset()
    # explicitTags with only literal filters: every tag set whose rows are all it reads.
    exact: tuple[TagSet, ...] | None = None
    named: bool = False
    # Fetch the exact row keys (tsuids, ``exact``) instead of scanning the metric: cheaper.
    by_key: bool = False

    @property
    def narrow(self) -> UidConstraint | None:
        """The literal constraint that narrows a scan best (see ``keys.salt_ranges``)."""
        return narrowing(self.constraints)

    def series_count(self) -> int:
        """Series whose exact keys could be fetched (0: not a by-key read)."""
        return len(self.tsuids) if self.tsuids else len(self.exact or ())


def select(tsdb: TSDB, sub: SubQuery, filters: Sequence[TagFilter]) -> Selection:
    """The sub-query's rows in UIDs (OpenTSDB's 400 for an unknown name, a bad tsuid)."""
    if sub.tsuids:
        series = tsuid_series(tsdb.layout, sub.tsuids)
        return Selection(metric_uid=next(iter(series))[:tsdb.layout.metric_width],
                         tsuids=series)
    assert sub.metric is not None
    metric_uid = tsdb.metrics.get_id(sub.metric)
    constraints = tuple(resolve(tsdb, merge_filters(filters)))
    exact = None
    if sub.explicit_tags and filters:
        sets = exact_tag_sets(constraints)
        exact = None if sets is None else tuple(tuple(tags) for tags in sets)
    return Selection(metric_uid, constraints, exact=exact,
                     named=any(not enforced_by_uids(f) for f in filters))


def tsuid_series(layout: codec.RowKeyLayout, tsuids: Sequence[str]) -> frozenset[bytes]:
    """Whole UIDs, one metric (``TsdbQuery#setTimeSeries``; OpenTSDB answers 500)."""
    metric_hex = 2 * layout.metric_width
    for tsuid in tsuids:
        if len(parse_tsuid(layout, tsuid)) == layout.metric_width:
            # OpenTSDB parses the missing tag pairs as an empty UID (a 400)
            raise BadRequestError("UID was empty", "A TSUID needs at least one tag pair")
        if tsuid[:metric_hex].upper() != tsuids[0][:metric_hex].upper():
            raise BadRequestError("One or more TSUIDs did not share the same metric "
                                  f"[{tsuids[0][:metric_hex]}] [{tsuid[:metric_hex]}]")
    return frozenset(bytes.fromhex(tsuid) for tsuid in tsuids)


def resolve(tsdb: TSDB, constraints: Sequence[KeyConstraint]) -> list[UidConstraint]:
    """The filters' key constraints with UIDs for names (unknown names: 400s)."""
    resolved = []
    for constraint in constraints:
        tagk_uid = tsdb.tagk.get_id(constraint.tagk)
        literal_uids = None
        if constraint.literals is not None:
            literal_uids = _literal_uids(tsdb, constraint.literals)
        resolved.append(UidConstraint(tagk_uid, constraint.excluded, literal_uids))
    return resolved


def _literal_uids(tsdb: TSDB, literals: frozenset[str]) -> frozenset[bytes]:
    """UIDs of literal tag values; an unknown one is a 400 unless
    ``tsd.query.skip_unresolved_tagvs`` says to drop it (then nothing may match)."""
    if not tsdb.config["tsd.query.skip_unresolved_tagvs"]:
        return frozenset(tsdb.tagv.get_id(v) for v in sorted(literals))
    found = (tsdb.tagv.find_id(v) for v in sorted(literals))
    return frozenset(uid for uid in found if uid is not None)


def fetch_by_key(tsdb: TSDB, selection: Selection, first_s: int, last_s: int) -> bool:
    """Whether fetching the selection's series x hours exact row keys reads less than a
    range scan of the metric over the hours: never past ``MAX_EXACT_KEYS`` keys; always up
    to ``FEW_EXACT_KEYS``; between, when the range holds more rows than there are keys
    (counted keys only, stopping at one more). Decided once, over the plan's whole scan
    range: every part of the read (closed hours, a split's half, a rollup table with
    longer rows) has at most as many keys."""
    series = selection.series_count()
    if not series:
        return False
    keys = series * ((last_s - first_s) // MAX_TIMESPAN_S + 1)
    if keys > MAX_EXACT_KEYS:
        return False
    if keys <= FEW_EXACT_KEYS:
        return True
    table, seen = tsdb.data_table(), 0
    for start, stop in key_ranges(tsdb.layout, selection.metric_uid, first_s, last_s, None,
                                  MAX_TIMESPAN_S):
        wanted = keys - seen + 1
        rows = table.scan(row_start=start, row_stop=stop, columns=[b"t"], limit=wanted,
                          batch_size=wanted, keys_only=True)
        seen += sum(1 for _ in rows)  # the limit ends (and closes) the scan
        if seen > keys:
            return True
    return False
