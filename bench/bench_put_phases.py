"""Where a `/api/put` request's CPU goes, in one process: per phase, in µs per point.

The WSGI app is called directly (no server, no client on the cores) with issue 27's requests:
50 points over 50 series of the current hour (``bench_hbase_put.bodies_for``), one after the
other, on a fresh embedded store or fresh tables of an HBase (``--hbase HOST:PORT``). Each
phase's CPU is the request thread's (``time.thread_time``) spent in the functions that make
it, timed by wrappers around them (a wrapper costs ~1 µs a call, a few per request); "other
threads" is the rest of the process's CPU: on HBase the write batcher's threads, which encode
and send the ``mutateRows`` calls. ``--profile`` prints cProfile's top functions instead.

    python bench/bench_put_phases.py [--hbase HOST:PORT] [--requests N] [--profile]

Run it from another checkout's ``bench/`` to measure that tree (it imports the app of the
checkout it lives in).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import functools
import io
import os
import pstats
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench_hbase_put import POINTS_PER_REQUEST, SERIES, bodies_for
from common import temp_storage_url

import app.api.put as put_module
from app import create_app
from app.tsdb import writer as writer_module
from app.tsdb.schema import create_tables

spent: collections.Counter[str] = collections.Counter()


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] += time.thread_time() - started
    return wrapper


def instrument(app: Any) -> None:
    put_module.fast_json_body = timed("fast_json_body", put_module.fast_json_body)
    writer = writer_module.PointWriter
    for name in ("write_batch", "_check_timestamps", "_templates_for", "_store", "store_rows"):
        setattr(writer, name, timed(name, getattr(writer, name)))
    for endpoint, view in list(app.view_functions.items()):
        if view.__module__ == put_module.__name__:
            app.view_functions[endpoint] = timed("view", view)


def environ(body: bytes) -> dict[str, Any]:
    return {"REQUEST_METHOD": "POST", "PATH_INFO": "/api/put", "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "4242", "SERVER_PROTOCOL": "HTTP/1.1",
            "wsgi.url_scheme": "http", "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr, "REMOTE_ADDR": "127.0.0.1"}


def phases(thread_s: float, process_s: float) -> list[tuple[str, float]]:
    s = spent
    return [
        ("Flask and the hooks, outside the view", thread_s - s["view"]),
        ("body read + JSON parse", s["fast_json_body"]),
        ("points into the batch, the answer (204)", s["view"] - s["fast_json_body"]
         - s["write_batch"]),
        ("timestamp range check", s["_check_timestamps"]),
        ("series: validation, UIDs (cached)", s["_templates_for"]),
        ("writer's rest (series keys, plugin seam)", s["write_batch"] - s["_check_timestamps"]
         - s["_templates_for"] - s["_store"]),
        ("encode: qualifiers, values, row keys", s["_store"] - s["store_rows"]),
        ("store, on the request thread", s["store_rows"]),
        ("other threads (HBase: the write batcher)", process_s - thread_s),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hbase", help="HOST:PORT of an HBase Thrift gateway")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    config: dict[str, Any] = {"tsd.core.auto_create_metrics": True}
    if args.hbase:
        config.update({"tsd.storage": f"hbase://{args.hbase}",
                       "tsd.storage.hbase.table_prefix": f"benchphase{uuid.uuid4().hex[:8]}_"})
    else:
        config["tsd.storage"] = temp_storage_url()
    app = create_app(config)
    tsdb = app.extensions["tsdb"]
    if args.hbase:
        create_tables(tsdb.store, app.config["TSD"])
    try:
        hour_s = int(time.time()) // 3600 * 3600
        warm = SERIES // POINTS_PER_REQUEST
        bodies = bodies_for(0, warm + args.requests, hour_s)
        statuses: list[str] = []

        def start_response(status: str, headers: Any, exc_info: Any = None) -> None:
            statuses.append(status)

        for body in bodies[:warm]:  # UIDs, templates
            b"".join(app(environ(body), start_response))
        if not args.profile:
            instrument(app)
        environs = [environ(body) for body in bodies[warm:]]
        profile = cProfile.Profile() if args.profile else None
        process_before, thread_before = time.process_time(), time.thread_time()
        if profile is not None:
            profile.enable()
        for request_environ in environs:
            b"".join(app(request_environ, start_response))
        if profile is not None:
            profile.disable()
        process_s = time.process_time() - process_before
        thread_s = time.thread_time() - thread_before
        assert all(status.startswith("204") for status in statuses), set(statuses)
        points = args.requests * POINTS_PER_REQUEST
        store = f"HBase {args.hbase}" if args.hbase else "embedded store"
        print(f"/api/put in process, {args.requests} requests of {POINTS_PER_REQUEST} points over "
              f"{POINTS_PER_REQUEST} series, {store}: {process_s / points * 1e6:.1f} µs of CPU per "
              f"point (load average {os.getloadavg()[0]:.1f})")
        if profile is not None:
            out = io.StringIO()
            order = os.environ.get("PROFILE_SORT", "tottime")  # or cumulative
            pstats.Stats(profile, stream=out).sort_stats(order).print_stats(30)
            print(out.getvalue())
            return 0
        for name, seconds in phases(thread_s, process_s):
            print(f"  {name:44s} {seconds / points * 1e6:5.2f} µs/point")
    finally:
        if args.hbase:
            tsdb.store.drop_tables()
    return 0


if __name__ == "__main__":
    sys.exit(main())
