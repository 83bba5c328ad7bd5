"""pytsd side by side with VictoriaMetrics: the same points, the equivalent queries, one run.

Optional (not CI): needs ``bench/.peer/victoria-metrics`` (``bench/build-victoriametrics.sh``
builds it from the Go module proxy). Both servers run on 127.0.0.1 only: pytsd under gunicorn
(1 worker) on a fresh embedded store, VictoriaMetrics on a fresh data directory with its
response cache off (``-search.disableCache``), so neither answers from a result cache.

Data: 1,000 series x 1 day at 10 s (8.64M points, ``bench_query.py``'s values); VM gets them
as OpenTSDB telnet ``put`` lines. For the 30-day query both hold the same hourly aggregates of
1,000 series (pytsd in its 1-hour rollup table, as OpenTSDB's rollup layout; VM as one point
per hour, its closest equivalent), since 30 days of raw 10 s points (259M) do not fit a
benchmark run here. Every figure is printed with its ratio (pytsd / VM); on a shared machine
the absolute numbers are noisy, the ratios less so (both run in the same minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import peer_ingest
import requests
from bench_ingest import prepare
from common import ROOT, free_port, gunicorn_server, pid_cpu_s

from app.config import env_name, load_config
from app.storage.codec_bulk import encode_series
from app.tsdb import TSDB
from app.tsdb.read.closed_ranges import RANGE_SETTLED_MS
from app.tsdb.rollups import compute_rollups
from app.tsdb.schema import create_tables
from app.tsdb.writer import PointWriter

VM = ROOT / "bench" / ".peer" / "victoria-metrics"
SERIES = 1000
STEP_S = 10
END_S = 1_700_006_400 - 1_700_006_400 % 86400
START_S = END_S - 86400
MONTH_START_S = END_S - 30 * 86400
RUNS = 9
METRIC, MONTHLY = "bench_cpu", "bench_cpu_hourly"
ROLLUPS = {"aggregationIds": {"sum": 0, "count": 1, "min": 2, "max": 3},
           "intervals": [
               {"table": "tsdb", "preAggregationTable": "tsdb-preagg", "interval": "1s",
                "rowSpan": "1h", "defaultInterval": True},
               {"table": "tsdb-rollup-1m", "preAggregationTable": "tsdb-rollup-agg-1m",
                "interval": "1m", "rowSpan": "1h"},
               {"table": "tsdb-rollup-1h", "preAggregationTable": "tsdb-rollup-agg-1h",
                "interval": "1h", "rowSpan": "1d"}]}


def day_series() -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    ts = np.arange(START_S, END_S, STEP_S, dtype=np.int64)
    rng = np.random.default_rng(1)
    for number in range(SERIES):
        yield f"web{number:04d}", ts, np.round(rng.uniform(0, 100, ts.size), 2)


def month_series() -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """Hourly aggregates (sum of 360 points, count 360) for 30 days."""
    ts = np.arange(MONTH_START_S, END_S, 3600, dtype=np.int64)
    rng = np.random.default_rng(2)
    for number in range(SERIES):
        yield f"web{number:04d}", ts, np.round(rng.uniform(0, 36000, ts.size), 2)


def load_pytsd(tsdb: TSDB) -> None:
    writer = PointWriter(tsdb)
    for host, ts, values in day_series():
        template = writer.row_template(METRIC, {"host": host, "dc": f"dc{int(host[3:]) % 4}"})
        cells = encode_series(ts, np.zeros(ts.size, np.int64), values, np.ones(ts.size, bool))
        assert cells is not None
        writer.store_cells([(writer.row_for(template, base), q, v) for base, q, v in cells])
    # The month: hourly rollup cells as an external job (or pytsd) writes them.
    from app.storage.codec_rollup import rollup_cell

    assert tsdb.rollup_config is not None
    hourly = tsdb.rollup_config.by_interval("1h")
    ids = tsdb.rollup_config.aggregation_ids
    table = tsdb.table(hourly.table)
    for host, ts, sums in month_series():
        template = writer.row_template(MONTHLY, {"host": host, "dc": f"dc{int(host[3:]) % 4}"})
        rows: dict[bytes, dict[bytes, bytes]] = {}
        for start_s, total in zip(ts.tolist(), sums.tolist()):
            base_s = start_s - start_s % 86400
            row = rows.setdefault(writer.row_for(template, base_s), {})
            for agg, value in (("sum", total), ("count", 360)):
                qualifier, raw = rollup_cell(start_s, base_s, value, ids[agg],
                                             hourly.interval_s, hourly.intervals)
                row[b"t:" + qualifier] = raw
        table.put_many(sorted(rows.items()))


@dataclass
class Peer:
    """A running VictoriaMetrics: its HTTP API, telnet and HTTP ``put`` ports, data folder."""

    url: str
    put_port: int
    http_put_port: int
    data: str
    process: subprocess.Popen[bytes]

    def cpu_s(self) -> float:
        return pid_cpu_s(self.process.pid)


@contextmanager
def victoria_metrics() -> Iterator[Peer]:
    data = tempfile.mkdtemp(prefix="vm-bench-")
    http_port, put_port, http_put_port = free_port(), free_port(), free_port()
    process = subprocess.Popen(
        [str(VM), f"-storageDataPath={data}", f"-httpListenAddr=127.0.0.1:{http_port}",
         f"-opentsdbListenAddr=127.0.0.1:{put_port}",
         f"-opentsdbHTTPListenAddr=127.0.0.1:{http_put_port}", "-retentionPeriod=100y",
         "-search.disableCache", "-loggerLevel=ERROR"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{http_port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                requests.get(url + "/health", timeout=5)
                break
            except requests.RequestException:
                time.sleep(0.2)
        yield Peer(url, put_port, http_put_port, data, process)
    finally:
        process.terminate()
        process.wait(timeout=30)


def load_vm(url: str, put_port: int) -> None:
    with socket.create_connection(("127.0.0.1", put_port)) as sock:
        for metric, series in ((METRIC, day_series()), (MONTHLY, month_series())):
            for host, ts, values in series:
                tags = f" host={host} dc=dc{int(host[3:]) % 4}\n"
                lines = [f"put {metric} {t} {v!r}{tags}"
                         for t, v in zip(ts.tolist(), values.tolist())]
                sock.sendall("".join(lines).encode())
    expected = SERIES * (86400 // STEP_S)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # telnet put is asynchronous: wait until searchable
        requests.get(url + "/internal/force_flush", timeout=60)
        found = vm_count(url)
        if found >= expected:
            return
        time.sleep(1)
    raise RuntimeError(f"VictoriaMetrics holds {vm_count(url)} of {expected} points")


def vm_count(url: str) -> int:
    response = requests.get(url + "/api/v1/query", params={
        "query": f'sum(count_over_time({{__name__="{METRIC}"}}[2d]))', "time": END_S,
        "nocache": 1}, timeout=120)
    result = response.json()["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def timed(calls: list[Callable[[], int]]) -> list[tuple[float, int]]:
    """Each call's median time and answer size over ``RUNS`` rounds. A round runs every call
    once, one after the other, so a burst of load on the shared machine lands on all of them
    alike rather than on whichever was being timed then."""
    for call in calls:
        call()  # warm: UID caches, page cache, VM's index caches
    samples: list[list[float]] = [[] for _ in calls]
    sizes = [0] * len(calls)
    for _ in range(RUNS):
        for i, call in enumerate(calls):
            begin = time.perf_counter()
            sizes[i] = call()
            samples[i].append(time.perf_counter() - begin)
    return [(float(np.median(times)), size) for times, size in zip(samples, sizes)]


def pytsd_query(url: str, m: str, start: int, end: int) -> Callable[[], int]:
    def call() -> int:
        response = requests.get(f"{url}/api/query", params={"start": start, "end": end,
                                                             "m": m}, timeout=600)
        response.raise_for_status()
        return sum(len(s["dps"]) for s in response.json())
    return call


def vm_query(url: str, query: str, start: int, end: int, step: str) -> Callable[[], int]:
    def call() -> int:
        response = requests.get(f"{url}/api/v1/query_range", params={
            "query": query, "start": start, "end": end, "step": step, "nocache": 1},
            timeout=600)
        response.raise_for_status()
        return sum(len(s["values"]) for s in response.json()["data"]["result"])
    return call


CASES = [
    # (name, pytsd m, VM query, step, start, end)
    ("sum:1m-avg (1,000 series -> 1)", f"sum:1m-avg:{METRIC}",
     f'sum(avg_over_time({{__name__="{METRIC}"}}[1m]))', "60s", START_S, END_S - 1),
    ("sum:1m-avg {host=*} (-> 1,000 series)", f"sum:1m-avg:{METRIC}{{host=*}}",
     f'sum by (host) (avg_over_time({{__name__="{METRIC}"}}[1m]))', "60s", START_S, END_S - 1),
    ("one series, 24 h raw", f"sum:{METRIC}{{host=web0001}}",
     f'{{__name__="{METRIC}",host="web0001"}}', "10s", START_S, END_S - 1),
    ("30 days sum:1h-avg, 1,000 series (rollups)", f"sum:1h-avg:{MONTHLY}",
     f'sum(avg_over_time({{__name__="{MONTHLY}"}}[1h]))', "1h", MONTH_START_S, END_S - 1),
]


def first_query_ms(env: dict[str, str], m: str, start: int, end: int) -> float:
    """The first query of a freshly started server (1 worker): no hour cache, no UID cache,
    no page of the store in SQLite's cache yet (the OS page cache may hold the file). The
    clock starts once the server is booted, as VictoriaMetrics' once it answers: its worker
    has logged ``READY_LOG`` (``gunicorn_server`` waits for it), i.e. opened its store and
    seen its split helper up (docs/serving.md)."""
    with gunicorn_server(env, workers=1) as url:
        begin = time.perf_counter()
        pytsd_query(url, m, start, end)()
        return (time.perf_counter() - begin) * 1000


def cold_rows(env: dict[str, str], vm_url: str) -> None:
    """Issue 26 item 3: every rollup (and raw) case from a fresh server process, and with
    the hour cache off (``tsd.query.cache.max_bytes`` 0: what a node that has not seen the
    range, or has evicted it, reads), beside VictoriaMetrics' warm median."""
    off_env = {**env, env_name("tsd.query.cache.max_bytes"): "0"}
    print(f"{'cold reads':44} {'pytsd':>12} {'VictoriaMetrics':>18} {'ratio':>7}")
    with gunicorn_server(off_env, workers=1) as off_url:
        for name, m, promql, step, start, end in CASES:
            if "one series" in name or "host=*" in name:
                continue
            query = m if "rollups" in name else m.replace("sum:", "sum:rollup_raw:", 1)
            (vm_s, _), (off_s, _) = timed([vm_query(vm_url, promql, start, end, step),
                                           pytsd_query(off_url, query, start, end)])
            print(f"{name + ' cache off':44} {off_s * 1000:9.1f} ms {vm_s * 1000:15.1f} ms "
                  f"{off_s / vm_s:6.2f}x")
            if "rollups" not in name:
                rolled = m  # the same from the 1-minute rollup table, cache off
                (vm_s, _), (off_s, _) = timed([vm_query(vm_url, promql, start, end, step),
                                               pytsd_query(off_url, rolled, start, end)])
                print(f"{name + ' rollups, cache off':44} {off_s * 1000:9.1f} ms "
                      f"{vm_s * 1000:15.1f} ms {off_s / vm_s:6.2f}x")
            fresh = sorted(first_query_ms(env, query, start, end) for _ in range(3))
            print(f"{name + ' fresh process (3 starts)':44} {fresh[1]:9.1f} ms "
                  f"(min {fresh[0]:.0f}, max {fresh[2]:.0f}) {vm_s * 1000:9.1f} ms "
                  f"{fresh[1] / 1000 / vm_s:6.2f}x")


