"""UIDMeta stored as a UID is assigned (``tsd.core.meta.enable_realtime_uid``).

``UniqueIdAllocator`` does ``new UIDMeta(type, uid, name).storeNew(tsdb)`` once the forward
mapping is in place: created now, every user field empty. Imports nothing from ``app.tsdb``.
"""

from __future__ import annotations

import time

from app.meta.codec import UIDMeta, created_s, uid_meta_column
from app.storage.base import Table


def store_new_uid_meta(uid_table: Table, kind: str, uid: bytes, name: str) -> None:
    meta = UIDMeta(kind=kind, uid=uid.hex().upper(), name=name,
                   created=created_s(time.time_ns() // 1_000_000))
    uid_table.put(uid, {uid_meta_column(kind): meta.storage_json()})
