"""Request bodies that would cost the server: a gzip bomb (capped while inflating), a body over
the raw cap, JSON nested too deep, and errors that would echo megabytes back (issue 11 item 4).
"""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from functools import cache
from typing import Any

import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from tests.conftest import app_over, drop_tables, make_tsdb

MIB = 1 << 20
# Every endpoint that reads a JSON body, with a method it reads it for.
JSON_ENDPOINTS = [("POST", "/api/put"), ("POST", "/api/query"), ("POST", "/api/query/last"),
                  ("POST", "/api/search/lookup"), ("POST", "/api/annotation"),
                  ("PUT", "/api/annotation"), ("DELETE", "/api/annotation"),
                  ("POST", "/api/annotation/bulk"), ("DELETE", "/api/annotation/bulk"),
                  ("POST", "/api/suggest"), ("POST", "/api/uid/assign")]


def error_of(response: TestResponse, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)[:500]
    body = json.loads(response.get_data(as_text=True))
    assert set(body) == {"error"} and body["error"]["code"] == status
    return dict(body["error"])


@cache
def gzip_bomb() -> bytes:
    """About 1 MB of gzip that inflates to 1 GiB of zeros."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(MIB)
    parts = [packer.compress(zeros) for _ in range(1024)]
    return b"".join(parts) + packer.flush()


def test_the_bomb_is_what_it_claims() -> None:
    bomb = gzip_bomb()
    assert len(bomb) < 1.1 * MIB
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    inflated = 0
    pending = bomb
    while pending:
        inflated += len(inflater.decompress(pending, 64 * MIB))
        pending = inflater.unconsumed_tail
    assert inflated == 1 << 30


@pytest.fixture
def make_client(tsd_config: dict[str, Any]) -> Any:
    made = []

    def build(**overrides: Any) -> FlaskClient:
        tsdb = make_tsdb({**tsd_config, **overrides})
        made.append(tsdb)
        return app_over(tsdb).test_client()

    yield build
    for tsdb in made:
        drop_tables(tsdb)


@pytest.mark.parametrize("path", ["/api/put", "/api/query"])
def test_gzip_bomb_is_a_413_without_inflating_it(make_client: Any, path: str) -> None:
    client = make_client()
    bomb = gzip_bomb()
    tracemalloc.start()
    try:
        response = client.post(path, data=bomb, headers={"Content-Encoding": "gzip"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    error = error_of(response, 413)
    assert error["message"] == "The request body is too large once decompressed"
    assert error["details"] == ("It inflates to more than 67108864 bytes "
                                "(tsd.http.request.max_inflated_bytes)")
    # The default cap is 64 MiB: memory follows the cap, not the 1 GiB the body inflates to.
    assert peak < 160 * MIB


def test_inflation_cap_is_exact(make_client: Any) -> None:
    client = make_client(**{"tsd.http.request.max_inflated_bytes": 1000})
    point = {"metric": "sys.cpu.user", "timestamp": 1356998400, "value": 1,
             "tags": {"host": "web01"}}
    text = json.dumps([point] * 40).encode()
    fits = text[:1000].rsplit(b"},", 1)[0] + b"}]"
    assert len(fits) <= 1000 < len(text)
    for encoding, pack in [("gzip", gzip.compress), ("deflate", zlib.compress)]:
        over = client.post("/api/put", data=pack(text), headers={"Content-Encoding": encoding})
        error_of(over, 413)
        ok = client.post("/api/put", data=pack(fits), headers={"Content-Encoding": encoding})
        assert ok.status_code == 204, ok.get_data(as_text=True)


def test_concatenated_gzip_members_are_one_body(make_client: Any) -> None:
    client = make_client()
    point = {"metric": "sys.cpu.user", "timestamp": 1356998400, "value": 1,
             "tags": {"host": "web01"}}
    text = json.dumps([point, {**point, "timestamp": 1356998460}]).encode()
    body = gzip.compress(text[:30]) + gzip.compress(text[30:])
    response = client.post("/api/put?summary", data=body, headers={"Content-Encoding": "gzip"})
    assert response.get_json() == {"success": 2, "failed": 0}


@pytest.mark.parametrize("body", [b"\x1f\x8b\x08garbage", gzip.compress(b"[1, 2, 3]")[:-12]])
def test_broken_gzip_is_a_400(make_client: Any, body: bytes) -> None:
    response = make_client().post("/api/put", data=body, headers={"Content-Encoding": "gzip"})
    assert error_of(response, 400)["message"] == "Unable to decompress the request body"


def test_raw_body_over_the_cap_is_a_413(make_client: Any) -> None:
    client = make_client(**{"tsd.http.request.max_body_bytes": 1000})
    error = error_of(client.post("/api/put", data=b"[" + b" " * 2000 + b"]"), 413)
    assert error == {"code": 413, "message": "The request body is too large",
                     "details": "It is more than 1000 bytes (tsd.http.request.max_body_bytes)"}
    point = {"metric": "sys.cpu.user", "timestamp": 1356998400, "value": 1,
             "tags": {"host": "web01"}}
    assert client.post("/api/put", data=json.dumps(point)).status_code == 204


def test_default_raw_cap_is_32_mib() -> None:
    from app.config import SETTINGS

    assert SETTINGS["tsd.http.request.max_body_bytes"].default == 32 * MIB


@pytest.mark.parametrize(("method", "path"), JSON_ENDPOINTS)
@pytest.mark.parametrize("body", ["[" * 1000, "[" * 100_000, '{"a":' * 5000,
                                  "[" * 990 + "]" * 990])
def test_json_nested_too_deep_is_a_400(client: FlaskClient, method: str, path: str,
                                       body: str) -> None:
    response = client.open(path, method=method, data=body)
    assert 400 <= response.status_code < 500, response.get_data(as_text=True)[:300]
    error_of(response, response.status_code)


def test_nesting_error_says_why(client: FlaskClient) -> None:
    error = error_of(client.post("/api/put", data="[" * 1000), 400)
    assert error == {"code": 400, "message": "Unable to parse the given JSON",
                     "details": "The JSON is nested too deeply"}


def test_a_long_error_does_not_echo_megabytes(client: FlaskClient) -> None:
    name = "x" * 1_000_000
    response = client.get(f"/api/query?start=1h-ago&m=sum:{name}")
    error = error_of(response, 400)
    assert error["message"].startswith("No such name for 'metrics': 'xxx")
    assert error["message"].endswith(" more characters)")
    assert len(response.get_data()) < 5000


def test_names_longer_than_any_row_key_are_simply_unknown(client: FlaskClient) -> None:
    # HBase refuses row keys over 32,767 bytes: such a name cannot exist, and looking it up
    # must not become a storage error (a 500).
    name = "x" * 40_000
    assert client.get(f"/api/suggest?type=metrics&q={name}").get_json() == []
    assigned = client.post("/api/uid/assign", json={"metric": ["sys.cpu.user"], "tagk": ["host"]})
    assert assigned.status_code == 200, assigned.get_data(as_text=True)
    error = error_of(client.get(f"/api/query?start=1h-ago&m=sum:sys.cpu.user{{host={name}}}"),
                     400)
    assert error["message"].startswith("No such name for 'tagv': 'xxx")
    error = error_of(client.get(f"/api/query/last?timeseries={name}"), 400)
    assert error["message"].startswith("No such name for 'metrics': 'xxx")
