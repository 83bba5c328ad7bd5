"""OpenTSDB 2.4.1 and pytsd read each other's rollup tables, on plain and salted tables.

Per layout, one raw table set X (loaded once, through pytsd's ``/api/put``) and two sets of
rollup tables: O, written by OpenTSDB through its ``/api/rollup`` (points computed by
:mod:`tests.differential.rollup_data`, plain Python), and P, computed by pytsd itself
(``compute_rollups``, the code behind ``pytsd rollup``). Two OpenTSDB TSDs (compaction off)
read X with O's and with P's rollup tables; two pytsd apps likewise. The O and P tables must
hold the same cells byte for byte, and every downsampled query (every ``rollupUsage``, in JSON
and as ``rollup_*`` in ``m=``) must get the same answer from all four, up to declared
departures. OpenTSDB's fsck reads only the raw table (the main suite's), not rollup tables.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from app.storage.base import Store
from tests.differential.compare import compare
from tests.differential.oracle import OpenTSDB, opentsdb_settings, stop_all
from tests.differential.queries import Case
from tests.differential.rollup_data import (
    END_S,
    PRESET,
    ROLLUP_INTERVALS,
    SERIES,
    START_S,
    preset_points,
    raw_points,
    rollup_config,
    rollup_points,
)
from tests.differential.test_differential import ARTIFACTS, PytsdClient, Tally, _hbase

SEED = 20170519
LAYOUTS = {"plain": 0, "salted": 1}
QUERIES = 160
BATCH = 500
USAGES = [None, "ROLLUP_RAW", "ROLLUP_NOFALLBACK", "ROLLUP_FALLBACK", "ROLLUP_FALLBACK_RAW"]
DOWNSAMPLES = ["1m-avg", "1m-sum", "1m-min", "1m-max", "1m-count", "5m-avg", "5m-sum",
               "10m-max", "1h-avg", "1h-sum", "1h-min", "1h-max", "1h-count", "2h-avg",
               "1d-sum", "30s-avg", "1m-zimsum", "1h-mimmax"]


@dataclass
class RollupLayout:
    name: str
    servers: dict[str, Any]  # who -> something with request(method, path, body)
    own: PytsdClient      # pytsd over P (it computed them)
    foreign: PytsdClient  # pytsd over O (OpenTSDB wrote them)


def _write_config(path: Path, config: dict[str, Any]) -> str:
    path.write_text(json.dumps(config))
    return str(path)


def _post(server: Any, path: str, points: list[dict[str, Any]]) -> None:
    for i in range(0, len(points), BATCH):
        status, text = server.request("POST", path, json.dumps(points[i:i + BATCH]))
        assert status == 200, f"{path}: {status} {text[:500]}"


@dataclass
class Built:
    """One layout's servers as they come up; ``close`` stops and drops what was made."""

    name: str
    tsds: dict[str, OpenTSDB] = field(default_factory=dict)
    pytsd: list[PytsdClient] = field(default_factory=list)

    def close(self) -> None:
        stop_all(self.tsds.values())
        for i, client in enumerate(reversed(self.pytsd)):
            client.close(drop=i == len(self.pytsd) - 1)  # the first made drops the prefix


