"""Query benchmark: 1 metric x 1,000 series x 1 day at 10 s (8.64M points, compacted rows).

Queries go through the whole stack (Flask test client: parse, scan, decode, engine, JSON) on
the embedded store. Prints p50/p95 latency, raw points scanned per second and peak memory
per point scanned (split into what the query left allocated, the hour cache's kept entries, and
the transient rest), with the hour cache off, cold (emptied before each run: row stamps, every
row read and decoded, the closed rows and their range kept) and warm (one range stamp, the
range's series as kept). ``BENCH_QUERY_ONLY``: a query's name, or a substring of names.
"""

from __future__ import annotations

import os
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
from common import percentiles_ms, temp_storage_url
from flask.testing import FlaskClient

from app import create_app
from app.config import load_config
from app.server.split_helper import Helper, helper_for
from app.storage.codec_bulk import encode_series
from app.tsdb import TSDB
from app.tsdb.hour_cache import SETTLED_MS, cache_for
from app.tsdb.read.closed_ranges import RANGE_SETTLED_MS
from app.tsdb.schema import create_tables
from app.tsdb.writer import PointWriter

SERIES = 1000
STEP_S = 10
END_S = 1_700_006_400 - 1_700_006_400 % 86400
START_S = END_S - 86400
RUNS = 5


def load(tsdb: TSDB) -> int:
    writer = PointWriter(tsdb)
    ts = np.arange(START_S, END_S, STEP_S, dtype=np.int64)
    rng = np.random.default_rng(1)
    for number in range(SERIES):
        template = writer.row_template("bench.cpu", {"host": f"web{number:04d}",
                                                     "dc": f"dc{number % 4}"})
        values = np.round(rng.uniform(0, 100, ts.size), 2)
        cells = encode_series(ts, np.zeros(ts.size, np.int64), values,
                              np.ones(ts.size, bool))
        assert cells is not None
        writer.store_cells([(writer.row_for(template, base), q, v) for base, q, v in cells])
    return SERIES * ts.size


QUERIES = [
    ("sum:1m-avg:bench.cpu", "sum:1m-avg:bench.cpu", None),
    ("sum:1m-avg:bench.cpu{host=*}", "sum:1m-avg:bench.cpu{host=*}", None),
    ("sum:rate:bench.cpu{host=web0001}", "sum:rate:bench.cpu{host=web0001}", None),
    ("none:bench.cpu{host=web000*} (24h, 10 series)", "none:bench.cpu{host=web000*}", None),
]


def main(config: dict[str, object] | None = None) -> None:
    """Load the data set into ``config``'s store (default: a fresh embedded one), query it."""
    # BENCH_QUERY_DB=path: load the data set into that store once, reuse it on later runs.
    reuse = os.environ.get("BENCH_QUERY_DB")
    storage = f"sqlite:///{reuse}" if reuse else temp_storage_url()
    config = config or {"tsd.storage": storage, "tsd.core.auto_create_metrics": True}
    tsdb = TSDB(load_config(config, {}))
    create_tables(tsdb.store, tsdb.config)
    if not (reuse and os.path.exists(reuse + ".loaded")):
        started = time.perf_counter()
        total = load(tsdb)
        print(f"loaded {total:,} points ({SERIES} series, compacted) in "
              f"{time.perf_counter() - started:.1f}s")
        if reuse:
            open(reuse + ".loaded", "w").close()
    app = create_app(config)
    client = app.test_client()
    cache = cache_for(app.extensions["tsdb"])
    assert cache is not None
    off_app = create_app({**config, "tsd.query.cache.max_bytes": 0})
    off = off_app.test_client()
    # The same cold read in one process (the split left out), for a same-run ratio.
    alone_app = create_app({**config, "tsd.query.split.enable": False})
    alone, alone_cache = alone_app.test_client(), cache_for(alone_app.extensions["tsdb"])
    assert alone_cache is not None
    helpers = [helper_for(a.extensions["tsdb"]) for a in (app, off_app)]
    for helper in helpers:  # as a server worker does when it boots
        helper.prepare()
        assert helper.wait_ready(60), "the split helper did not start"
    # The rows just written settle (the cache may keep them), and so does their range.
    time.sleep(max(SETTLED_MS, RANGE_SETTLED_MS) / 1000)
    # A query's name, or a substring of the names of the queries to run.
    only = os.environ.get("BENCH_QUERY_ONLY")
    exact = any(only == name for name, _, _ in QUERIES)
    for name, m, _ in QUERIES:
        if only and (only != name if exact else only not in name):
            continue
        url = f"/api/query?start={START_S}&end={END_S - 1}&m={m}"
        client.get(url)  # warm the UID caches
        off.get(url)
        alone.get(url)
        run_query(off, url, f"{name} [cache off]", None)
        run_query(alone, url, f"{name} [cold, one process]", alone_cache.clear)
        run_query(client, url, f"{name} [cold]", cache.clear, helpers[0])
        run_query(client, url, f"{name} [warm]", None)


def run_query(client: FlaskClient, url: str, name: str,
              before: Callable[[], None] | None, helper: Helper | None = None) -> None:
    """RUNS timed runs (``before`` each one: also the helper's cache when there is one), then
    one traced for peak memory (this process's; the helper's resident peak is printed)."""
    if helper is not None and before is not None:
        before = _with_helper_cleared(before, helper)
    samples, cpu, points = [], [], 0
    for _ in range(RUNS):
        if before is not None:
            before()
        begin, begin_cpu = time.perf_counter(), time.process_time()
        response = client.get(url + "&show_summary")
        samples.append(time.perf_counter() - begin)
        cpu.append(time.process_time() - begin_cpu)
        assert response.status_code == 200, response.get_data(as_text=True)[:300]
        points = response.get_json()[-1]["statsSummary"]["queryIdx_00"]["dpsRead"]
    if before is not None:
        before()
    tracemalloc.start()
    client.get(url)
    # What the query left allocated is what the hour cache kept of it (shared by later
    # queries, within its byte budget); the rest of the peak was transient.
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    best = min(samples)
    print(f"{name:56} {percentiles_ms(samples)}; {points:,} points read, "
          f"{points / best:,.0f} points/s (best run), {points / min(cpu):,.0f} per CPU s; "
          f"peak {peak / 2**20:.0f} MiB = {peak / max(points, 1):.1f} bytes/point "
          f"(kept {kept / max(points, 1):.1f}, transient {(peak - kept) / max(points, 1):.1f})"
          + ("" if helper is None else f"; split helper: {_resident(helper)}"))


def _with_helper_cleared(before: Callable[[], None], helper: Helper) -> Callable[[], None]:
    """``before``, and the helper's hour cache emptied too."""
    def both() -> None:
        before()
        assert helper.clear_cache()
    return both


def _resident(helper: Helper) -> str:
    """The helper's resident memory now, and at its peak since it started."""
    fields = dict(line.split(":", 1) for line in
                  Path(f"/proc/{helper.pid}/status").read_text().splitlines())
    return f"resident {fields['VmRSS'].strip()}, peak {fields['VmHWM'].strip()}"

if __name__ == "__main__":
    sys.exit(main())
