"""The demo data set: a day of 10-second points for a small web farm, ending now."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from app.errors import TsdbError
from app.tsdb import TSDB
from app.tsdb.writer import DataPoint, PointWriter

STEP_S = 10
HOSTS = {"web01": "lga", "web02": "lga", "web03": "sjc", "web04": "sjc",
         "db01": "lga", "db02": "sjc"}
WEB_HOSTS = [h for h in HOSTS if h.startswith("web")]
DEMO_METRICS = ("sys.cpu.user", "sys.cpu.system", "sys.mem.used_bytes", "net.if.bytes_in",
                "net.if.bytes_out", "http.requests", "http.latency_ms")


def demo_points(end_s: int | None = None, hours: int = 24, seed: int = 42) -> Iterator[DataPoint]:
    """Yield the demo points, series by series, for ``hours`` hours ending at ``end_s``."""
    end_s = int(time.time()) if end_s is None else end_s
    end_s -= end_s % STEP_S
    ts = np.arange(end_s - hours * 3600 + STEP_S, end_s + 1, STEP_S, dtype=np.int64)
    day = 2 * np.pi * (ts % 86400) / 86400
    rng = np.random.default_rng(seed)
    for number, (host, dc) in enumerate(HOSTS.items()):
        tags = {"host": host, "dc": dc}
        load = 0.5 + 0.4 * np.sin(day - 1.5 + number * 0.3)
        yield from _series("sys.cpu.user", tags, ts,
                           np.round(np.clip(load * 60 + rng.normal(0, 4, ts.size), 0, 100), 2))
        yield from _series("sys.cpu.system", tags, ts,
                           np.round(np.clip(load * 15 + rng.normal(0, 2, ts.size), 0, 100), 2))
        mem = (4 << 30) + (load * (2 << 30)).astype(np.int64) + rng.integers(0, 1 << 20, ts.size)
        yield from _series("sys.mem.used_bytes", tags, ts, mem)
        iface = {**tags, "iface": "eth0"}
        for metric, scale in (("net.if.bytes_in", 5e6), ("net.if.bytes_out", 2e6)):
            rate = np.abs(load * scale + rng.normal(0, scale / 20, ts.size)) * STEP_S
            yield from _series(metric, iface, ts, np.cumsum(rate.astype(np.int64)))
        if host in WEB_HOSTS:
            yield from _web_series(tags, ts, load, rng)


def _web_series(tags: dict[str, str], ts: np.ndarray, load: np.ndarray,
                rng: np.random.Generator) -> Iterator[DataPoint]:
    for status, share in (("200", 0.99), ("500", 0.01)):
        per_step = rng.poisson(np.maximum(load * 300 * share * STEP_S, 0.1))
        yield from _series("http.requests", {**tags, "status": status}, ts, np.cumsum(per_step))
    latency = np.round(20 + load * 80 + rng.gamma(2.0, 5.0, ts.size), 3)
    yield from _series("http.latency_ms", tags, ts, latency)


def _series(metric: str, tags: dict[str, str], ts: np.ndarray,
            values: np.ndarray) -> Iterator[DataPoint]:
    cast = int if values.dtype.kind in "iu" else float
    for timestamp, value in zip(ts.tolist(), values.tolist()):
        yield DataPoint(metric, timestamp, cast(value), tags)


DEMO_ANNOTATIONS = [
    # (hours before the end, description, notes, series?) — series notes sit on web01's CPU.
    (20, "Deploy v1.2.3", "Rolled out to all web hosts", False),
    (12, "Maintenance window", "Network maintenance in sjc", False),
    (6, "Deploy v1.2.4", "Hotfix for the login page", False),
    (16, "CPU spike on web01", "Runaway cron job, killed", True),
    (3, "Kernel upgrade", "web01 rebooted after the kernel upgrade", True),
]


def load_demo(tsdb: TSDB, hours: int = 24, end_s: int | None = None) -> int:
    """Write the demo points (and notes) and compact the finished hours; return the point count."""
    from app.tsdb.compaction import compact_table

    end_s = int(time.time()) if end_s is None else end_s
    writer = PointWriter(tsdb)
    count = 0
    batch: list[DataPoint] = []
    for point in demo_points(end_s, hours):
        batch.append(point)
        if len(batch) >= 20_000:
            count += _write(writer, batch)
            batch = []
    count += _write(writer, batch)
    compact_table(tsdb.data_table(), tsdb.layout, now_s=end_s)
    load_demo_notes(tsdb, end_s)
    return count


def load_demo_notes(tsdb: TSDB, end_s: int) -> int:
    """Write ``DEMO_ANNOTATIONS`` (global ones and web01's ``sys.cpu.user``) ending at end_s."""
    from app.tsdb.annotations import series_tsuid, write_demo_notes

    tsuid = series_tsuid(tsdb, "sys.cpu.user", {"host": "web01", "dc": HOSTS["web01"]})
    return write_demo_notes(tsdb, end_s, DEMO_ANNOTATIONS, tsuid)


def _write(writer: PointWriter, batch: list[DataPoint]) -> int:
    errors = [e for e in writer.write(batch, compact_rows=True) if e]
    if errors:
        raise TsdbError(f"demo data rejected: {errors[0]}")
    return len(batch)