def _build(built: Built, thrift: str, tmp: Path) -> RollupLayout:
    name, salt = built.name, LAYOUTS[built.name]
    prefix = f"roll{uuid.uuid4().hex[:8]}_"
    base = {"tsd.storage": f"hbase://{thrift}", "tsd.core.auto_create_metrics": True,
            "tsd.storage.salt.width": salt, "tsd.storage.salt.buckets": 4,
            "tsd.storage.hbase.table_prefix": prefix, "tsd.rollups.enable": True}
    started = time.monotonic()
    # The pytsd apps create every table (X, O's and P's) before the TSDs check them.
    for side in ("p-", "o-"):
        built.pytsd.append(PytsdClient(
            {**base, "tsd.rollups.config": json.dumps(rollup_config("", side))}))
    own, foreign = built.pytsd
    tables_s = time.monotonic() - started
    for side in ("o-", "p-"):
        built.tsds[side] = OpenTSDB(f"rollup-{name}-{side}", prefix, thrift, {
            **opentsdb_settings(salt, appends=False, compaction=False),
            "tsd.rollups.enable": "true", "tsd.rollups.config":
                _write_config(tmp / f"{name}-{side}.json", rollup_config(prefix, side))})
        built.tsds[side].start()
    up_s = time.monotonic() - started - tables_s
    points = raw_points(SEED)
    _post(own, "/api/put?details&sync", points)
    _post(built.tsds["o-"], "/api/rollup?details&sync", rollup_points(points))
    # rollups and pre-aggregates of a metric without raw data, through both /api/rollup
    for server in (built.tsds["o-"], own):
        _post(server, "/api/rollup?details&sync", preset_points(SEED))
    clock = time.monotonic()
    from app.tsdb.rollups import compute_rollups

    stats = compute_rollups(own.tsdb, START_S, END_S)
    print(f"\nrollups {name}: tables {tables_s:.1f} s, TSDs up {up_s:.1f} s, {len(points)} "
          f"points, pytsd rolled up {stats.points_read} points into {stats.cells_written} "
          f"cells in {time.monotonic() - clock:.2f} s")
    servers = {"reference": built.tsds["o-"], "pytsd/own": own,
               "pytsd/opentsdb-written": foreign, "opentsdb/pytsd-written": built.tsds["p-"]}
    return RollupLayout(name, servers, own, foreign)


@pytest.fixture(scope="module")
def rollup_layouts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RollupLayout]]:
    """Both layouts, built side by side (each mostly waits on HBase and its JVMs)."""
    thrift = _hbase()
    tmp = tmp_path_factory.mktemp("rollups")
    builts = [Built(name) for name in LAYOUTS]
    try:
        with ThreadPoolExecutor(len(builts)) as pool:
            layouts = list(pool.map(lambda b: _build(b, thrift, tmp), builts))
        yield {layout.name: layout for layout in layouts}
    finally:
        with ThreadPoolExecutor(len(builts)) as pool:
            list(pool.map(Built.close, builts))


@pytest.fixture(params=list(LAYOUTS))
def rollup_layout(request: pytest.FixtureRequest,
                  rollup_layouts: dict[str, RollupLayout]) -> RollupLayout:
    return rollup_layouts[str(request.param)]


def _cells(store: Store, table: str) -> dict[tuple[bytes, bytes], bytes]:
    """The table's cells, but pytsd's bookkeeping rows (metric UID 0: the rollup lease and
    the coverage record, which no OpenTSDB reader scans)."""
    return {(key, column): value for key, columns in store.table(table).scan()
            if b"pytsd.rollup" not in key for column, value in columns.items()}


def test_rollup_tables_hold_the_same_bytes(rollup_layout: RollupLayout) -> None:
    """pytsd's computed rollups are byte for byte what OpenTSDB stored for the same points."""
    store = rollup_layout.own.tsdb.store
    found = []
    tables = [f"rollup-{interval}" for interval in ROLLUP_INTERVALS] + ["preagg", "preagg-1h"]
    for table in tables:
        ref, got = (_cells(store, f"{side}{table}") for side in ("o-", "p-"))
        assert ref, f"OpenTSDB wrote nothing into {table}"
        found += [f"{table} {key.hex()} {column!r}: OpenTSDB {ref.get((key, column))!r} "
                  f"vs pytsd {got.get((key, column))!r}"
                  for key, column in sorted(set(ref) | set(got))
                  if ref.get((key, column)) != got.get((key, column))]
        print(f"{rollup_layout.name} {table}: {len(ref)} cells compared")
    assert not found, f"{len(found)} cells differ:\n" + "\n".join(found[:30])


