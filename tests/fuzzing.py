"""Shared by the fuzz tests: the OpenAPI description, request generators and the 5xx check.

The fuzz tests send generated requests to every operation of ``docs/openapi.yaml``: cases
schemathesis derives from the schemas (valid and invalid), and raw requests hypothesis builds
from hostile pieces (junk bodies, compressed bodies, odd parameters). The only acceptable 5xx
is a 501, OpenTSDB's "not implemented".
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
OPENAPI = ROOT / "docs" / "openapi.yaml"
VERBS = ("get", "post", "put", "delete")


def openapi() -> dict[str, Any]:
    return dict(yaml.safe_load(OPENAPI.read_text()))


def operations() -> list[tuple[str, str]]:
    """Every ``(METHOD, path template)`` the description lists."""
    return [(verb.upper(), path) for path, item in openapi()["paths"].items()
            for verb in VERBS if verb in item]


def assert_not_a_failure(status: int, text: str, what: str) -> None:
    """A deliberate 501 is fine; any other status >= 500 is a server failure. A 4xx is JSON:
    OpenTSDB's error body, the per-item report of ``/api/put`` and ``/api/uid/assign``, or
    ``/api/uid/rename``'s ``{"result": "false", "error": "..."}`` (2.4's UniqueIdRpc)."""
    assert status < 500 or status == 501, f"{status} for {what}: {text[:500]}"
    if status >= 400:
        body = json.loads(_unwrap_jsonp(text))
        if body.get("result") == "false":
            assert status == 400 and isinstance(body.get("error"), str), text[:300]
        elif "error" in body:
            assert body["error"]["code"] == status, text[:300]


def _unwrap_jsonp(text: str) -> str:
    """A request the fuzzer gave ``?jsonp=cb`` is answered ``cb({...})``, errors too, as
    OpenTSDB does (``app/api/jsonp.py``): check the JSON inside."""
    found = JSONP.fullmatch(text.strip())
    return found.group(1) if found else text


JSONP = re.compile(r"[A-Za-z_$][\w$.]*\((.*)\)", re.S)

PIECES = ["sys.cpu.user", "host", "web01", "sum", "1m-avg", "*", "{", "}", "=", "|", ",",
          ":", "(", ")", "[", "]", "-", "1h-ago", "0", "-1", "9" * 30, "1e400", "NaN", "null",
          "true", "é", "💥", "\x00", "\\", "%", " ", "regexp((a+)+$)", "0all-zero",
          "1s-avg-zero", "rate{counter,1,2}", "000001000001000001"]
TEXT = st.lists(st.sampled_from(PIECES), max_size=8).map("".join)
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["metric", "tags", "timestamp", "value", "queries", "start", "end",
                         "aggregator", "filters", "downsample", "type", "tagk", "filter",
                         "q", "max", "tsuid", "tsuids", "startTime", "description", "x"]),
        inner, max_size=5),
    max_leaves=20)


@st.composite
def raw_bodies(draw: st.DrawFn) -> tuple[bytes, dict[str, str]]:
    """A request body and its headers: JSON-ish, junk, nested, compressed or broken."""
    kind = draw(st.sampled_from(["json", "text", "deep", "gzip", "deflate", "bad-gzip",
                                 "empty"]))
    if kind == "json":
        return json.dumps(draw(JSON_VALUE)).encode(), {}
    if kind == "text":
        return draw(TEXT).encode(), {}
    if kind == "deep":
        depth = draw(st.integers(1, 3000))
        return (draw(st.sampled_from(["[", '{"a":'])) * depth).encode(), {}
    if kind in ("gzip", "deflate"):
        payload = json.dumps(draw(JSON_VALUE)).encode()
        packed = gzip.compress(payload) if kind == "gzip" else zlib.compress(payload)
        return packed, {"Content-Encoding": kind}
    if kind == "bad-gzip":
        return draw(st.binary(max_size=64)), {"Content-Encoding": "gzip"}
    return b"", {}


def fill_path(template: str, value: str) -> str:
    """The template with every ``{param}`` replaced (URL-quoted) by ``value``."""
    import re
    import urllib.parse

    return re.sub(r"\{[^}]+\}", urllib.parse.quote(value, safe="") or "x", template)


QUERY_NAMES = ["start", "end", "m", "tsuid", "type", "q", "max", "limit", "timeseries",
               "back_scan", "uid", "metric", "tagk", "tagv", "tsuids", "start_time",
               "end_time", "method_override", "summary", "details", "arrays", "resolve"]
QUERY_STRINGS = st.dictionaries(st.sampled_from(QUERY_NAMES), TEXT, max_size=4)
PATH_VALUES = ["x", "tsmeta", "..", "%", "1", "assign", "a/b", "💥"]


@dataclass(frozen=True)
class RawRequest:
    method: str
    path: str
    query: dict[str, str]
    data: bytes
    headers: dict[str, str]

    def __str__(self) -> str:
        return f"{self.method} {self.path} {self.query} {self.data[:200]!r} {self.headers}"


@st.composite
def raw_requests(draw: st.DrawFn, ops: list[tuple[str, str]]) -> RawRequest:
    """One hostile request to one of ``ops``."""
    method, template = draw(st.sampled_from(ops))
    data, headers = draw(raw_bodies())
    path = fill_path(template, draw(st.sampled_from(PATH_VALUES)))
    return RawRequest(method, path, draw(QUERY_STRINGS), data, headers)


# Several requests per hypothesis example: the generator's overhead is per example.
REQUESTS_PER_EXAMPLE = 5


def raw_batches(ops: list[tuple[str, str]]) -> st.SearchStrategy[list[RawRequest]]:
    return st.lists(raw_requests(ops), min_size=REQUESTS_PER_EXAMPLE,
                    max_size=REQUESTS_PER_EXAMPLE)
