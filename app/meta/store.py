"""TSMeta and UIDMeta in storage: load, store new, sync edits (``syncToStorage``), delete.

Edits follow OpenTSDB: a request carries the fields it *changed* (a setter given a value
different from the default); POST keeps the stored value of every other field, PUT
(``overwrite``) replaces them all; nothing changed is a 304; the new cell is written with a
compare-and-set against the stored bytes, so a concurrent edit makes the request fail (500,
"Failed to save ...") instead of being lost.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from app.errors import BadRequestError, NoSuchUniqueId, TsdbError
from app.meta.codec import (
    TS_COUNTER_COLUMN,
    TS_META_COLUMN,
    TSMeta,
    UIDMeta,
    counter_value,
    ts_meta_from_storage,
    uid_meta_column,
    uid_meta_from_storage,
)
from app.tsdb import TSDB


class NotModified(TsdbError):
    """``IllegalStateException("No changes detected ...")``: answered 304 without a body."""

    code = 304


class SaveFailed(TsdbError):
    code = 500


# --- UIDMeta -----------------------------------------------------------------------------


def load_uid_meta(tsdb: TSDB, kind: str, uid: bytes) -> UIDMeta:
    """``UIDMeta.getUIDMeta``: the stored object, or a default one; NoSuchUniqueId."""
    name = tsdb.uids[kind].get_name(uid)
    column = uid_meta_column(kind)
    raw = tsdb.uid_table().row(uid, [column]).get(column)
    if not raw:
        return UIDMeta(kind=kind, uid=uid.hex().upper(), name=name)
    return uid_meta_from_storage(kind, uid.hex().upper(), name, raw)


def sync_uid_meta(tsdb: TSDB, kind: str, uid: bytes, given: Mapping[str, Any],
                  overwrite: bool) -> UIDMeta:
    """Apply the ``given`` user fields (already parsed); return the stored result."""
    changed = _changed(given, UIDMeta(kind=kind, uid=uid.hex().upper()))
    if not changed:
        raise NotModified("No changes detected in UID meta data")
    name = tsdb.uids[kind].get_name(uid)  # NoSuchUniqueId before anything is written
    column = uid_meta_column(kind)
    table = tsdb.uid_table()
    original = table.row(uid, [column]).get(column)
    local = UIDMeta(kind=kind, uid=uid.hex().upper(), name=name, **_fields(given, changed))
    if original:
        stored = uid_meta_from_storage(kind, local.uid, name, original)
        local = _merged(local, stored, changed, overwrite, UIDMeta.__dataclass_fields__)
    if not table.check_and_put(uid, column, original or None, local.storage_json()):
        raise SaveFailed("Failed to save the UIDMeta to storage",
                         "This may be caused by another process modifying storage data")
    return load_uid_meta(tsdb, kind, uid)


def delete_uid_meta(tsdb: TSDB, kind: str, uid: bytes) -> None:
    tsdb.uid_table().delete(uid, [uid_meta_column(kind)])


# --- TSMeta --------------------------------------------------------------------------------


def load_ts_meta(tsdb: TSDB, tsuid: bytes, with_uids: bool = True) -> TSMeta | None:
    """``TSMeta.getTSMeta``: the stored object with its counter and the UIDMetas of its
    metric and tags; None when there is no ``ts_meta`` cell. NoSuchUniqueId."""
    table = tsdb.meta_table()
    cells = table.row(tsuid, [TS_META_COLUMN, TS_COUNTER_COLUMN])
    return _ts_meta_of(tsdb, tsuid, cells, with_uids, table.row_write_times(tsuid)
                       if TS_COUNTER_COLUMN in cells else {})


def _ts_meta_of(tsdb: TSDB, tsuid: bytes, cells: Mapping[bytes, bytes], with_uids: bool,
                write_times_ms: Mapping[bytes, int]) -> TSMeta | None:
    raw = cells.get(TS_META_COLUMN)
    if not raw:
        return None
    meta = ts_meta_from_storage(raw, tsuid.hex().upper())
    counter = cells.get(TS_COUNTER_COLUMN)
    if counter is not None:
        meta.total_dps = counter_value(counter)
        meta.last_received = write_times_ms.get(TS_COUNTER_COLUMN, 0) // 1000
    if with_uids:
        _load_uids(tsdb, meta, bytes.fromhex(meta.tsuid))
    return meta


def _load_uids(tsdb: TSDB, meta: TSMeta, tsuid: bytes) -> None:
    layout = tsdb.layout
    meta.metric = load_uid_meta(tsdb, "metrics", tsuid[:layout.metric_width])
    meta.tags = []
    i = layout.metric_width
    while i < len(tsuid):
        tagk_end = i + layout.tagk_width
        meta.tags.append(load_uid_meta(tsdb, "tagk", tsuid[i:tagk_end]))
        meta.tags.append(load_uid_meta(tsdb, "tagv", tsuid[tagk_end:tagk_end
                                                              + layout.tagv_width]))
        i = tagk_end + layout.tagv_width


def check_uids(tsdb: TSDB, tsuid: bytes) -> None:
    """Every UID of a TSUID has a name (``syncToStorage``'s first step); NoSuchUniqueId."""
    _load_uids(tsdb, TSMeta(tsuid=""), tsuid)


def ts_meta_exists(tsdb: TSDB, tsuid: bytes) -> bool:
    return bool(tsdb.meta_table().row(tsuid, [TS_META_COLUMN]).get(TS_META_COLUMN))


def store_new_ts_meta(tsdb: TSDB, tsuid: bytes, given: Mapping[str, Any], created: int,
                      counter_if_missing: bool) -> TSMeta:
    """``storeNew`` (``create=true``): the given fields, a zero counter if none exists."""
    table = tsdb.meta_table()
    if counter_if_missing and TS_COUNTER_COLUMN not in table.row(tsuid, [TS_COUNTER_COLUMN]):
        table.put(tsuid, {TS_COUNTER_COLUMN: (0).to_bytes(8, "big")})
    fields = _fields(given, _changed(given, TSMeta(tsuid="")))
    meta = TSMeta(tsuid=tsuid.hex().upper(), **{"created": created, **fields})
    table.put(tsuid, {TS_META_COLUMN: meta.storage_json()})
    stored = load_ts_meta(tsdb, tsuid)
    assert stored is not None
    return stored


def sync_ts_meta(tsdb: TSDB, tsuid: bytes, given: Mapping[str, Any],
                 overwrite: bool) -> TSMeta:
    changed = _changed(given, TSMeta(tsuid=""))
    if not changed:
        raise NotModified("No changes detected in TSUID meta data")
    check_uids(tsdb, tsuid)
    table = tsdb.meta_table()
    original = table.row(tsuid, [TS_META_COLUMN]).get(TS_META_COLUMN)
    if not original:
        raise BadRequestError("Requested TSMeta did not exist")
    stored = ts_meta_from_storage(original, tsuid.hex().upper())
    local = TSMeta(tsuid=tsuid.hex().upper(), **_fields(given, changed))
    local = _merged(local, stored, changed, overwrite, TSMeta.__dataclass_fields__)
    if not table.check_and_put(tsuid, TS_META_COLUMN, original, local.storage_json()):
        raise SaveFailed("Failed to save the TSMeta to storage",
                         "This may be caused by another process modifying storage data")
    result = load_ts_meta(tsdb, tsuid)
    assert result is not None
    return result


def delete_ts_meta(tsdb: TSDB, tsuid: bytes) -> None:
    """``TSMeta#delete``: the ``ts_meta`` cell only (the counter stays, as in OpenTSDB)."""
    tsdb.meta_table().delete(tsuid, [TS_META_COLUMN])


def scan_ts_metas(tsdb: TSDB, metric_uid: bytes | None,
                  tag_uids: Sequence[bytes] = (), with_uids: bool = True) -> Iterator[TSMeta]:
    """The TSMeta objects of a metric (every one without), keeping the TSUIDs that hold
    each tag pair (``TSUIDQuery.getScanner``'s key regexp), in TSUID order."""
    layout = tsdb.layout
    pair = layout.tagk_width + layout.tagv_width
    table = tsdb.meta_table()
    for tsuid, cells in table.scan(row_prefix=metric_uid or None,
                                   columns=[TS_META_COLUMN, TS_COUNTER_COLUMN]):
        tags = {tsuid[i:i + pair] for i in range(layout.metric_width, len(tsuid), pair)}
        if not all(t in tags for t in tag_uids):
            continue
        times = table.row_write_times(tsuid) if TS_COUNTER_COLUMN in cells else {}
        meta = _ts_meta_of(tsdb, tsuid, cells, False, times)
        if meta is None:
            continue
        if with_uids:
            try:
                _load_uids(tsdb, meta, tsuid)
            except NoSuchUniqueId:
                continue  # a TSMeta whose UID was deleted: OpenTSDB drops it as well
        yield meta


def counters(tsdb: TSDB) -> Iterator[tuple[bytes, int]]:
    """Every tracked series and its ``ts_ctr`` value (TSUIDs in key order)."""
    for tsuid, cells in tsdb.meta_table().scan(columns=[TS_COUNTER_COLUMN]):
        yield tsuid, counter_value(cells.get(TS_COUNTER_COLUMN, b""))


# --- changed fields ------------------------------------------------------------------------


def _changed(given: Mapping[str, Any], defaults: TSMeta | UIDMeta) -> set[str]:
    """The fields a setter would mark changed: given and different from the default
    (``custom`` whenever given non-null; ``created`` too, as OpenTSDB counts it)."""
    changed = set()
    for key, value in given.items():
        if key == "custom":
            if value is not None:
                changed.add(key)
        elif key in ("max", "min"):
            if not (_is_nan(value) and _is_nan(getattr(defaults, key))):
                changed.add(key)
        elif value != getattr(defaults, key):
            changed.add(key)
    return changed


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and value != value


def _fields(given: Mapping[str, Any], changed: set[str]) -> dict[str, Any]:
    return {key: given[key] for key in changed}


def _merged(local: Any, stored: Any, changed: set[str], overwrite: bool,
            names: Mapping[str, Any]) -> Any:
    """``syncMeta``: the stored ``created`` when earlier; unchanged user fields from storage
    unless ``overwrite``."""
    updates: dict[str, Any] = {}
    if stored.created > 0 and (stored.created < local.created or local.created == 0):
        updates["created"] = stored.created
    if not overwrite:
        for key in names:
            if key in USER_FIELDS and key not in changed:
                updates[key] = getattr(stored, key)
    return replace(local, **updates)


USER_FIELDS = frozenset({"display_name", "description", "notes", "custom", "units",
                         "data_type", "retention", "max", "min"})