def cases(seed: int, count: int) -> list[Case]:
    """Downsampled queries over the data, each rollupUsage, JSON and ``m=``."""
    rng = random.Random(seed)
    metrics = sorted({metric for metric, _ in SERIES} | {PRESET})
    out = []
    for i in range(count):
        metric, downsample = rng.choice(metrics), rng.choice(DOWNSAMPLES)
        aggregator = rng.choice(["sum", "max", "min", "avg", "zimsum", "none"])
        usage = rng.choice(USAGES)
        start = rng.choice([START_S, START_S + 1800, START_S + 3600 + 17])
        end = rng.choice([END_S, END_S - 3600 + 42, START_S + 2 * 3600])
        group = rng.random() < 0.4
        sub: dict[str, Any] = {"aggregator": aggregator, "metric": metric,
                               "downsample": downsample}
        if group:
            sub["filters"] = [{"type": "wildcard", "tagk": "host", "filter": "*",
                               "groupBy": True}]
        if usage:
            sub["rollupUsage"] = usage
        if rng.random() < 0.5:
            body = json.dumps({"start": start, "end": end, "queries": [sub]})
            out.append(Case(f"rollup-json-{i}", "rollup", "POST", "/api/query", body, [sub]))
            continue
        parts = [aggregator, *([usage.lower()] if usage else []), downsample, metric]
        m = ":".join(parts) + ("{host=*}" if group else "")
        out.append(Case(f"rollup-m-{i}", "rollup", "GET",
                        f"/api/query?start={start}&end={end}&m={m}", None, [sub]))
    return out + pre_aggregate_cases()


def pre_aggregate_cases() -> list[Case]:
    """``pre-agg`` in ``m=`` and a literal ``_aggregate`` filter in JSON, with and without a
    rollup interval."""
    out = []
    for i, downsample in enumerate(["", "1h-sum:", "1h-max:", "2h-sum:", "1m-sum:"]):
        for usage in ("", "rollup_fallback:"):
            path = (f"/api/query?start={START_S}&end={END_S}"
                    f"&m=sum:pre-agg:{usage}{downsample}{PRESET}{{dc=x}}")
            out.append(Case(f"preagg-m-{i}-{bool(usage)}", "rollup", "GET", path, None,
                            [{"metric": PRESET}]))
        sub: dict[str, Any] = {"aggregator": "sum", "metric": PRESET, "filters": [
            {"type": "literal_or", "tagk": "_aggregate", "filter": "SUM", "groupBy": False}]}
        if downsample:
            sub["downsample"] = downsample.rstrip(":")
        body = json.dumps({"start": START_S, "end": END_S, "queries": [sub]})
        out.append(Case(f"preagg-json-{i}", "rollup", "POST", "/api/query", body, [sub]))
    return out


def test_rollup_reads_agree(rollup_layout: RollupLayout) -> None:
    servers = rollup_layout.servers
    tallies = {who: Tally() for who in servers if who != "reference"}
    from_rollups = 0  # answers with points for the metric that only rollup tables hold
    started = time.monotonic()
    with ThreadPoolExecutor(len(servers)) as pool:
        for case in cases(SEED + len(rollup_layout.name), QUERIES):
            futures = {who: pool.submit(server.request, case.method, case.path, case.body)
                       for who, server in servers.items()}
            answers = {who: future.result() for who, future in futures.items()}
            ref = answers.pop("reference")
            assert ref[0] == 200, f"{case.describe()}: OpenTSDB {ref}"
            if PRESET in case.describe() and json.loads(ref[1]):
                from_rollups += 1
            for who, answer in answers.items():
                tallies[who].record(case, who, compare(ref, answer))
    print(f"{rollup_layout.name}: {from_rollups} answers read from rollup tables alone, "
          f"all answered in {time.monotonic() - started:.1f} s")
    assert from_rollups >= 20, "too few queries were answered from the rollup tables"
    failures = []
    for who, tally in tallies.items():
        print(f"{rollup_layout.name} rollups {who}: {tally.agreed}/{tally.total()} agree, "
              f"declared {tally.declared_cases} {dict(sorted(tally.declared.items()))}, "
              f"{len(tally.failures)} undeclared")
        failures += tally.failures
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"differential-rollups-{rollup_layout.name}.txt").write_text(
        "\n".join(failures) + "\n")
    assert not failures, f"{len(failures)} undeclared differences:\n" + "\n".join(failures[:30])
