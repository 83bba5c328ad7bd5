"""Cold rollup reads (issue 26 item 3): one query in a fresh process, the hour cache off or on.

``build DB [--day-series N]``: ``bench_peer.py``'s data into a store at ``DB`` (the month of
hourly aggregates for 1,000 series; the day at 10 s for ``N`` series, rolled up into the
1-minute table). ``query DB NAME [--cache] [--profile]``: one query, through the Flask test
client, in this (fresh) process; prints wall and CPU ms and the answer's MD5, or a cProfile.
Compare branches by alternating fresh processes in one run (the machine is shared).

    python bench/bench_rollup_cold.py build /tmp/roll.db --day-series 200
    python bench/bench_rollup_cold.py query /tmp/roll.db month
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

import bench_peer
from common import ROOT  # noqa: F401  (puts the project on sys.path)

QUERIES = {
    "month": (f"sum:1h-avg:{bench_peer.MONTHLY}", bench_peer.MONTH_START_S, bench_peer.END_S - 1),
    "minute": (f"sum:1m-avg:{bench_peer.METRIC}", bench_peer.START_S, bench_peer.END_S - 1),
}


def settings(db: str) -> dict[str, str]:
    return {"tsd.storage": f"sqlite:///{db}", "tsd.core.auto_create_metrics": "true",
            "tsd.rollups.enable": "true", "tsd.rollups.config": json.dumps(bench_peer.ROLLUPS),
            "tsd.query.split.enable": "false"}


def build(db: str, day_series: int) -> None:
    bench_peer.SERIES = day_series
    from app.config import load_config
    from app.tsdb import TSDB
    from app.tsdb.rollups import compute_rollups
    from app.tsdb.schema import create_tables

    tsdb = TSDB(load_config(settings(db), {}))
    create_tables(tsdb.store, tsdb.config)
    started = time.perf_counter()
    month, bench_peer.month_series = bench_peer.month_series, lambda: iter(())
    bench_peer.load_pytsd(tsdb)  # the day only
    bench_peer.SERIES, bench_peer.month_series = 1000, month
    bench_peer.day_series, day = (lambda: iter(())), bench_peer.day_series
    bench_peer.load_pytsd(tsdb)  # the month only
    bench_peer.day_series = day
    compute_rollups(tsdb, bench_peer.START_S, bench_peer.END_S, [bench_peer.METRIC])
    tsdb.close()
    print(f"built {db} in {time.perf_counter() - started:.1f}s")


def query(db: str, name: str, cache: bool, profile: bool, runs: int) -> None:
    from app import create_app
    from app.server.malloc import keep_freed, one_arena

    one_arena()  # as a server's worker allocates (app/server/worker.py): freed arrays are
    keep_freed()  # kept for the next query, not faulted in again by each

    config = settings(db)
    if not cache:
        config["tsd.query.cache.max_bytes"] = "0"
    client = create_app(config).test_client()
    m, start, end = QUERIES[name]
    url = f"/api/query?start={start}&end={end}&m={m}"
    times = []  # (wall, CPU) ms of each query before the last
    for _ in range(runs - 1):
        wall, cpu = time.perf_counter(), time.process_time()
        client.get(url)
        times.append(((time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000))
    if profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
    wall, cpu = time.perf_counter(), time.process_time()
    response = client.get(url)
    times.append(((time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000))
    if profile:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    assert response.status_code == 200, response.get_data(as_text=True)[:300]
    body = response.get_data()
    later = sorted(cpu_ms for _, cpu_ms in times[1:])  # the first pays the process's first steps
    print(f"{name} cache {'on' if cache else 'off'}: first query {times[0][0]:.0f} ms wall "
          f"({times[0][1]:.0f} CPU); md5 {hashlib.md5(body).hexdigest()[:12]}, "
          f"{len(json.loads(body)[0]['dps'])} dps"
          + (f"; queries 2..{runs}: CPU min {later[0]:.0f}, median {later[len(later) // 2]:.0f} ms"
             if later else ""))

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("db")
    b.add_argument("--day-series", type=int, default=1000)
    q = sub.add_parser("query")
    q.add_argument("db")
    q.add_argument("name", choices=sorted(QUERIES))
    q.add_argument("--cache", action="store_true")
    q.add_argument("--profile", action="store_true")
    q.add_argument("--runs", type=int, default=1,
                   help="queries in this process; the last is timed (and profiled)")
    args = parser.parse_args()
    if args.command == "build":
        build(args.db, args.day_series)
    else:
        query(args.db, args.name, args.cache, args.profile, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
