"""``/api/query/gexp`` against the real OpenTSDB 2.4.1: the same seeded data loaded into an
OpenTSDB TSD of this test's own and into pytsd (each through its own ``/api/put``), then
generated expressions over every registered function, plus malformed ones, answered by both.
Differences not claimed by a declared departure fail."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pytest
import requests

from app.engine.gexp_functions import FUNCTIONS
from tests.differential.compare import compare
from tests.differential.departures import ALIAS_ABS
from tests.differential.gexp_cases import METRICS, GexpGenerator, data_set, malformed
from tests.differential.oracle import OpenTSDB, opentsdb_settings
from tests.differential.queries import Case
from tests.differential.test_differential import ARTIFACTS, PytsdClient, Tally, _hbase

SEED = int(os.environ.get("TSD_TEST_DIFF_SEED", "20130102"))
REQUESTS = max(100, int(150 * float(os.environ.get("TSD_TEST_DIFF_SCALE", "1"))))


@dataclass
class Servers:
    opentsdb: OpenTSDB
    pytsd: PytsdClient


def _load(server: Any, data: Any) -> None:
    status, text = server.request("POST", "/api/uid/assign", json.dumps(data.uid_order()))
    assert status == 200, text
    for i in range(0, len(data.points), 200):
        status, text = server.request("POST", "/api/put?details&sync",
                                      json.dumps(data.points[i:i + 200]))
        assert status == 200, text


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    thrift = _hbase()
    run = uuid.uuid4().hex[:8]
    prefix_o, prefix_p = f"gexp{run}o_", f"gexp{run}p_"
    opentsdb = OpenTSDB(f"gexp-{run}", prefix_o, thrift,
                        opentsdb_settings(0, False, compaction=True))
    settings = {"tsd.storage": f"hbase://{thrift}", "tsd.core.auto_create_metrics": True}
    pytsd = None
    try:
        started = time.monotonic()
        opentsdb.start()
        pytsd = PytsdClient({**settings, "tsd.storage.hbase.table_prefix": prefix_p})
        data = data_set(SEED)
        _load(opentsdb, data)
        _load(pytsd, data)
        print(f"\ngexp: OpenTSDB up and {len(data.points)} points loaded into both in "
              f"{time.monotonic() - started:.1f} s")
        yield Servers(opentsdb, pytsd)
    finally:
        opentsdb.stop()
        if pytsd is not None:
            pytsd.close()
        # OpenTSDB's tables are dropped through a pytsd client over them
        PytsdClient({**settings, "tsd.storage.hbase.table_prefix": prefix_o}).close()


def _ask_opentsdb(opentsdb: OpenTSDB, method: str, path: str, body: Any) -> tuple[int, str]:
    try:
        return opentsdb.request(method, path, body)
    except requests.ConnectionError:  # OpenTSDB's parser dies on a character it cannot lex
        return 0, "connection closed without an answer"


def _has_alias(case: Case) -> bool:
    return "alias(" in unquote(case.path)


def _absolute_aliases(answer: tuple[int, str]) -> tuple[int, str]:
    """pytsd's answer with the values of aliased series made absolute, as OpenTSDB 2.4.1's
    alias does (an aliased series is named by its alias, not one of the data's metrics)."""
    status, text = answer
    if status != 200:
        return answer
    series = json.loads(text)
    for one in series:
        if one["metric"] in METRICS:
            continue
        dps = one["dps"]
        if isinstance(dps, dict):
            one["dps"] = {ts: abs(v) for ts, v in dps.items()}
        else:
            one["dps"] = [[ts, abs(v)] for ts, v in dps]
    return status, json.dumps(series)


def test_gexp_against_opentsdb(servers: Servers) -> None:
    generator = GexpGenerator(SEED)
    cases = generator.generate(REQUESTS) + malformed()
    used = {name for name in FUNCTIONS if any(f"exp={name}%28" in c.path for c in cases)}
    assert used == set(FUNCTIONS), f"functions never generated: {set(FUNCTIONS) - used}"
    tally = Tally()
    started = time.monotonic()
    for case in cases:
        ref = _ask_opentsdb(servers.opentsdb, case.method, case.path, case.body)
        got = servers.pytsd.request(case.method, case.path, case.body)
        lines = compare(ref, got)
        if lines and _has_alias(case) and not compare(ref, _absolute_aliases(got)):
            lines = [f"{ALIAS_ABS}: {line}" for line in lines]
        tally.record(case, "pytsd/own", lines)
    print(f"gexp: {tally.agreed}/{tally.total()} agree, declared {tally.declared_cases} "
          f"{dict(sorted(tally.declared.items()))}, {len(tally.failures)} undeclared; "
          f"{len(cases)} requests ({generator.count} generated) in "
          f"{time.monotonic() - started:.1f} s")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "differential-gexp.txt").write_text("\n".join(tally.failures) + "\n")
    (ARTIFACTS / "differential-gexp-declared.txt").write_text("\n".join(tally.claimed) + "\n")
    assert not tally.failures, (f"{len(tally.failures)} undeclared differences:\n"
                                + "\n".join(tally.failures[:30]))

