"""Fuzzing a real gunicorn server process: schemathesis cases from docs/openapi.yaml and
hostile raw requests over HTTP give no 5xx other than a deliberate 501 (the WSGI passes are in
tests/functional/test_openapi.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from schemathesis import GenerationMode

from tests.e2e.conftest import ROOT, free_port, wait_until_responds
from tests.fuzzing import (
    OPENAPI,
    REQUESTS_PER_EXAMPLE,
    RawRequest,
    assert_not_a_failure,
    operations,
    raw_batches,
)

SCHEMATHESIS_EXAMPLES = 500
RAW_EXAMPLES = 1500
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gunicorn server (2 workers) over a fresh embedded store, for this module alone."""
    from tests.cases.datasets import long_seconds
    from tests.conftest import make_tsdb

    folder = tmp_path_factory.mktemp("fuzz-live")
    url = f"sqlite:///{folder / 'fuzz.db'}"
    tsdb = make_tsdb({"tsd.storage": url, "tsd.core.auto_create_metrics": True})
    from app.tsdb.writer import DataPoint, PointWriter

    assert not any(PointWriter(tsdb).write([DataPoint(*p) for p in long_seconds()]))
    tsdb.close()
    port = free_port()
    log = folder / "gunicorn.log"
    env = {**os.environ, "TSD_STORAGE": url, "GUNICORN_CMD_ARGS": "", "PYTHONPATH": str(ROOT),
           "TSD_CORE_AUTO_CREATE_METRICS": "true", "TSD_STORAGE_SQLITE_SYNCHRONOUS": "NORMAL",
           "GUNICORN_ACCESSLOG": "/dev/null"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "wsgi:application", "--config",
             str(ROOT / "gunicorn.conf.py"), "--bind", f"127.0.0.1:{port}", "--workers", "2"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_until_responds(f"{base_url}/api/version", process, log)
        yield base_url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _live_failure_check(response: requests.Response, what: str) -> None:
    # gunicorn itself answers some malformed requests with HTML 4xx before pytsd sees them
    # (the server helper's part of issue 11); only pytsd's JSON answers are checked for shape.
    if response.headers.get("Content-Type", "").startswith("application/json") \
            or response.status_code >= 500:
        assert_not_a_failure(response.status_code, response.text, what)


def test_schemathesis_against_a_real_server(fuzz_server: str) -> None:
    schema = schemathesis.openapi.from_path(OPENAPI)
    session = requests.Session()
    sent = 0

    @seed(21)
    @settings(max_examples=SCHEMATHESIS_EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=schema.as_strategy(generation_mode=GenerationMode.POSITIVE))
    def fuzz(case: Any) -> None:
        nonlocal sent
        response = case.call(base_url=fuzz_server, session=session, timeout=TIMEOUT_S)
        sent += 1
        what = f"{case.method} {case.formatted_path} {case.query} {case.body!r}"
        _live_failure_check(response, what[:400])

    fuzz()
    print(f"schemathesis against gunicorn: {sent} requests sent")
    assert sent >= SCHEMATHESIS_EXAMPLES // 2


def test_hostile_requests_against_a_real_server(fuzz_server: str) -> None:
    session = requests.Session()
    sent = 0

    @seed(22)
    @settings(max_examples=RAW_EXAMPLES // REQUESTS_PER_EXAMPLE, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(batch=raw_batches(operations()))
    def fuzz(batch: list[RawRequest]) -> None:
        nonlocal sent
        for request in batch:
            response = session.request(request.method, fuzz_server + request.path,
                                       params=request.query, data=request.data,
                                       headers=request.headers, timeout=TIMEOUT_S)
            sent += 1
            _live_failure_check(response, str(request))

    fuzz()
    print(f"hypothesis raw requests against gunicorn: {sent} sent")
    assert sent >= RAW_EXAMPLES
    # The server is still up and serving after all of it.
    assert session.get(f"{fuzz_server}/api/version", timeout=TIMEOUT_S).status_code == 200
