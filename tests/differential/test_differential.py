"""pytsd against the real OpenTSDB 2.4.1, both directions, on plain, salted and append tables.

Per table layout: an OpenTSDB *writer* TSD and pytsd each load the same seeded data through
their own ``/api/put`` into table sets of their own (O and P). Every generated request is then
answered by OpenTSDB over O (the reference), by pytsd over P and over O (pytsd reading what
OpenTSDB wrote), and by an OpenTSDB *reader* TSD (compaction off) over P (OpenTSDB reading what
pytsd wrote). Any difference not claimed by a declared departure fails; OpenTSDB's fsck must
find no error in P.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import app_over, make_tsdb
from tests.differential.cells import data_points, differences, uid_cells
from tests.differential.compare import compare
from tests.differential.data import DataSet, build
from tests.differential.departures import (
    DEPARTURES,
    FLAKY,
    Departure,
)
from tests.differential.oracle import OpenTSDB, opentsdb_settings, stop_all
from tests.differential.queries import Case, QueryGenerator, malformed

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
SEED = int(os.environ.get("TSD_TEST_DIFF_SEED", "20130102"))
# layout -> (salt width, appends, generated requests)
LAYOUTS = {"plain": (0, False, 1000), "salted": (1, False, 300), "append": (0, True, 300)}
SCALE = float(os.environ.get("TSD_TEST_DIFF_SCALE", "1"))
PUT_BATCH = 200
# A TSD already running on fresh tables (CI starts one with `make oracle-up`): the plain writer.
RUNNING = os.environ.get("TSD_TEST_OPENTSDB")
RUNNING_PREFIX = os.environ.get("TSD_TEST_OPENTSDB_TABLE_PREFIX", "pytsd_oracle_")


# Layouts are built on threads. Building an app compiles werkzeug's URL rules with ast.parse,
# which CPython 3.11 before 3.11.8 cannot run on two threads at once ("AST constructor
# recursion depth mismatch", gh-106905): one app at a time.
APP_BUILD = threading.Lock()


class PytsdClient:
    """pytsd over one table set, through Flask's test client (the same app as in production)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.tsdb = make_tsdb(config)
        with APP_BUILD:
            self.client = app_over(self.tsdb).test_client()

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, str]:
        response = self.client.open(path, method=method, data=body,
                                    content_type="application/json")
        return response.status_code, response.get_data(as_text=True)

    def close(self, drop: bool = True) -> None:
        from app.storage.hbase import HBaseStore

        store = self.tsdb.store
        if drop and isinstance(store, HBaseStore):
            store.drop_tables()
        self.tsdb.close()


def _shown(lines: Iterable[str], most: int = 12) -> str:
    shown = list(lines)
    more = f"\n    (+{len(shown) - most} more)" if len(shown) > most else ""
    return "\n    ".join(shown[:most]) + more


@dataclass
class Tally:
    agreed: int = 0
    declared_cases: int = 0
    declared: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    claimed: list[str] = field(default_factory=list)  # the declared differences, for review

    def record(self, case: Case, who: str, lines: list[str]) -> None:
        if not lines:
            self.agreed += 1
            return
        # Each difference line must be claimed by a departure that applies to this side.
        usable = [d for d in DEPARTURES if d.sides == "any" or who.startswith("pytsd")]
        claims = [next((d for d in usable if d.applies(case, [line])), None) for line in lines]
        if any(claim is None for claim in claims):
            self.failures.append(f"[{who}] {case.ident}: {case.describe()}\n    "
                                 + _shown(line for line, claim in zip(lines, claims)
                                          if claim is None))
            return
        self.declared_cases += 1
        names = ", ".join(dict.fromkeys(c.name for c in claims if c is not None))
        self.claimed.append(f"[{who}] {case.ident} ({names}): "
                            f"{case.describe()}\n    " + _shown(lines))
        for name in {claim.name for claim in claims if claim is not None}:
            self.declared[name] = self.declared.get(name, 0) + 1

    def total(self) -> int:
        return self.agreed + self.declared_cases + len(self.failures)


