"""End-to-end readiness probe for the local HBase Thrift1 server (used by hbase.sh).

An open Thrift port is not enough: the gateway listens before the master has assigned
hbase:meta, so readiness means a real round trip (create table, put, get, drop) works.

Usage: python scripts/hbase/smoke.py [HOST] [PORT] [--deadline SECONDS]
Exits 0 and prints the elapsed seconds once a round trip succeeded, 1 on timeout.
"""

from __future__ import annotations

import argparse
import sys
import time

import happybase  # noqa: TID251 - a dev script outside the app, not a storage layer

SMOKE_TABLE = b"_pytsd_smoke"
# Per-call socket timeout (ms): while the master is still starting, the gateway's own HBase
# client retries for minutes; a fresh connection with a bounded timeout keeps probes short.
PROBE_TIMEOUT_MS = 20_000


def round_trip(host: str, port: int) -> None:
    """Create a table, put a cell, read it back and drop the table; raise on any failure."""
    conn = happybase.Connection(host, port, timeout=PROBE_TIMEOUT_MS)
    try:
        if SMOKE_TABLE not in conn.tables():
            conn.create_table(SMOKE_TABLE, {"f": {"max_versions": 1}})
        table = conn.table(SMOKE_TABLE)
        table.put(b"row", {b"f:q": b"value"})
        got = table.row(b"row").get(b"f:q")
        if got != b"value":
            raise RuntimeError(f"read back {got!r}, expected b'value'")
        conn.delete_table(SMOKE_TABLE, disable=True)
    finally:
        conn.close()


def wait_ready(host: str, port: int, deadline_s: float) -> float:
    """Retry round_trip until it succeeds; return elapsed seconds or raise TimeoutError."""
    started = time.monotonic()
    last_error: Exception | None = None
    while time.monotonic() - started < deadline_s:
        try:
            round_trip(host, port)
            return time.monotonic() - started
        except Exception as exc:  # noqa: BLE001 - any failure just means "not ready yet"
            last_error = exc
            time.sleep(1.0)
    raise TimeoutError(f"no round trip after {deadline_s:.0f}s; last error: {last_error!r}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("host", nargs="?", default="127.0.0.1")
    parser.add_argument("port", nargs="?", type=int, default=9090)
    parser.add_argument("--deadline", type=float, default=180.0, help="seconds to keep trying")
    args = parser.parse_args(argv)
    try:
        elapsed_s = wait_ready(args.host, args.port, args.deadline)
    except TimeoutError as exc:
        print(f"smoke: {exc}", file=sys.stderr)
        return 1
    print(f"smoke: round trip ok after {elapsed_s:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