def load_store(settings: dict[str, str]) -> None:
    tsdb = TSDB(load_config(settings, {}))
    create_tables(tsdb.store, tsdb.config)
    started = time.perf_counter()
    load_pytsd(tsdb)
    print(f"pytsd: loaded in {time.perf_counter() - started:.1f}s")
    started = time.perf_counter()
    stats = compute_rollups(tsdb, START_S, END_S, [METRIC])
    print(f"pytsd: rolled up {stats.points_read:,} points into {stats.cells_written:,} cells "
          f"in {time.perf_counter() - started:.1f}s (pytsd rollup)")
    tsdb.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("ingest", "queries"),
                        help="one half of the comparison (default: ingest, then queries)")
    args = parser.parse_args()
    if not VM.exists():
        print(f"skipped: no {VM.relative_to(ROOT)} (run bench/build-victoriametrics.sh)")
        return 0
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
          "(a shared machine: figures are noisy, ratios less so)")
    if args.only != "queries":
        ingest()
    if args.only != "ingest":
        queries()
    return 0


def ingest() -> None:
    db = Path(tempfile.mkdtemp(prefix="pytsd-peer-")) / "ingest.db"
    # The last hour, whole (VictoriaMetrics hides the newest seconds from queries), left as
    # written: compaction off, so the disk figure is the uncompacted hour's.
    env = {"TSD_STORAGE": f"sqlite:///{db}", "TSD_CORE_AUTO_CREATE_METRICS": "true",
           "TSD_STORAGE_ENABLE_COMPACTION": "false"}
    prepare(env)
    with victoria_metrics() as peer:
        ports = peer_ingest.VmPorts(peer.url, peer.put_port, peer.http_put_port,
                                    int(time.time()) // 3600 * 3600 - 3600)
        points = peer_ingest.compare(env, db, ports, peer.cpu_s)
        requests.get(peer.url + "/internal/force_flush", timeout=60)
        time.sleep(10)  # its in-memory parts reach the disk every 5 s
        print(f"  disk: VictoriaMetrics {peer_ingest.folder_bytes(peer.data) / points:.1f} "
              f"B/pt, its data folder after a flush ({points:,} points)")


def queries() -> None:
    # BENCH_PEER_DB: a store a previous run loaded (its path is printed), to skip loading.
    reuse = os.environ.get("BENCH_PEER_DB")
    db = Path(reuse) if reuse else Path(tempfile.mkdtemp(prefix="pytsd-peer-")) / "bench.db"
    settings = {"tsd.storage": f"sqlite:///{db}", "tsd.core.auto_create_metrics": "true",
                "tsd.rollups.enable": "true", "tsd.rollups.config": json.dumps(ROLLUPS)}
    if not reuse:
        load_store(settings)
        # Closed ranges are kept once their newest cell is RANGE_SETTLED_MS old: measure them
        # as a dashboard's refresh reads them, not in the seconds after the load.
        time.sleep(RANGE_SETTLED_MS / 1000 + 1)
    print(f"pytsd store: {db}")
    env = {env_name(key): value for key, value in settings.items()}
    with victoria_metrics() as peer, gunicorn_server(env, workers=1) as url:
        vm_url = peer.url
        started = time.perf_counter()
        load_vm(vm_url, peer.put_port)
        print(f"VictoriaMetrics: loaded in {time.perf_counter() - started:.1f}s")
        print(f"{'query':44} {'pytsd':>22} {'VictoriaMetrics':>18} {'ratio':>7}")
        for name, m, promql, step, start, end in CASES:
            variants = [("", m)]
            if "rollups" not in name and "-avg" in m:
                variants = [(" raw", m.replace("sum:", "sum:rollup_raw:", 1)),
                            (" rollups", m)]
            (vm_s, vm_points), *ours = timed(
                [vm_query(vm_url, promql, start, end, step),
                 *(pytsd_query(url, query, start, end) for _, query in variants)])
            for (label, _), (ours_s, points) in zip(variants, ours):
                print(f"{name + label:44} {ours_s * 1000:9.1f} ms {points:>9,} pts "
                      f"{vm_s * 1000:9.1f} ms {vm_points:>7,} {ours_s / vm_s:6.2f}x")
        cold_rows(env, vm_url)

if __name__ == "__main__":
    sys.exit(main())
