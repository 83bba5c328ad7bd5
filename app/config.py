"""Settings: OpenTSDB's key names, from an ``opentsdb.conf`` file and ``TSD_*`` variables.

Precedence, lowest first: the defaults below, the file named by ``TSD_CONFIG`` (OpenTSDB's
``key = value`` format), environment variables, then the mapping handed to ``create_app``.
The variable for a key is the key upper-cased with dots as underscores:
``tsd.core.auto_create_metrics`` is ``TSD_CORE_AUTO_CREATE_METRICS``.

``SETTINGS`` is the registry: it drives parsing, ``/api/config`` and ``docs/configuration.md``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.errors import TsdbError


def parse_bool(text: str) -> bool:
    """OpenTSDB's ``Config.getBoolean``: true/1/yes, case-insensitive; anything else is false."""
    return text.strip().lower() in ("true", "1", "yes")


@dataclass(frozen=True)
class Setting:
    default: Any
    parse: Callable[[str], Any]
    doc: str
    secret: bool = False


def _default_storage() -> str:
    return "sqlite:///" + str(Path("data/pytsd.db").resolve())


SETTINGS: dict[str, Setting] = {
    "tsd.storage": Setting(
        None, str,
        "Backend URL: `sqlite:///relative/path.db` (from the working directory) or "
        "`sqlite:////abs/path.db` (embedded, default `./data/pytsd.db`; tables made on first "
        "use), or `hbase://host:port` (HBase Thrift1 server; `pytsd create-tables` first).",
    ),
    "tsd.storage.hbase.data_table": Setting("tsdb", str, "Data table (points, annotations)."),
    "tsd.storage.hbase.uid_table": Setting("tsdb-uid", str, "UID table."),
    "tsd.storage.hbase.tree_table": Setting(
        "tsdb-tree", str, "Tree table: tree definitions, rules, branches and leaves "
        "(docs/meta.md)."
    ),
    "tsd.storage.hbase.meta_table": Setting(
        "tsdb-meta", str, "Meta table: TSMeta objects and `ts_ctr` counters (docs/meta.md)."
    ),
    "tsd.storage.hbase.table_prefix": Setting(
        "", str, "pytsd: prefix (or `namespace:`) put before every table name on HBase."
    ),
    "tsd.storage.hbase.timeout_ms": Setting(
        10000, int, "pytsd: HBase Thrift socket timeout in milliseconds."
    ),
    "tsd.storage.hbase.pool_size": Setting(4, int, "pytsd: Thrift connections per process."),
    "tsd.storage.hbase.writers": Setting(
        4, int,
        "pytsd: write calls in flight per process, on Thrift connections of their own (beside "
        "`pool_size`). Concurrent writes (puts, appends) are merged into few large calls and "
        "each is answered once HBase has its cells; 0 writes each caller's cells directly.",
    ),
    "tsd.storage.hbase.write_linger_ms": Setting(
        1.0, float,
        ("pytsd: how long a batched write through Thrift waits for others to join it "
         "(milliseconds); native writes never wait (docs/hbase.md)."),
    ),
    "tsd.storage.hbase.scan_filters": Setting(
        True, parse_bool,
        "pytsd: narrow data scans with tag filters on the region servers (a row-key regexp, "
        "as OpenTSDB's scans do), so rows of series the filters exclude are not sent "
        "through the Thrift gateway. The answers are the same either way.",
    ),
    "tsd.storage.hbase.scan_rpc": Setting(
        "auto", lambda text: _choice(text, ("AUTO", "THRIFT", "NATIVE")).lower(),
        "pytsd: how data-table scans read HBase: `native` (HBase's own RPC to the region "
        "servers, found through ZooKeeper: `tsd.storage.hbase.zk_quorum`; cells come back as "
        "cell blocks, not a Thrift object each; a failure is a 503), `thrift` (through the "
        "Thrift1 gateway), or `auto`: native when each process's first scan finds ZooKeeper, "
        "`hbase:meta` and the region servers reachable, else Thrift (a warning in the log, "
        "tried again every `tsd.storage.hbase.scan_rpc_probe_s`); `/api/stats` shows the "
        "choice (`tsd.storage.hbase.native_scans`). Writes: `tsd.storage.hbase.write_rpc`; other "
        "tables stay on Thrift.",
    ),
    "tsd.storage.hbase.scan_rpc_probe_s": Setting(
        300.0, float,
        "pytsd: with `tsd.storage.hbase.scan_rpc=auto` on Thrift, seconds between tries of "
        "the native RPC (in the background: no query waits for them).",
    ),
    "tsd.storage.hbase.write_rpc": Setting(
        "auto", lambda text: _choice(text, ("AUTO", "THRIFT", "NATIVE")).lower(),
        "pytsd: how puts and appends reach HBase: `native` (one `Multi` call per region "
        "server, the cells as a cell block; the region servers found through ZooKeeper: "
        "`tsd.storage.hbase.zk_quorum`; a failure is a 503), `thrift` (through the Thrift1 "
        "gateway), or `auto`: native when each process's first write finds ZooKeeper, "
        "`hbase:meta` and the region servers reachable, else Thrift (probed as for "
        "`tsd.storage.hbase.scan_rpc`); a native write that cannot reach HBase is finished "
        "through Thrift (puts not known written, appends never sent). `/api/stats`: "
        "`tsd.storage.hbase.native_writes`. Deletes, gets and the UID calls stay on Thrift.",
    ),
    "tsd.storage.hbase.zk_quorum": Setting(
        "localhost", str,
        "ZooKeeper quorum of the HBase cluster (`host[:port]`, comma separated; port 2181 "
        "unless given). pytsd reads it for native scans (`tsd.storage.hbase.scan_rpc`) and "
        "native writes (`tsd.storage.hbase.write_rpc`), "
        "from the first server that answers.",
    ),
    "tsd.storage.hbase.zk_basedir": Setting(
        "/hbase", str, "HBase's znode in ZooKeeper (`zookeeper.znode.parent`).",
    ),
    "tsd.storage.hbase.compression": Setting(
        "GZ", lambda text: _compression(text),
        "pytsd: COMPRESSION of the column families `pytsd create-tables` makes "
        "(`create_table.sh`'s `COMPRESSION`): `GZ` (works on every HBase, no native "
        "libraries), `SNAPPY`, `LZ4`, `ZSTD`, `LZO`, `BZIP2`, `NONE`; HBase refuses a codec it "
        "cannot load. Existing tables keep theirs.",
    ),
    "tsd.storage.hbase.bloom_filter": Setting(
        "ROW", lambda text: _choice(text, ("ROW", "ROWCOL", "NONE")),
        "pytsd: BLOOMFILTER of the column families `pytsd create-tables` makes "
        "(`create_table.sh`'s `BLOOMFILTER`).",
    ),
    "tsd.storage.hbase.data_ttl_s": Setting(
        0, int,
        "pytsd: TTL in seconds of the data table's family that `pytsd create-tables` makes "
        "(`create_table.sh`'s `TSDB_TTL`); HBase drops older cells at compaction. 0: forever.",
    ),
    "tsd.storage.sqlite.synchronous": Setting(
        "FULL", lambda text: _choice(text, ("FULL", "NORMAL")),
        "pytsd: embedded store durability. `FULL` syncs every write to disk before it is "
        "acknowledged (survives power loss); `NORMAL` survives a crash of pytsd but not of "
        "the machine, and writes several times faster.",
    ),
    "tsd.storage.sqlite.pack_cells": Setting(
        True, parse_bool,
        "pytsd: keep compacted hour columns packed in the embedded store (values deflated as "
        "decimal integers or byte planes, qualifiers as a short key): ~7 bytes a point "
        "instead of ~17 for the hour as written, ~3.7 instead of ~16 once compacted, read "
        "back byte for byte. Costs CPU where cells are read (the open hour: ~1.5x its read "
        "where its columns are new to the process, ~1x after; a closed hour's first read, "
        "which keeps its hour column) and written (~4 µs a "
        "point at the merge). Cells already stored keep their form either way.",
    ),
    "tsd.storage.sqlite.one_copy": Setting(
        True, parse_bool,
        "pytsd: a closed hour whose hour column is kept keeps its values there only: its "
        "cells keep their keys and are given their values from it, byte for byte "
        "(docs/performance.md, \"One copy of a closed hour's values\"). The server's "
        "background work strips the kept hours (one process of the fleet, under a lease), "
        "never a query. ~3.1 instead of ~6 bytes a point at steady state. Hours stripped so "
        "stay so when it is turned off; an older pytsd cannot read them.",
    ),
    "tsd.storage.sqlite.one_copy.interval_s": Setting(
        60, int,
        "pytsd: seconds between the background passes that strip the kept hours' cells "
        "(`tsd.storage.sqlite.one_copy`); the pass's lease lasts three intervals.",
    ),
    "tsd.storage.salt.width": Setting(0, int, "Salt bytes in front of each row key (0 = off)."),
    "tsd.storage.salt.buckets": Setting(20, int, "Number of salt buckets."),
    "tsd.storage.uid.width.metric": Setting(3, int, "Metric UID width in bytes."),
    "tsd.storage.uid.width.tagk": Setting(3, int, "Tag key UID width in bytes."),
    "tsd.storage.uid.width.tagv": Setting(3, int, "Tag value UID width in bytes."),
    "tsd.storage.max_tags": Setting(8, int, "Most tags a data point may carry."),
    "tsd.storage.enable_appends": Setting(
        False, parse_bool, "Write points as appends to one column per hour row (`0x050000`)."
    ),
    "tsd.storage.enable_compaction": Setting(
        True, parse_bool, "Allow compaction of hour rows into one column."
    ),
    "tsd.storage.compaction.background": Setting(
        False, parse_bool, "pytsd: compact finished hours in a background thread of the server."
    ),
    "tsd.storage.compaction.interval_s": Setting(
        600, int, "pytsd: seconds between background compaction passes."
    ),
    "tsd.storage.compaction.sweep": Setting(
        True, parse_bool,
        "pytsd: with background compaction on, also sweep closed hours for rows no live "
        "writer compacted (a dead node's), one process of the fleet at a time under a lease "
        "in storage (docs/fleet.md).",
    ),
    "tsd.storage.compaction.sweep.interval_s": Setting(
        300, int,
        "pytsd: seconds between compaction sweep passes; the sweep's lease lasts three "
        "intervals, so a dead holder is replaced within that.",
    ),
    "tsd.storage.compaction.sweep.grace_s": Setting(
        1200, int,
        "pytsd: seconds after an hour ends before the sweep compacts it (the writers' own "
        "queues go first).",
    ),
    "tsd.storage.compaction.sweep.rows_per_pass": Setting(
        200_000, int,
        "pytsd: most rows one sweep pass scans (key-only): the sweep's rate is this per "
        "`interval_s`.",
    ),
    "tsd.core.auto_create_metrics": Setting(
        False, parse_bool, "Assign UIDs to unknown metrics on put (else 'Unknown metric')."
    ),
    "tsd.core.auto_create_tagks": Setting(True, parse_bool, "Assign UIDs to unknown tag keys."),
    "tsd.core.auto_create_tagvs": Setting(True, parse_bool, "Assign UIDs to unknown tag values."),
    "tsd.core.meta.enable_tsuid_tracking": Setting(
        False, parse_bool,
        "Record each series written in `tsdb-meta` (a `ts_ctr` cell; pytsd: once per series, "
        "process and hour). Needed by the other `tsd.core.meta` switches.",
    ),
    "tsd.core.meta.enable_realtime_ts": Setting(
        False, parse_bool,
        "With tracking: store a TSMeta object for each new series as it is first written.",
    ),
    "tsd.core.meta.enable_tsuid_incrementing": Setting(
        False, parse_bool,
        "With tracking and `enable_realtime_ts`: count the points of each series in `ts_ctr` "
        "(pytsd: added up in memory, see `tsd.core.meta.counter_flush_ms`).",
    ),
    "tsd.core.meta.counter_flush_ms": Setting(
        1000, int,
        "pytsd: with `enable_tsuid_incrementing`, how often (ms) each process adds the points "
        "it wrote to the series' `ts_ctr` counters, one increment per series (0: every write). "
        "Counts not yet added are lost if the process dies.",
    ),
    "tsd.core.tree.enable_processing": Setting(
        False, parse_bool,
        "Run each new TSMeta through the enabled trees as it is stored (tracking with "
        "`enable_realtime_ts`, `/api/uid/tsmeta` with `create=true`, `pytsd uid metasync`).",
    ),
    "tsd.core.meta.enable_realtime_uid": Setting(
        False, parse_bool, "Store a UIDMeta object for each UID as it is assigned.",
    ),
    "tsd.core.tag.allow_specialchars": Setting(
        "", str, "Extra characters allowed in metric and tag names."
    ),
    "tsd.core.timezone": Setting("UTC", str, "Timezone for absolute dates in queries."),
    "tsd.mode": Setting("rw", str, "`rw`, `ro` (no writes) or `wo` (no reads)."),
    "tsd.network.bind": Setting("127.0.0.1", str, "Address `pytsd serve` binds to."),
    "tsd.network.port": Setting(4242, int, "Port `pytsd serve` listens on."),
    "tsd.network.worker_threads": Setting(2, int, "Gunicorn workers for `pytsd serve`."),
    "tsd.http.show_stack_trace": Setting(
        False, parse_bool,
        "Add a `trace` to error bodies. OpenTSDB defaults to true; pytsd to false (no leaks).",
    ),
    "tsd.http.request.enable_cors": Setting(False, parse_bool, "Answer CORS requests."),
    "tsd.http.request.cors_domains": Setting(
        "", str, "Comma-separated allowed origins, or `*`."
    ),
    "tsd.http.request.cors_headers": Setting(
        "Authorization, Content-Type, Accept, Origin, User-Agent, DNT, Cache-Control, "
        "X-Mx-ReqToken, Keep-Alive, X-Requested-With, If-Modified-Since",
        str, "Headers allowed in CORS requests.",
    ),
    "tsd.http.request.cors_credentials": Setting(
        True, parse_bool,
        "pytsd: send `Access-Control-Allow-Credentials: true` to allowed origins (Grafana's "
        "browser access with basic auth or cookies).",
    ),
    "tsd.query.timeout": Setting(
        60_000, int,
        "Query timeout in milliseconds (0 = none), checked inside the read and the engine; "
        "answered 408. OpenTSDB's default is 0; pytsd's stays under gunicorn's worker timeout.",
    ),
    "tsd.query.limits.data_points.default": Setting(
        10_000_000, int,
        "Most data points one sub-query may read (0 = no limit), checked per decoded chunk; "
        "answered 413. OpenTSDB's default is 0; pytsd's lets a whole day of 1,000 series at "
        "10 s (8.64M points) through.",
    ),
    "tsd.query.limits.bytes.default": Setting(
        128 << 20, int,
        "Most bytes one sub-query may read from storage, each cell weighing its row key, "
        "column and value (0 = no limit), checked every 256 rows; answered 413. OpenTSDB's "
        "default is 0; pytsd's lets a day of 1,000 series at 10 s in compacted rows (82 MiB) "
        "through and keeps uncompacted reads under a worker's 1 GB.",
    ),
    "tsd.query.limits.emitted_points": Setting(
        5_000_000, int,
        "pytsd: most data points one sub-query may emit (0 = no limit); answered 413. A "
        "filling downsampler (`-nan`, `-null`, `-zero`) emits buckets x series: refused "
        "before the read. Other output is checked before serialising, which also bounds the "
        "JSON (5M points: about 100 MB of JSON and under 1 GB of worker memory).",
    ),
    "tsd.query.limits.pattern_chars": Setting(
        1024, int,
        "pytsd: longest `wildcard` or `regexp` filter pattern, in characters (0 = no "
        "bound); answered 400 before any read.",
    ),
    "tsd.query.limits.regexp_program_size": Setting(
        2000, int,
        "pytsd: largest RE2 program a `regexp` filter may compile to (0 = no bound; RE2's "
        "search time grows with it, and RE2 itself refuses programs over 8 MiB); answered "
        "400 before any read.",
    ),
    "tsd.query.limits.expression_chars": Setting(
        4096, int,
        "pytsd: longest `/api/query/exp` expression, in characters (0 = no bound); answered "
        "400 before it is parsed.",
    ),
    "tsd.query.limits.expression_nodes": Setting(
        10_000, int,
        "pytsd: most nodes (operators, variables, numbers) in all the expressions of one "
        "`/api/query/exp` request (0 = no bound); answered 400 before any read.",
    ),
    "tsd.query.limits.percentiles": Setting(
        100, int,
        "pytsd: most `percentiles` in one sub-query (0 = no bound); answered 400.",
    ),
    "tsd.query.limits.tsuids": Setting(
        10_000, int,
        "pytsd: most `tsuids` in one sub-query of `/api/query` or `/api/query/last` (0 = no "
        "bound); answered 400.",
    ),
    "tsd.http.request.max_inflated_bytes": Setting(
        64 << 20, int,
        "pytsd: largest size a gzip or deflate request body may inflate to, in bytes; "
        "inflation stops there and the request is answered 413.",
    ),
    "tsd.query.skip_unresolved_tagvs": Setting(
        False, parse_bool, "Drop unknown literal tag values from filters instead of a 400."
    ),
    "tsd.query.allow_delete": Setting(
        False, parse_bool,
        "Honour `\"delete\": true` in queries and `DELETE /api/query`: the matched data "
        "points in the range are deleted (admin role when authentication is on; never in "
        "`ro` mode).",
    ),
    "tsd.query.last.default_back_scan": Setting(
        24, int,
        "pytsd: hours `/api/query/last` scans back when `back_scan` is 0 or absent "
        "(OpenTSDB reads `tsdb-meta` then).",
    ),
    "tsd.query.last.max_back_scan": Setting(
        8760, int, "pytsd: largest `back_scan` (hours) `/api/query/last` accepts."
    ),
    "tsd.query.cache.max_bytes": Setting(
        256 << 20, int,
        "pytsd: bytes of decoded closed-hour rows each process keeps between queries (0 = "
        "off). Entries are checked against the row's cell count and newest write time in "
        "storage on every read, so writes by other processes invalidate them; see "
        "docs/cache.md.",
    ),
    "tsd.query.split.enable": Setting(
        True, parse_bool,
        "pytsd: read half the hours of a large downsampled query in a helper process (one per "
        "worker, with its own store connection and hour cache) while a second core is idle; "
        "see docs/serving.md.",
    ),
    "tsd.query.split.min_points": Setting(
        1_000_000, int,
        "pytsd: raw points a query must have read the last time it ran (same metric and "
        "filters, scaled to its hours) before it is split over two processes; a query the "
        "process has not run yet is split (0: split every downsampled query of two hours or "
        "more).",
    ),
    "tsd.search.lookup.default_limit": Setting(
        25, int, "pytsd: series `/api/search/lookup` returns when `limit` is 0 or absent."
    ),
    "tsd.search.lookup.default_window": Setting(
        "", str,
        "pytsd: when set (e.g. `7d`), `/api/search/lookup` without `start` scans only that far "
        "back; empty scans the metric's whole history, as OpenTSDB does.",
    ),
    "tsd.core.max_name_bytes": Setting(
        1024, int,
        "pytsd: longest metric, tag key or tag value name (UTF-8 bytes) a write may assign "
        "a UID to; longer ones are refused per point with a 400. OpenTSDB has no limit.",
    ),
    "tsd.uid.lru.name.size": Setting(
        1_000_000, int,
        "Most name-to-UID entries each UID kind caches per process (emptied when full). "
        "pytsd always bounds its caches; OpenTSDB only with `tsd.uid.lru.enable`.",
    ),
    "tsd.uid.lru.id.size": Setting(
        1_000_000, int, "Most UID-to-name entries each UID kind caches per process."
    ),
    # The serving model (app/server/, docs/serving.md).
    "tsd.core.socket.timeout": Setting(
        300, int,
        "Seconds a line-protocol connection may stay idle before it is closed (0 = never). "
        "OpenTSDB's default is 0; pytsd's is 300 so silent connections cannot pile up.",
    ),
    "tsd.server.first_byte_timeout_s": Setting(
        5.0, float,
        "pytsd: seconds a new connection may take to send its first byte, whatever the idle "
        "timeout of established line-protocol connections (`tsd.core.socket.timeout`).",
    ),
    "tsd.core.connections.per_ip_limit": Setting(
        0, int,
        "pytsd: open connections from one client address to the whole server, all its "
        "workers together, counted from accept to close whether or not they have sent a byte "
        "(0 = no limit); beyond it a new connection is answered 503 (line protocol: `error: "
        "too many connections from this address`) and closed. Addresses are counted in "
        "16,384 hashed buckets: two addresses sharing one share a count, which only makes "
        "the cap stricter for them.",
    ),
    "tsd.core.connections.limit": Setting(
        1000, int,
        "Open connections per worker process that have sent a byte (0 = no limit); beyond it a "
        "new connection is answered 503 and closed. OpenTSDB counts per TSD and defaults to 0.",
    ),
    "tsd.http.request.max_body_bytes": Setting(
        32 * 1024 * 1024, int,
        "pytsd: largest raw HTTP request body, in bytes, as sent (413 beyond, answered before "
        "the body is read when `Content-Length` announces it).",
    ),
    "tsd.http.request.max_line_bytes": Setting(
        8192, int, "pytsd: longest HTTP request line (method, URL, version), 414 beyond."
    ),
    "tsd.http.request.max_header_bytes": Setting(
        16384, int, "pytsd: most bytes of HTTP request headers, 431 beyond."
    ),
    "tsd.http.request.head_timeout_s": Setting(
        10.0, float,
        "pytsd: seconds from a request's first byte until its head (request line and headers) "
        "must be complete, 408 beyond.",
    ),
    "tsd.http.request.body_timeout_s": Setting(
        60.0, float,
        "pytsd: seconds to receive a request body once its head is in (408 beyond); also the "
        "most a client may take to read a response.",
    ),
    "tsd.http.keepalive_timeout_s": Setting(
        15.0, float, "pytsd: seconds an idle HTTP keep-alive connection is kept open."
    ),
    "tsd.server.threads": Setting(
        4, int,
        "pytsd: threads per worker running ordinary HTTP requests, and as many again running "
        "line-protocol commands.",
    ),
    "tsd.server.heavy_threads": Setting(
        1, int,
        "pytsd: queries per worker that run at once in the cheap lane (`/api/query...`, `/q`; "
        "`/api/search...` too). One keeps light requests quick while a query holds the GIL; "
        "raise it when queries mostly wait on HBase. Expensive queries have their own lane.",
    ),
    "tsd.query.expensive_threads": Setting(
        1, int,
        "pytsd: queries per worker that run at once in the expensive lane (cost-aware "
        "admission, docs/serving.md); the cheap lane has `tsd.server.heavy_threads`.",
    ),
    "tsd.query.expensive_points": Setting(
        1_000_000, int,
        "pytsd: a query estimated to read at least this many data points runs in the "
        "expensive lane (the estimate: what the same shape read last time).",
    ),
    "tsd.query.max_queue_ms": Setting(
        5000, int,
        "pytsd: most milliseconds a query waits for a slot in its lane; then 503 with "
        "`Retry-After`.",
    ),
    "tsd.query.quota.user": Setting(
        0, int, "pytsd: queries one authenticated user may run at once per worker (0 = no quota)."
    ),
    "tsd.query.quota.dashboard": Setting(
        0, int,
        "pytsd: queries one Grafana dashboard (its `X-Dashboard-Uid`) may run at once per "
        "worker (0 = no quota).",
    ),
    "tsd.query.slow_log_ms": Setting(
        5000, int,
        "pytsd: a query that runs at least this many milliseconds is logged with its "
        "dashboard, panel, user and cost (0 = off).",
    ),
    "tsd.stats.self_interval_s": Setting(
        0.0, float,
        "pytsd: write the server's own `/api/stats` figures into itself every this many "
        "seconds (0 = off), for the provisioned \"pytsd itself\" Grafana dashboard.",
    ),
    "tsd.network.telnet_port": Setting(
        0, int,
        "pytsd: a second port that speaks only the line protocol (0 = none). The main port "
        "serves both HTTP and the line protocol, told apart by the first byte.",
    ),
    "tsd.server.max_buffered_bytes": Setting(
        256 * 1024 * 1024, int,
        "pytsd: bytes of HTTP request bodies one worker holds at once (being received or "
        "waiting for the app); a request that would pass it is answered 503.",
    ),
    "tsd.server.queue_limit": Setting(
        256, int,
        "pytsd: HTTP requests per worker waiting for a thread; beyond it the answer is 503.",
    ),
    "tsd.ui.grafana_url": Setting(
        "", str,
        "pytsd: Grafana's base URL (e.g. `http://localhost:3000`); when set, the home page and "
        "the annotation manager link to the same range and series in Grafana's Explore.",
    ),
    "tsd.rollups.enable": Setting(
        False, parse_bool, "Read and write rollup and pre-aggregate tables (`tsd.rollups.config`)."
    ),
    "tsd.rollups.config": Setting(
        "", str, "Rollup intervals and aggregator IDs: JSON, or the path of a `.json` file."
    ),
    "tsd.core.histograms.config": Setting(
        "", str, "Histogram codecs: JSON map of codec class to ID (0-255), or a `.json` path; "
        "empty disables `/api/histogram`. The built-in one is "
        "`net.opentsdb.core.SimpleHistogramDecoder`."
    ),
    "tsd.rollups.tag_raw": Setting(
        False, parse_bool, "Tag rollups of raw series with `agg_tag_key=raw_agg_tag_value`."
    ),
    "tsd.rollups.agg_tag_key": Setting("_aggregate", str, "Tag key naming a pre-aggregate."),
    "tsd.rollups.raw_agg_tag_value": Setting("RAW", str, "`agg_tag_key` value of raw series."),
    "tsd.rollups.block_derived": Setting(
        True, parse_bool, "Refuse `avg` and `dev` rollups and pre-aggregates (derivable)."
    ),
    "tsd.rollups.compute.lag_s": Setting(
        600, int,
        "pytsd: seconds after an hour ends before pytsd rolls it up and queries read its "
        "rollups instead of raw data (late points inside this lag still count).",
    ),
    "tsd.rollups.compute.background": Setting(
        False, parse_bool,
        "pytsd: roll up closed hours in a background thread of the server (else only "
        "`pytsd rollup` does).",
    ),
    "tsd.rollups.compute.interval_s": Setting(
        300, int, "pytsd: seconds between background rollup passes."
    ),
    "tsd.rollups.compute.hours_per_pass": Setting(
        24, int,
        "pytsd: hours one background rollup pass rolls at most (new, changed and past hours "
        "together): the backfill's rate.",
    ),
    "tsd.rollups.compute.verify_s": Setting(
        21600, int,
        "pytsd: each background pass compares the raw stamps of the rolled hours this many "
        "seconds before the horizon with those recorded when they were rolled, to find writes "
        "pytsd did not make (a Java TSD); `0` turns it off.",
    ),
    "tsd.rollups.compute.backfill_max_s": Setting(
        0, int,
        "pytsd: the background pass rolls past hours back to the oldest raw hour, or at most "
        "this many seconds before the horizon (`0`: no limit).",
    ),
    "tsd.http.query.allow_delete": Setting(
        False, parse_bool,
        "OpenTSDB 2.4's name for `tsd.query.allow_delete` (`DELETE /api/query`); either "
        "one enables deleting.",
    ),
    "tsd.core.plugin_path": Setting(
        "", str,
        "Comma-separated folders searched for plugins: put on `sys.path`, and packages "
        "installed there (`pip install --target`) are found by their `pytsd.plugins` entry "
        "points. See plugin/README.md.",
    ),
    "tsd.core.authentication.enable": Setting(
        False, parse_bool, "Require credentials on every HTTP request and telnet connection."
    ),
    "tsd.core.authentication.plugin": Setting(
        "auth", str, "The authentication plugin (`auth`: tokens and basic auth from a file)."
    ),
    "tsd.core.authentication.file": Setting(
        "data/auth.json", str,
        "pytsd: the credentials file of the `auth` plugin (hashed; managed with `pytsd auth`)."
    ),
    "tsd.uidfilter.enable": Setting(False, parse_bool, "Ask the UID filter before assigning."),
    "tsd.uidfilter.plugin": Setting(
        "uidfilter", str, "The UID filter plugin (`uidfilter`: regex lists and a series limit)."
    ),
    "tsd.uidfilter.whitelist.delimiter": Setting(
        ",", str, "Separator of the patterns in the whitelist and blacklist settings."
    ),
    "tsd.uidfilter.whitelist.metric_patterns": Setting(
        "", str, "Regexes a new metric name must all match (searched, not anchored)."
    ),
    "tsd.uidfilter.whitelist.tagk_patterns": Setting(
        "", str, "Regexes a new tag key must all match."
    ),
    "tsd.uidfilter.whitelist.tagv_patterns": Setting(
        "", str, "Regexes a new tag value must all match."
    ),
    "tsd.uidfilter.blacklist.metric_patterns": Setting(
        "", str, "pytsd: regexes no new metric name may match."
    ),
    "tsd.uidfilter.blacklist.tagk_patterns": Setting(
        "", str, "pytsd: regexes no new tag key may match."
    ),
    "tsd.uidfilter.blacklist.tagv_patterns": Setting(
        "", str, "pytsd: regexes no new tag value may match."
    ),
    "tsd.uidfilter.series_limit.per_hour": Setting(
        0, int,
        "pytsd: most new series (points needing a new UID) one metric may create per hour "
        "and worker; 0 = no limit.",
    ),
    "tsd.timeseriesfilter.enable": Setting(
        False, parse_bool, "Ask the write filter plugin about every data point."
    ),
    "tsd.timeseriesfilter.plugin": Setting("", str, "The write filter plugin(s)."),
    "tsd.rtpublisher.enable": Setting(
        False, parse_bool, "Publish every stored point and annotation."
    ),
    "tsd.rtpublisher.plugin": Setting(
        "", str, "The publisher plugin(s), comma-separated: `webhook`, `jsonl` or your own."
    ),
    "tsd.rtpublisher.webhook.url": Setting(
        "", str, "pytsd: `webhook` POSTs point batches here, as `/api/put` takes them."
    ),
    "tsd.rtpublisher.webhook.annotation_url": Setting(
        "", str,
        "pytsd: `webhook` POSTs annotations here, as `/api/annotation/bulk` takes them "
        "(empty: not published).",
    ),
    "tsd.rtpublisher.webhook.batch_size": Setting(500, int, "pytsd: most points per POST."),
    "tsd.rtpublisher.webhook.flush_interval_ms": Setting(
        1000, int, "pytsd: longest a queued point waits before it is sent."
    ),
    "tsd.rtpublisher.webhook.queue_size": Setting(
        100000, int, "pytsd: points queued per worker; beyond it new points are dropped "
        "(counted in `/api/stats`)."
    ),
    "tsd.rtpublisher.webhook.retries": Setting(
        3, int, "pytsd: retries of a failed POST (exponential backoff) before it is dropped."
    ),
    "tsd.rtpublisher.webhook.timeout_s": Setting(5.0, float, "pytsd: timeout of one POST."),
    "tsd.rtpublisher.jsonl.path": Setting(
        "", str, "pytsd: `jsonl` appends one JSON line per point and annotation to this file."
    ),
    "tsd.http.rpc.plugins": Setting(
        "", str, "HTTP RPC plugins, comma-separated: their endpoints are served under "
        "`/plugin/`."
    ),
    "tsd.storage.sqlite.page_size": Setting(
        16384, lambda text: int(_choice(str(text), ("1024", "2048", "4096", "8192", "16384",
                                                    "32768", "65536"))),
        "pytsd: page size in bytes of a new embedded store (a power of two from 1024 to "
        "65536); an existing store keeps the page size it was created with.",
    ),
}


