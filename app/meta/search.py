"""Search without a plugin: ``/api/search/{tsmeta,tsmeta_summary,tsuids,uidmeta,annotation}``.

OpenTSDB hands these to a search plugin (Elasticsearch) and its Lucene query language. pytsd
answers them from its own tables with a documented subset (``docs/api.md``): whitespace-separated
terms, all of which must hold::

    name:<glob>   the metric (tsmeta, tsmeta_summary, tsuids, annotation) or the UID name
                  (uidmeta); ``*`` and ``?`` wildcards; a bare word is the same term
    <tagk>=<v>    a tag pair, as /api/search/lookup reads it (``*`` any, ``web*``, ``a|b``,
                  ``regexp(...)``); series searches only
    type:<t>      metric, tagk or tagv (uidmeta only)
    text:<s>      case-insensitive substring of description, notes or custom (annotation)
    *             everything

Series come from ``tsdb-meta`` when it has rows (the series tracked there), else from key-only
scans of the data table; UIDMeta from the UID table; annotations from the data table.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass, field

from app.errors import BadRequestError, NoSuchUniqueId, NoSuchUniqueName
from app.meta.codec import KIND_OF_TYPE, TSMeta, UIDMeta
from app.meta.store import load_ts_meta, load_uid_meta
from app.query.limits import NO_DEADLINE, Deadline
from app.tsdb import TSDB
from app.tsdb.annotation_model import Note
from app.tsdb.annotations import global_notes, metric_notes
from app.tsdb.lookup import Pair, SeriesMatcher, compile_matcher, scan_matching_rows
from app.tsdb.uid import KINDS

MAX_MS = (1 << 32) * 1000 - 1


@dataclass
class SearchTerms:
    """A parsed search query."""

    name_glob: str | None = None
    pairs: list[Pair] = field(default_factory=list)
    kinds: tuple[str, ...] = KINDS
    text: str = ""


def parse_search_query(query: str) -> SearchTerms:
    terms = SearchTerms()
    for word in query.split():
        if word == "*":
            continue
        key, colon, value = word.partition(":")
        if colon and key == "type":
            kind = KIND_OF_TYPE.get(value.lower())
            if kind is None:
                raise BadRequestError(f"Invalid search term: {word}", "type: metric, tagk, tagv")
            terms.kinds = (kind,)
        elif colon and key == "text":
            terms.text = value
        elif colon and key == "name":
            terms.name_glob = value
        elif "=" in word:
            tagk, _, tagv = word.partition("=")
            terms.pairs.append((None if tagk in ("", "*") else tagk,
                                None if tagv in ("", "*") else tagv))
        elif colon:
            raise BadRequestError(f"Invalid search term: {word}",
                                  "pytsd reads name:, type:, text:, tagk=value and *")
        else:
            terms.name_glob = word
    return terms


def _glob(pattern: str | None) -> str:
    return pattern if pattern else "*"


# --- series -----------------------------------------------------------------------------------


def search_tsuids(tsdb: TSDB, terms: SearchTerms,
                  deadline: Deadline = NO_DEADLINE) -> list[bytes]:
    """Every series matching, sorted by TSUID (``deadline``: the request's budget)."""
    metric_uids = _metric_uids(tsdb, terms.name_glob)
    try:
        matcher = compile_matcher(tsdb, terms.pairs)
    except NoSuchUniqueName:
        return []  # a tag name nobody wrote: nothing can match
    if metric_uids is not None and not metric_uids:
        return []
    if _has_meta(tsdb):
        found = set(_meta_tsuids(tsdb, metric_uids, matcher, deadline))
    else:
        found = set()
        for metric_uid in sorted(metric_uids) if metric_uids is not None else [None]:
            found.update(tsuid for tsuid, _ in scan_matching_rows(tsdb, metric_uid, matcher,
                                                                  deadline=deadline))
    return sorted(found)


def _metric_uids(tsdb: TSDB, glob: str | None) -> set[bytes] | None:
    """The UIDs of the metrics a name glob names (None: any metric)."""
    if glob is None or glob == "*":
        return None
    if not any(c in glob for c in "*?["):
        uid = tsdb.metrics.find_id(glob)
        return {uid} if uid is not None else set()
    return {uid for _, uid in tsdb.metrics.grep(lambda name: fnmatch.fnmatchcase(name, glob))}


def _has_meta(tsdb: TSDB) -> bool:
    return any(True for _ in tsdb.meta_table().scan(limit=1, keys_only=True))


def _meta_tsuids(tsdb: TSDB, metric_uids: set[bytes] | None, matcher: SeriesMatcher,
                 deadline: Deadline) -> Iterator[bytes]:
    layout = tsdb.layout
    pair = layout.tagk_width + layout.tagv_width
    for count, (tsuid, _) in enumerate(tsdb.meta_table().scan(keys_only=True)):
        if count % 4096 == 4095:
            deadline.check()
        if (len(tsuid) - layout.metric_width) % pair or len(tsuid) == layout.metric_width:
            continue
        if metric_uids is not None and tsuid[:layout.metric_width] not in metric_uids:
            continue
        tags = [(tsuid[i:i + layout.tagk_width], tsuid[i + layout.tagk_width:i + pair])
                for i in range(layout.metric_width, len(tsuid), pair)]
        if matcher.matches(tags):
            yield tsuid


def ts_meta_or_default(tsdb: TSDB, tsuid: bytes) -> TSMeta | None:
    """The stored TSMeta, else a default one (a series seen only in the data table); None
    when a UID has no name."""
    try:
        meta = load_ts_meta(tsdb, tsuid)
        if meta is None:
            meta = TSMeta(tsuid=tsuid.hex().upper())
            layout = tsdb.layout
            meta.metric = load_uid_meta(tsdb, "metrics", tsuid[:layout.metric_width])
            meta.tags = [load_uid_meta(tsdb, "tagk" if n % 2 == 0 else "tagv", uid)
                         for n, uid in enumerate(_tag_uids(tsdb, tsuid))]
        return meta
    except NoSuchUniqueId:
        return None


def _tag_uids(tsdb: TSDB, tsuid: bytes) -> list[bytes]:
    layout = tsdb.layout
    out = []
    i = layout.metric_width
    while i < len(tsuid):
        out.append(tsuid[i:i + layout.tagk_width])
        i += layout.tagk_width
        out.append(tsuid[i:i + layout.tagv_width])
        i += layout.tagv_width
    return out


# --- UIDs and annotations ------------------------------------------------------------------


def search_uid_metas(tsdb: TSDB, terms: SearchTerms) -> list[tuple[str, bytes]]:
    """``(kind, uid)`` of every UID whose name matches, by kind then name."""
    glob = _glob(terms.name_glob)
    found = []
    for kind in terms.kinds:
        names = tsdb.uids[kind].grep(lambda name: fnmatch.fnmatchcase(name, glob))
        found += [(kind, uid) for _, uid in sorted(names)]
    return found


def uid_meta_or_none(tsdb: TSDB, kind: str, uid: bytes) -> UIDMeta | None:
    try:
        return load_uid_meta(tsdb, kind, uid)
    except NoSuchUniqueId:
        return None


def search_notes(tsdb: TSDB, terms: SearchTerms) -> list[Note]:
    """Global notes (without a name term) and the notes of the matching metrics' series."""
    glob = terms.name_glob
    notes = [] if glob not in (None, "*") else global_notes(tsdb, 0, MAX_MS)
    metric_names = sorted(name for name, _ in tsdb.metrics.grep(
        lambda name: fnmatch.fnmatchcase(name, _glob(glob))))
    for metric in metric_names:
        notes += metric_notes(tsdb, metric, [], 0, MAX_MS)
    if terms.text:
        notes = [note for note in notes if note.matches_text(terms.text)]
    return notes