def _hbase() -> str:
    address = os.environ.get("TSD_TEST_HBASE")
    if not address:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the differential suite: TSD_TEST_HBASE is not set")
        pytest.skip("the differential suite needs TSD_TEST_HBASE=host:port (make hbase-up)")
    if not shutil.which("java") or not shutil.which("mvn") and not (
            ROOT / ".opentsdb" / "lib").is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the differential suite: java (and mvn once) are needed")
        pytest.skip("the differential suite needs java and maven (scripts/opentsdb/opentsdb.sh)")
    return address


def _load(server: Any, data: DataSet) -> None:
    status, text = server.request("POST", "/api/uid/assign", _json(data.uid_order()))
    assert status == 200, text
    for i in range(0, len(data.points), PUT_BATCH):
        status, text = server.request("POST", "/api/put?details&sync",
                                      _json(data.points[i:i + PUT_BATCH]))
        assert status == 200, text
    for note in data.annotations:
        status, text = server.request("POST", "/api/annotation", _json(note))
        assert status == 200, text


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


@dataclass
class Layout:
    name: str
    data: DataSet
    writer: OpenTSDB
    reader: OpenTSDB
    own: PytsdClient
    foreign: PytsdClient
    requests: int


@pytest.fixture(scope="module", params=list(LAYOUTS))
def layout(request: pytest.FixtureRequest) -> Iterator[Layout]:
    thrift = _hbase()
    name = str(request.param)
    salt, appends, count = LAYOUTS[name]
    run = uuid.uuid4().hex[:8]
    prefix_o, prefix_p = f"diff{run}o_", f"diff{run}p_"
    if name == "plain" and RUNNING:
        prefix_o = RUNNING_PREFIX
        writer = OpenTSDB.running(RUNNING, prefix_o)
    else:
        writer = OpenTSDB(f"diff-{name}-writer", prefix_o, thrift,
                          opentsdb_settings(salt, appends, compaction=True))
    reader = OpenTSDB(f"diff-{name}-reader", prefix_p, thrift,
                      opentsdb_settings(salt, appends, compaction=False))
    pytsd_settings = {"tsd.storage": f"hbase://{thrift}", "tsd.core.auto_create_metrics": True,
                      "tsd.storage.salt.width": salt, "tsd.storage.salt.buckets": 4,
                      "tsd.storage.enable_appends": appends}
    data = build(SEED)
    started = time.monotonic()
    own = foreign = None
    try:
        writer.start()
        own = PytsdClient({**pytsd_settings, "tsd.storage.hbase.table_prefix": prefix_p})
        up_s = time.monotonic() - started
        _load(writer, data)
        _load(own, data)
        loaded_s = time.monotonic() - started - up_s
        reader.start()
        foreign = PytsdClient({**pytsd_settings, "tsd.storage.hbase.table_prefix": prefix_o})
        print(f"\n{name}: writer up {up_s:.1f} s, {len(data.points)} points loaded both ways "
              f"{loaded_s:.1f} s, reader up {time.monotonic() - started - up_s - loaded_s:.1f} s")
        yield Layout(name, data, writer, reader, own, foreign, max(1, int(count * SCALE)))
    finally:
        stop_all((reader, writer))
        if own is not None:
            own.close()  # drops P
        if foreign is not None:
            foreign.close(drop=writer.managed)  # drops O unless it is the running TSD's