def _choice(text: str, allowed: tuple[str, ...]) -> str:
    value = text.strip().upper()
    if value not in allowed:
        raise ValueError(f"expected one of {', '.join(allowed)}")
    return value


def _compression(text: str) -> str:
    # create_table.sh accepts GZIP; HBase's algorithm is named GZ.
    value = _choice(text.replace("GZIP", "GZ").replace("gzip", "GZ"),
                    ("GZ", "SNAPPY", "LZ4", "ZSTD", "LZO", "BZIP2", "NONE"))
    return value


def env_name(key: str) -> str:
    """``tsd.core.auto_create_metrics`` -> ``TSD_CORE_AUTO_CREATE_METRICS``."""
    return key.upper().replace(".", "_")


def read_conf_file(path: str | Path) -> dict[str, str]:
    """Parse an OpenTSDB ``opentsdb.conf``: ``key = value`` lines, ``#`` comments."""
    values: dict[str, str] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


class Config(Mapping[str, Any]):
    """Effective settings: typed values for known keys, strings for unknown ones."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = dict(values)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def masked(self) -> dict[str, str]:
        """All settings as strings, secrets replaced, for ``/api/config``."""
        out = {}
        for key, value in sorted(self._values.items()):
            secret = key in SETTINGS and SETTINGS[key].secret or is_secret_key(key)
            out[key] = MASK if secret else mask_url_credentials(_to_text(value))
        return out


MASK = "********"
SECRET_WORDS = ("pass", "token", "secret", "credential")
URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")


def is_secret_key(key: str) -> bool:
    """A key that names a secret. OpenTSDB masks only keys containing "PASS"
    (``HttpJsonSerializer#formatConfigV1``); pytsd also masks tokens, secrets, credentials
    and keys (a word ending in ``key``: ``api_key``, ``apikey``, ``private.key``)."""
    words = re.split(r"[._-]", key.lower())
    return any(w in word for word in words for w in SECRET_WORDS) or any(
        word.endswith("key") for word in words)


def mask_url_credentials(text: str) -> str:
    """``https://user:pw@host/x`` -> ``https://user:********@host/x`` (anywhere in text)."""

    def mask(match: re.Match[str]) -> str:
        user, sep, _ = match["userinfo"].partition(":")
        return match["scheme"] + (f"{user}:{MASK}" if sep else MASK) + "@"

    return URL_CREDENTIALS.sub(mask, text)


def _to_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "" if value is None else str(value)


def load_config(
    overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> Config:
    """Build the effective configuration (see module docstring for precedence)."""
    environ = os.environ if environ is None else environ
    raw: dict[str, Any] = {}
    conf_path = environ.get("TSD_CONFIG")
    if conf_path:
        raw.update(read_conf_file(conf_path))
    for key in SETTINGS:
        if env_name(key) in environ:
            raw[key] = environ[env_name(key)]
    raw.update(overrides or {})
    values = {key: setting.default for key, setting in SETTINGS.items()}
    for key, value in raw.items():
        values[key] = _parse(key, value)
    if not values["tsd.storage"]:
        values["tsd.storage"] = _default_storage()
    return Config(values)


def _parse(key: str, value: Any) -> Any:
    setting = SETTINGS.get(key)
    if setting is None or not isinstance(value, str):
        return value
    try:
        return setting.parse(value)
    except ValueError as exc:
        raise TsdbError(f"Invalid value for {key}: {value!r}", details=str(exc)) from exc
