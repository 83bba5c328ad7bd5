"""``uid metasync`` and ``uid metapurge`` (OpenTSDB's ``MetaSync``, ``MetaPurge``).

metasync walks the data table's row keys (key-only, no cell values) and, for every series and
UID it finds, makes sure meta data exists: a missing TSMeta is stored with ``created`` = the
first hour the series has data (its earliest row: the base time precedes the tags in the key),
with a ``ts_ctr`` of 1 when there is no counter; a UIDMeta (stored or not) whose ``created`` is 0
or more than an hour after the earliest row using the UID gets that time, as MetaSync does.
metapurge deletes every ``ts_meta``/``ts_ctr`` cell and every UIDMeta cell.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from app.errors import NoSuchUniqueId
from app.meta.codec import (
    TS_COUNTER_COLUMN,
    TS_META_COLUMN,
    TSMeta,
    counter_bytes,
    ts_meta_from_storage,
    uid_meta_column,
)
from app.meta.store import load_uid_meta
from app.tsdb import TSDB
from app.tsdb.uid import KINDS

Progress = Callable[[int, bytes], None]
PROGRESS_ROWS = 100_000


@dataclass
class SyncReport:
    rows: int = 0
    series: int = 0
    ts_metas_created: int = 0
    ts_metas_updated: int = 0
    uid_metas_written: int = 0
    bad_uids: int = 0


def first_hours(tsdb: TSDB, progress: Progress | None = None, start_row: bytes | None = None
                ) -> tuple[dict[bytes, int], int]:
    """Each series' earliest base time (s), from a key-only scan from ``start_row``; and the
    rows scanned. ``progress(rows, last_row)`` every 100,000 rows."""
    layout = tsdb.layout
    salt, metric_end = layout.salt_width, layout.salt_width + layout.metric_width
    pair = layout.tagk_width + layout.tagv_width
    first: dict[bytes, int] = {}
    rows = 0
    for key, _ in tsdb.data_table().scan(row_start=start_row, keys_only=True,
                                         batch_size=5000):
        rows += 1
        if progress is not None and rows % PROGRESS_ROWS == 0:
            progress(rows, key)
        tags_len = len(key) - metric_end - 4
        if tags_len <= 0 or tags_len % pair or not any(key[salt:metric_end]):
            continue  # not a series row (global annotations, damaged keys)
        tsuid = key[salt:metric_end] + key[metric_end + 4:]
        base_s = int.from_bytes(key[metric_end:metric_end + 4], "big")
        if base_s < first.get(tsuid, 1 << 32):
            first[tsuid] = base_s
    return first, rows


def metasync(tsdb: TSDB, progress: Progress | None = None,
             start_row: bytes | None = None) -> SyncReport:
    """Sync the series of the rows from ``start_row`` on (all by default)."""
    first, rows = first_hours(tsdb, progress, start_row)
    report = SyncReport(rows=rows, series=len(first))
    uid_first: dict[tuple[str, bytes], int] = {}
    layout = tsdb.layout
    pair = layout.tagk_width + layout.tagv_width
    for tsuid, base_s in first.items():
        uids = [("metrics", tsuid[:layout.metric_width])]
        for i in range(layout.metric_width, len(tsuid), pair):
            uids += [("tagk", tsuid[i:i + layout.tagk_width]),
                     ("tagv", tsuid[i + layout.tagk_width:i + pair])]
        for kind_uid in uids:
            uid_first[kind_uid] = min(base_s, uid_first.get(kind_uid, base_s))
    for (kind, uid), base_s in sorted(uid_first.items()):
        _sync_uid(tsdb, kind, uid, base_s, report)
    for tsuid, base_s in sorted(first.items()):
        _sync_series(tsdb, tsuid, base_s, report)
    return report


def _sync_uid(tsdb: TSDB, kind: str, uid: bytes, base_s: int, report: SyncReport) -> None:
    try:
        meta = load_uid_meta(tsdb, kind, uid)
    except NoSuchUniqueId:
        report.bad_uids += 1  # a series with a UID that has no name: left alone
        return
    if meta.created == 0 or meta.created > base_s + 3600:
        tsdb.uid_table().put(uid, {uid_meta_column(kind):
                                   replace(meta, created=base_s).storage_json()})
        report.uid_metas_written += 1


def _sync_series(tsdb: TSDB, tsuid: bytes, base_s: int, report: SyncReport) -> None:
    table = tsdb.meta_table()
    cells = table.row(tsuid, [TS_META_COLUMN, TS_COUNTER_COLUMN])
    raw = cells.get(TS_META_COLUMN)
    if not raw:
        if TS_COUNTER_COLUMN not in cells:
            table.put(tsuid, {TS_COUNTER_COLUMN: counter_bytes(1)})
        meta = TSMeta(tsuid=tsuid.hex().upper(), created=base_s)
        table.put(tsuid, {TS_META_COLUMN: meta.storage_json()})
        report.ts_metas_created += 1
        tsdb.new_ts_meta(tsuid)  # through the trees, when tsd.core.tree.enable_processing
        return
    stored = ts_meta_from_storage(raw, tsuid.hex().upper())
    if stored.created == 0 or stored.created > base_s + 3600:
        table.put(tsuid, {TS_META_COLUMN: replace(stored, created=base_s).storage_json()})
        report.ts_metas_updated += 1


def metapurge(tsdb: TSDB) -> tuple[int, int]:
    """Delete every meta cell; return (meta table cells, UID table cells) deleted."""
    meta_cells = 0
    meta_table = tsdb.meta_table()
    for tsuid, cells in meta_table.scan(columns=[TS_META_COLUMN, TS_COUNTER_COLUMN]):
        meta_table.delete(tsuid, list(cells))
        meta_cells += len(cells)
    uid_cells = 0
    uid_table = tsdb.uid_table()
    columns = [uid_meta_column(kind) for kind in KINDS]
    for uid, cells in uid_table.scan(columns=columns):
        uid_table.delete(uid, list(cells))
        uid_cells += len(cells)
    return meta_cells, uid_cells


def delete_uid(tsdb: TSDB, kind: str, name: str) -> bytes:
    """``UniqueId.deleteAsync``: forward, reverse and UIDMeta cells go; data is untouched."""
    uids = tsdb.uids[kind]
    uid = uids.get_id(name)
    table = tsdb.uid_table()
    table.delete(name.encode("utf-8"), [b"id:" + kind.encode()])
    table.delete(uid, [b"name:" + kind.encode(), uid_meta_column(kind)])
    uids.drop_caches()
    return uid

