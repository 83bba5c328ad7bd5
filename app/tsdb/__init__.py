"""The TSDB facade: configuration, the storage backend and the UID maps of one process.

Like OpenTSDB's ``TSDB`` class it is what the API, the CLI and the background jobs share.
The store is opened lazily and again after a fork, so gunicorn workers never share sockets or
SQLite handles.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from urllib.parse import urlparse

from app.config import Config
from app.meta.tracking import TsuidTracker
from app.meta.uid_hooks import store_new_uid_meta
from app.storage import open_store
from app.storage.base import Store, Table
from app.storage.codec import RowKeyLayout
from app.storage.codec_histogram import HistogramCodecs, parse_codecs
from app.tsdb.background import StatLine
from app.tsdb.compaction import CompactionQueue
from app.tsdb.rollup_config import RollupConfig, load_rollup_config
from app.tsdb.schema import ensure_tables
from app.tsdb.uid import KINDS, UniqueId
from plugin.manager import PluginHost

log = logging.getLogger(__name__)


class TSDB:
    """Shared state of one process: config, store, row-key layout, UID caches."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.layout = RowKeyLayout(
            metric_width=config["tsd.storage.uid.width.metric"],
            tagk_width=config["tsd.storage.uid.width.tagk"],
            tagv_width=config["tsd.storage.uid.width.tagv"],
            salt_width=config["tsd.storage.salt.width"],
            salt_buckets=config["tsd.storage.salt.buckets"],
        )
        self.data_table_name: str = config["tsd.storage.hbase.data_table"]
        self.uid_table_name: str = config["tsd.storage.hbase.uid_table"]
        self.meta_table_name: str = config["tsd.storage.hbase.meta_table"]
        self.tree_table_name: str = config["tsd.storage.hbase.tree_table"]
        widths = {"metrics": self.layout.metric_width, "tagk": self.layout.tagk_width,
                  "tagv": self.layout.tagv_width}
        self.uids = {kind: UniqueId(self.uid_table, kind, widths[kind],
                                    config["tsd.uid.lru.name.size"], config["tsd.uid.lru.id.size"])
                     for kind in KINDS}
        # The plugins the settings enable (plugin/): loaded once per process.
        self.plugins = PluginHost(config)
        self.plugins.attach_uid_filter(self.uids.values())
        if config["tsd.core.meta.enable_realtime_uid"]:
            for uids in self.uids.values():
                uids.on_assigned = store_new_uid_meta
        # What runs a new TSMeta through the trees: set by app.meta.tree_builder's
        # attach_tree_processing (app.meta sits above app.tsdb); None: processing off.
        self.tree_processor: Callable[[bytes], object] | None = None
        # TSUID tracking of the rows written (tsd.core.meta.*; None when it is off).
        self.tsuid_tracker: TsuidTracker | None = None
        if config["tsd.core.meta.enable_tsuid_tracking"]:
            self.tsuid_tracker = TsuidTracker(
                self.meta_table, self.layout.salt_width, self.layout.metric_width,
                config["tsd.core.meta.enable_realtime_ts"],
                config["tsd.core.meta.enable_tsuid_incrementing"],
                config["tsd.core.meta.counter_flush_ms"],
                on_new_ts_meta=self.new_ts_meta if config["tsd.core.tree.enable_processing"]
                else None)
        # Rows written by this process, for background compaction (None when it is off).
        self.compaction_queue: CompactionQueue | None = None
        if config["tsd.storage.compaction.background"] and config["tsd.storage.enable_compaction"]:
            self.compaction_queue = CompactionQueue(self.data_table, self.layout)
        # What the fleet's background jobs of this process report in /api/stats (each job
        # started adds its reporter: app/tsdb/background.py).
        self.background_stats: list[Callable[[], list[StatLine]]] = []
        # OpenTSDB's rollup tables (None when tsd.rollups.enable is off): see app/tsdb/rollup*.
        self.rollup_config: RollupConfig | None = None
        if config["tsd.rollups.enable"]:
            self.rollup_config = load_rollup_config(config["tsd.rollups.config"])
        # Histogram codecs by id (tsd.core.histograms.config; empty: histograms off).
        self.histogram_codecs: HistogramCodecs = parse_codecs(
            config["tsd.core.histograms.config"])
        self._store: Store | None = None
        self.created_tables: list[str] = []  # by the embedded store setting itself up
        self._pid = 0
        self._lock = threading.Lock()

    @property
    def store(self) -> Store:
        if self._store is None or self._pid != os.getpid():
            with self._lock:
                if self._store is None or self._pid != os.getpid():
                    store = open_store(self.config)
                    self.created_tables = ensure_tables(store, self.config)
                    self._store, self._pid = store, os.getpid()
        return self._store

    def open_early(self) -> bool:
        """Open the embedded store now rather than at the first request (a server worker, or
        its split helper, before it reports ready): its modules imported, its tables checked
        or made, the data table's handle made. Whether it opened. HBase stays opened by the
        first request: a peer that may be down at boot must not hold a worker's start (and
        a store that cannot be opened is logged here, and met again by that request)."""
        if urlparse(self.config["tsd.storage"]).scheme != "sqlite":
            return False
        try:
            self.data_table()
        except Exception as exc:  # whatever it is, the first request meets it again
            log.warning("storage not opened at start (the first request will try again): %s",
                        exc)
            return False
        return True

    def data_table(self) -> Table:
        return self.store.table(self.data_table_name)

    def uid_table(self) -> Table:
        return self.store.table(self.uid_table_name)

    def new_ts_meta(self, tsuid: bytes) -> None:
        """A TSMeta was just stored: run it through the enabled trees
        (``tsd.core.tree.enable_processing``); a failure there never fails the write."""
        if self.tree_processor is None:
            return
        try:
            self.tree_processor(tsuid)
        except Exception:  # trees are derived data: log, keep writing
            log.warning("tree processing of %s failed", tsuid.hex().upper(), exc_info=True)

    def meta_table(self) -> Table:
        return self.store.table(self.meta_table_name)

    def tree_table(self) -> Table:
        return self.store.table(self.tree_table_name)

    def table(self, name: str) -> Table:
        """Any table by name (rollup and pre-aggregate tables)."""
        return self.store.table(name)

    @property
    def metrics(self) -> UniqueId:
        return self.uids["metrics"]

    @property
    def tagk(self) -> UniqueId:
        return self.uids["tagk"]

    @property
    def tagv(self) -> UniqueId:
        return self.uids["tagv"]

    def drop_caches(self) -> None:
        for uid in self.uids.values():
            uid.drop_caches()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