def test_differential(layout: Layout) -> None:
    generator = QueryGenerator(SEED + list(LAYOUTS).index(layout.name), layout.data)
    cases = generator.generate(layout.requests) + malformed()
    tallies = {who: Tally() for who in ("pytsd/own", "pytsd/opentsdb-written",
                                        "opentsdb/pytsd-written")}
    servers = {"reference": layout.writer, "pytsd/own": layout.own,
               "pytsd/opentsdb-written": layout.foreign, "opentsdb/pytsd-written": layout.reader}
    spent = dict.fromkeys(servers, 0.0)
    started = time.monotonic()
    # Four servers answer each request at once: the TSDs in their JVMs, pytsd mostly waiting
    # on HBase (its Thrift calls release the GIL).
    with ThreadPoolExecutor(len(servers)) as pool:
        for case in cases:
            args = (case.method, case.path, case.body)
            futures = {who: pool.submit(_timed, server.request, *args)
                       for who, server in servers.items()}
            answers = {}
            for who, future in futures.items():
                answers[who], seconds = future.result()
                spent[who] += seconds
            ref = answers.pop("reference")
            for who, answer in answers.items():
                lines = compare(ref, answer)
                if lines and who == "opentsdb/pytsd-written" and _flaky(layout, case, ref):
                    lines = [f"{FLAKY}: {line}" for line in lines]
                tallies[who].record(case, who, lines)
    elapsed = time.monotonic() - started
    print(f"{layout.name}: answering took " + ", ".join(f"{k} {v:.1f} s" for k, v in spent.items()))
    failures, claimed = [], []
    for who, tally in tallies.items():
        claimed += tally.claimed
        print(f"{layout.name} {who}: {tally.agreed}/{tally.total()} agree, declared "
              f"{tally.declared_cases} {dict(sorted(tally.declared.items()))}, "
              f"{len(tally.failures)} undeclared")
        failures += tally.failures
    print(f"{layout.name}: {len(cases)} requests ({generator.count} generated) in {elapsed:.1f} s")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"differential-{layout.name}.txt").write_text("\n".join(failures) + "\n")
    (ARTIFACTS / f"differential-{layout.name}-declared.txt").write_text("\n".join(claimed) + "\n")
    assert not failures, f"{len(failures)} undeclared differences:\n" + "\n".join(failures[:40])


def _flaky(layout: Layout, case: Case, ref: tuple[int, str]) -> bool:
    """OpenTSDB read the same request differently: a second asking of the reader agrees.

    Only for OpenTSDB against OpenTSDB (both answers are the same code over the same data);
    a difference in pytsd's answers is never retried."""
    again = layout.reader.request(case.method, case.path, case.body)
    return not compare(ref, again)


def _timed(call: Any, *args: Any) -> tuple[Any, float]:
    clock = time.monotonic()
    result = call(*args)
    return result, time.monotonic() - clock


def test_tables_hold_the_same_bytes(layout: Layout) -> None:
    """Same data, same UIDs: every point's qualifier and value bytes, every annotation and UID
    cell are the same in OpenTSDB's tables and in pytsd's (compaction state aside)."""
    reference, own = layout.foreign.tsdb.store, layout.own.tsdb.store
    points = data_points(own, "tsdb")
    found = {"data": differences(data_points(reference, "tsdb"), points),
             "uid": differences(uid_cells(reference, "tsdb-uid"), uid_cells(own, "tsdb-uid"))}
    undeclared = [f"{table} {where}: OpenTSDB {a} vs pytsd {b}"
                  for table, diffs in found.items() for where, a, b in diffs]
    print(f"{layout.name}: {len(points)} stored points and cells compared byte for "
          f"byte, {len(undeclared)} differ")
    assert not undeclared, "\n".join(undeclared[:30])


def test_fsck_clean_on_pytsd_tables(layout: Layout) -> None:
    assert layout.reader.fsck_errors() == 0


@pytest.mark.parametrize("departure", DEPARTURES, ids=lambda d: d.name)
def test_departure_points_at_its_documentation(departure: Departure) -> None:
    lines = (ROOT / departure.doc).read_text(encoding="utf-8").splitlines()
    assert [line for line in lines if departure.anchor in line], \
        f"{departure.doc} no longer says {departure.anchor!r}"
