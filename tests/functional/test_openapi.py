"""``docs/openapi.yaml`` is true to the server's routes, and fuzzing every operation it lists
through WSGI (schemathesis from the schemas, hypothesis from hostile pieces) gives no 5xx other
than a deliberate 501. The pass against a real server process is in tests/e2e/test_fuzz_live.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from flask import Flask
from hypothesis import HealthCheck, given, seed, settings
from schemathesis import GenerationMode

from app.tsdb.writer import DataPoint, PointWriter
from tests.cases.datasets import long_seconds
from tests.conftest import app_over, backend_config, drop_tables, make_tsdb
from tests.fuzzing import (
    OPENAPI,
    REQUESTS_PER_EXAMPLE,
    RawRequest,
    assert_not_a_failure,
    openapi,
    operations,
    raw_batches,
)

# Requests per test; with the other fuzz tests (tests/e2e) well over 10,000 in all.
SCHEMATHESIS_EXAMPLES = 2000
RAW_EXAMPLES = 6000
FLASK_DEFAULT_STATIC = "/static/<path:filename>"  # Flask's own route; pytsd has no such folder


def flask_paths(app: Flask) -> dict[str, set[str]]:
    """The url map as OpenAPI path templates -> verbs (``/api/v1`` mirrors left out)."""
    paths: dict[str, set[str]] = {}
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/api/v1/") or rule.rule == FLASK_DEFAULT_STATIC:
            continue
        template = re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule.rule)
        paths.setdefault(template, set()).update(rule.methods - {"HEAD", "OPTIONS"})
    return paths


@pytest.fixture(scope="module")
def fuzz_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    """An app over data set L on the embedded store (module-scoped: fuzzing is long)."""
    config = backend_config("sqlite", tmp_path_factory.mktemp("fuzz"),
                            {"tsd.core.auto_create_metrics": True,
                             "tsd.storage.sqlite.synchronous": "NORMAL",
                             "tsd.core.histograms.config":
                                 '{"net.opentsdb.core.SimpleHistogramDecoder": 0}'})
    tsdb = make_tsdb(config)
    assert not any(PointWriter(tsdb).write([DataPoint(*p) for p in long_seconds()]))
    app = app_over(tsdb)
    yield app
    drop_tables(tsdb)


def test_openapi_lists_every_route_and_verb(fuzz_app: Flask) -> None:
    described = {path: {verb.upper() for verb in item if verb in ("get", "post", "put",
                                                                  "delete")}
                 for path, item in openapi()["paths"].items()}
    assert described == flask_paths(fuzz_app)


def test_every_api_route_has_its_v1_mirror(fuzz_app: Flask) -> None:
    rules = {rule.rule for rule in fuzz_app.url_map.iter_rules()}
    api = {rule for rule in rules if rule.startswith("/api/") and not rule.startswith("/api/v")}
    assert {"/api/v1/" + rule[len("/api/"):] for rule in api} <= rules


def test_openapi_is_a_valid_schema() -> None:
    schema = schemathesis.openapi.from_path(OPENAPI)
    loaded = [result.ok() for result in schema.get_all_operations()]
    assert len(loaded) == len(operations())


def _schema_strategy(app: Flask, mode: GenerationMode) -> Any:
    schema = schemathesis.openapi.from_path(OPENAPI)
    schema.app = app
    return schema.as_strategy(generation_mode=mode)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_schemathesis_finds_no_server_error(fuzz_app: Flask, mode: GenerationMode) -> None:
    sent = 0

    @seed(11)
    @settings(max_examples=SCHEMATHESIS_EXAMPLES // 2, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=_schema_strategy(fuzz_app, mode))
    def fuzz(case: Any) -> None:
        nonlocal sent
        response = case.call(app=fuzz_app)
        sent += 1
        what = f"{case.method} {case.formatted_path} {case.query} {case.body!r}"
        assert_not_a_failure(response.status_code, response.text, what[:400])

    fuzz()
    print(f"schemathesis ({mode.value}): {sent} requests sent")
    assert sent >= SCHEMATHESIS_EXAMPLES // 4


def test_hostile_requests_find_no_server_error(fuzz_app: Flask) -> None:
    client = fuzz_app.test_client()
    sent = 0

    @seed(12)
    @settings(max_examples=RAW_EXAMPLES // REQUESTS_PER_EXAMPLE, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(batch=raw_batches(operations()))
    def fuzz(batch: list[RawRequest]) -> None:
        nonlocal sent
        for request in batch:
            response = client.open(request.path, method=request.method, data=request.data,
                                   headers=request.headers, query_string=request.query)
            sent += 1
            assert_not_a_failure(response.status_code, response.get_data(as_text=True),
                                 str(request))

    fuzz()
    print(f"hypothesis raw requests: {sent} sent")
    assert sent >= RAW_EXAMPLES
