"""Disk use of the embedded store, bytes per data point (issue 26 item 2).

Writes ``--series`` series (default 200) x ``--hours`` hours (default 24) at 10 s through the
one write path ``/api/put`` uses (``PointWriter.write``: single-point cells, staged, merged),
a batch per timestamp (a point of every series, as collectors send them), with background
compaction on (``tsd.storage.compaction.background``). Then runs what the server's background
compaction thread runs (``CompactionQueue.flush``, the day being over) and prints the figures
before and after: the file (with its WAL), and the pages in use, per point.

The figures come from SQLite itself (file sizes, ``page_count``, ``freelist_count``), not from
the store's own report, so the script runs on an older pytsd too (without ``--pack``).

Usage: ``python bench/bench_space.py [--series 200] [--hours 24] [--pack]``
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np
from common import temp_storage_url

from app.config import load_config
from app.tsdb import TSDB
from app.tsdb.writer import DataPoint, PointWriter

START_S = 1_700_000_000 - 1_700_000_000 % 86400
STEP_S = 10


def figures(path: str, points: int) -> str:
    with sqlite3.connect(path) as db:
        page, pages, free = (int(db.execute(f"PRAGMA {name}").fetchone()[0])
                             for name in ("page_size", "page_count", "freelist_count"))
    main_bytes = os.path.getsize(path)
    wal = Path(path + "-wal")
    wal_bytes = wal.stat().st_size if wal.exists() else 0
    used = (pages - free) * page
    return (f"file {(main_bytes + wal_bytes) / points:6.2f} B/pt "
            f"(main {main_bytes / points:.2f}, WAL {wal_bytes / points:.2f}), "
            f"pages in use {used / points:6.2f} B/pt ({free} of {pages} pages free)")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--pack", action="store_true",
                        help="tsd.storage.sqlite.pack_cells: compacted columns packed at rest")
    args = parser.parse_args()
    url = temp_storage_url("space.db")
    path = url.removeprefix("sqlite:///")
    tsdb = TSDB(load_config({"tsd.storage": url, "tsd.core.auto_create_metrics": True,
                             "tsd.storage.compaction.background": True,
                             # the layout is the same; FULL only adds a sync per batch
                             "tsd.storage.sqlite.synchronous": "NORMAL",
                             **({"tsd.storage.sqlite.pack_cells": True} if args.pack else {})},
                            environ={}))
    writer = PointWriter(tsdb)
    rng = np.random.default_rng(1)
    hosts = [f"web{number:04d}" for number in range(args.series)]
    steps = args.hours * 3600 // STEP_S
    values = np.round(rng.uniform(0, 100, (steps, args.series)), 2)
    started = time.perf_counter()
    for step in range(steps):
        ts = START_S + step * STEP_S
        errors = writer.write([DataPoint("sys.cpu.user", ts, value, {"host": host})
                               for host, value in zip(hosts, values[step].tolist())])
        assert not any(errors), errors[:3]
        if step == 3600 // STEP_S - 1:  # the first hour written: what an open hour costs
            tsdb.data_table().row(b"")  # a read merges the staging log, as any read does
            print(f"first hour, as written:       {figures(path, (step + 1) * args.series)}")
    points = steps * args.series
    tsdb.data_table().row(b"")
    print(f"{points:,} points written in {time.perf_counter() - started:.1f}s")
    print(f"all hours, as written:        {figures(path, points)}")
    queue = tsdb.compaction_queue
    assert queue is not None
    started = time.perf_counter()
    stats = queue.flush(now_s=START_S + args.hours * 3600 + 3600)
    print(f"background compaction: {stats.rows_compacted} rows "
          f"({stats.cells_merged} cells) in {time.perf_counter() - started:.1f}s")
    print(f"after compaction:             {figures(path, points)}")
    with sqlite3.connect(path) as db:  # what SQLite's own automatic checkpoint does later
        db.execute("PRAGMA wal_checkpoint(PASSIVE)")
    print(f"after a WAL checkpoint:       {figures(path, points)}")
    tsdb.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
