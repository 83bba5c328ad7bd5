"""Disk use of the embedded store, bytes per data point (issue 26 item 2), and what packing
costs to write and to read.

Writes ``--series`` series (default 200) x ``--hours`` hours (default 24) at 10 s, a batch per
timestamp (a point of every series, as collectors send them), with background compaction on
(``tsd.storage.compaction.background``), through ``PointWriter.write`` (the line protocol's
path; ``--via put``: ``/api/put`` bodies of 50 points through Flask's test client). Then runs
what the server's background compaction thread runs (``CompactionQueue.flush``, the day being
over), then a first read of the day (which keeps its hour columns, ``sqlite_hours.py``), then
a pass of the server's background strip (``HourStrip.run_once``, one copy of the kept hours:
the steady state, no manual step), and prints the figures at each step: the file (with its
WAL), and the pages in use per point, with the share of the cells (table and ``cells_stamp``
index) and of the hour columns (SQLite's ``dbstat``). The CPU seconds of the writing (merges
included) are printed per point.

``--now``: the hours end with the current one (not over: no compaction, no hour columns), to
read an open hour as written. ``--db PATH``: keep the store there.

``--read PATH``: in a fresh process, time the first ``sum:1m-avg`` query over the store's
data (Flask's test client, the split left out) with the hour cache on or off (``--cache``),
then ``--runs`` more; ``--drop-hour-columns`` forgets the kept hour columns first (the first
read after compaction).

Usage: ``python bench/bench_space.py [--series 200] [--hours 24] [--pack | --no-pack]
[--via write|put] [--now] [--db PATH]``, ``python bench/bench_space.py --read PATH
[--cache on|off] [--drop-hour-columns] [--runs 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np
from common import temp_storage_url

from app import create_app
from app.tsdb import TSDB
from app.tsdb.hour_cache import SETTLED_MS
from app.tsdb.hour_strip import HourStrip
from app.tsdb.writer import DataPoint, PointWriter

START_S = 1_700_000_000 - 1_700_000_000 % 86400
STEP_S = 10
PUT_BODY_POINTS = 50
METRIC = "sys.cpu.user"


def figures(path: str, points: int) -> str:
    with sqlite3.connect(path) as db:
        page, pages, free = (int(db.execute(f"PRAGMA {name}").fetchone()[0])
                             for name in ("page_size", "page_count", "freelist_count"))
        by_name = dict(db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"))
    main_bytes = os.path.getsize(path)
    wal = Path(path + "-wal")
    wal_bytes = wal.stat().st_size if wal.exists() else 0
    used = (pages - free) * page
    cells = by_name.get("cells", 0) + by_name.get("cells_stamp", 0)
    hours = by_name.get("hour_columns", 0)
    return (f"file {(main_bytes + wal_bytes) / points:6.2f} B/pt "
            f"(main {main_bytes / points:.2f}, WAL {wal_bytes / points:.2f}), "
            f"pages in use {used / points:6.2f} B/pt: cells {cells / points:.2f}, "
            f"hour columns {hours / points:.2f} ({free} of {pages} pages free)")


def write(args: argparse.Namespace) -> int:
    url = f"sqlite:///{args.db}" if args.db else temp_storage_url("space.db")
    path = url.removeprefix("sqlite:///")
    config = {"tsd.storage": url, "tsd.core.auto_create_metrics": True,
              "tsd.storage.compaction.background": True,
              # the strip's own thread waits: the bench runs its pass at the end, as it does
              "tsd.storage.sqlite.one_copy.interval_s": 86400,
              # the layout is the same; FULL only adds a sync per batch
              "tsd.storage.sqlite.synchronous": "NORMAL",
              **({} if args.pack is None else {"tsd.storage.sqlite.pack_cells": args.pack}),
              **({} if args.one_copy is None
                 else {"tsd.storage.sqlite.one_copy": args.one_copy})}
    app = create_app({**config, "tsd.query.split.enable": False,
                      "tsd.query.cache.max_bytes": 0})
    tsdb = app.extensions["tsdb"]
    assert isinstance(tsdb, TSDB)
    print(f"packing {'on' if tsdb.config['tsd.storage.sqlite.pack_cells'] else 'off'}, "
          f"one copy {'on' if tsdb.config['tsd.storage.sqlite.one_copy'] else 'off'}, "
          f"via {args.via}")
    writer = PointWriter(tsdb)
    client = app.test_client()
    rng = np.random.default_rng(1)
    hosts = [f"web{number:04d}" for number in range(args.series)]
    steps = args.hours * 3600 // STEP_S
    start_s = (int(time.time()) // 3600 - args.hours + 1) * 3600 if args.now else START_S
    values = np.round(rng.uniform(0, 100, (steps, args.series)), 2)
    started, started_cpu = time.perf_counter(), time.process_time()
    for step in range(steps):
        ts = start_s + step * STEP_S
        if args.via == "put":
            batch = [{"metric": METRIC, "timestamp": ts, "value": value, "tags": {"host": host}}
                     for host, value in zip(hosts, values[step].tolist())]
            for at in range(0, len(batch), PUT_BODY_POINTS):
                reply = client.post("/api/put", data=json.dumps(batch[at:at + PUT_BODY_POINTS]))
                assert reply.status_code == 204, reply.get_data(as_text=True)[:300]
        else:
            errors = writer.write([DataPoint(METRIC, ts, value, {"host": host})
                                   for host, value in zip(hosts, values[step].tolist())])
            assert not any(errors), errors[:3]
        if step == 3600 // STEP_S - 1:  # the first hour written: what an open hour costs
            tsdb.data_table().row(b"")  # a read merges the staging log, as any read does
            print(f"first hour, as written:       {figures(path, (step + 1) * args.series)}")
    points = steps * args.series
    tsdb.data_table().row(b"")
    cpu_s = time.process_time() - started_cpu
    print(f"{points:,} points written in {time.perf_counter() - started:.1f}s, "
          f"{cpu_s:.1f} CPU s ({cpu_s / points * 1e6:.2f} CPU µs a point, merges included)")
    print(f"all hours, as written:        {figures(path, points)}")
    if args.now:
        tsdb.close()
        return 0
    queue = tsdb.compaction_queue
    assert queue is not None
    started = time.perf_counter()
    stats = queue.flush(now_s=start_s + args.hours * 3600 + 3600)
    print(f"background compaction: {stats.rows_compacted} rows "
          f"({stats.cells_merged} cells) in {time.perf_counter() - started:.1f}s")
    print(f"after compaction:             {figures(path, points)}")
    time.sleep(SETTLED_MS / 1000)  # the hours' newest cells settle: their columns are kept
    started, started_cpu = time.perf_counter(), time.process_time()
    reply = client.get(f"/api/query?start={start_s}&end={start_s + args.hours * 3600 - 1}"
                       f"&m=sum:1m-avg:{METRIC}")
    assert reply.status_code == 200, reply.get_data(as_text=True)[:300]
    print(f"the first read (keeps the hour columns): {(time.perf_counter() - started) * 1000:.0f}"
          f" ms ({(time.process_time() - started_cpu) * 1000:.0f} CPU ms)")
    print(f"after a first read:           {figures(path, points)}")
    started, started_cpu = time.perf_counter(), time.process_time()
    stripped = HourStrip(tsdb).run_once()  # what the server's background thread runs
    print(f"background strip (one copy): {stripped.cells_stripped} cells in "
          f"{stripped.steps} steps, {(time.perf_counter() - started) * 1000:.0f} ms "
          f"({(time.process_time() - started_cpu) * 1000:.0f} CPU ms)")
    print(f"after the background strip:   {figures(path, points)}")
    with sqlite3.connect(path) as db:  # what SQLite's own automatic checkpoint does later
        db.execute("PRAGMA wal_checkpoint(PASSIVE)")
    print(f"after a WAL checkpoint:       {figures(path, points)}")
    tsdb.close()
    return 0


def read(args: argparse.Namespace) -> int:
    """The first query of a fresh process over the store at ``args.read``, then more."""
    if args.drop_hour_columns:
        with sqlite3.connect(args.read) as db:
            db.execute("DELETE FROM hour_columns")
    with sqlite3.connect(args.read) as db:
        first, last = db.execute("SELECT min(substr(row, 4, 4)), max(substr(row, 4, 4))"
                                 " FROM cells WHERE tbl = 'tsdb' AND family = 't'").fetchone()
    start_s, end_s = int.from_bytes(first, "big"), int.from_bytes(last, "big") + 3600
    config = {"tsd.storage": f"sqlite:///{args.read}", "tsd.query.split.enable": False,
              **({"tsd.query.cache.max_bytes": 0} if args.cache == "off" else {})}
    url = f"/api/query?start={start_s}&end={end_s - 1}&m={args.m}"
    begin, begin_cpu = time.perf_counter(), time.process_time()
    client = create_app(config).test_client()
    opened_ms = (time.perf_counter() - begin) * 1000
    timings = []
    for _ in range(1 + args.runs):
        begin, begin_cpu = time.perf_counter(), time.process_time()
        reply = client.get(url)
        assert reply.status_code == 200, reply.get_data(as_text=True)[:300]
        timings.append(f"{(time.perf_counter() - begin) * 1000:.0f}"
                       f" ({(time.process_time() - begin_cpu) * 1000:.0f})")
    hours = (end_s - start_s) // 3600
    print(f"read {hours} h of {args.m}, cache {args.cache}"
          f"{', hour columns dropped' if args.drop_hour_columns else ''}: app {opened_ms:.0f}"
          f" ms; first query {timings[0]} ms wall (CPU); then {', '.join(timings[1:])}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--pack", action=argparse.BooleanOptionalAction, default=None,
                        help="tsd.storage.sqlite.pack_cells (default: the store's default)")
    parser.add_argument("--one-copy", action=argparse.BooleanOptionalAction, default=None,
                        help="tsd.storage.sqlite.one_copy (default: the store's default)")
    parser.add_argument("--via", choices=("write", "put"), default="write")
    parser.add_argument("--now", action="store_true")
    parser.add_argument("--db")
    parser.add_argument("--read")
    parser.add_argument("--cache", choices=("on", "off"), default="on")
    parser.add_argument("--drop-hour-columns", action="store_true")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--m", default=f"sum:1m-avg:{METRIC}",
                        help="--read's query (e.g. one series: its cells, not hour columns)")
    args = parser.parse_args()
    return read(args) if args.read else write(args)


if __name__ == "__main__":
    sys.exit(main())
