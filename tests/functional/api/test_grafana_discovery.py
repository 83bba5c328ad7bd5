"""Grafana's discovery calls, with its exact URLs, read the way Grafana reads the answers.

Requests from shared/notes/grafana-opentsdb-contract.md: §1.1 (Save & test), §1.3
(template-variable functions), §1.4 (editor autocomplete), §1.5-1.6 (aggregator and filter
lists). Path L is the browser (backendSrv: ``{ } =`` and ``*`` percent-encoded, ``,`` raw; a
provisioned ``lookupLimit`` of 1000); path B is the Go backend (``url.Values.Encode``: keys
sorted, everything but ``-_.~`` escaped; ``limit`` is the raw ``lookupLimit``, 0 when not
provisioned). Expected values come from the demo data set's description (app/tsdb/demo.py):
hosts web01, web02, db01 in lga and web03, web04, db02 in sjc; net.if.* add iface=eth0;
http.* exist on the web hosts only, http.requests with status 200 and 500.
"""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

DEMO_METRICS = ["http.latency_ms", "http.requests", "net.if.bytes_in", "net.if.bytes_out",
                "sys.cpu.system", "sys.cpu.user", "sys.mem.used_bytes"]
ALL_HOSTS = ["db01", "db02", "web01", "web02", "web03", "web04"]
LGA_HOSTS = ["db01", "web01", "web02"]
WEB_HOSTS = ["web01", "web02", "web03", "web04"]
# Grafana's fallbacks when these lists are empty (contract §1.5, §1.6).
DEFAULT_AGGREGATORS = {"avg", "sum", "min", "max", "dev", "zimsum", "mimmin", "mimmax"}
DEFAULT_FILTERS = {"wildcard", "iliteral_or", "not_iliteral_or", "not_literal_or", "iwildcard",
                   "literal_or", "regexp"}


def ok_json(client: FlaskClient, url: str) -> Any:
    response = client.get(url)
    assert response.status_code == 200, (url, response.get_data(as_text=True)[:300])
    return response.get_json()


# ------------------------------------------------------------------ how Grafana reads lookups
def tag_names_l(body: Any) -> list[str]:
    """FE: unique keys of results[].tags in first-seen order."""
    keys: list[str] = []
    for result in body["results"]:
        keys += [key for key in result["tags"] if key not in keys]
    return keys


def tag_names_b(body: Any) -> list[str]:
    """BE HandleKeyLookup: unique keys, sorted."""
    return sorted({key for result in body["results"] for key in result["tags"]})


def tag_values_l(body: Any, key: str) -> list[Any]:
    """FE: results[].tags[key] deduplicated in first-seen order (a missing key gives undefined)."""
    values: list[Any] = []
    for result in body["results"]:
        value = result["tags"].get(key)
        if value not in values:
            values.append(value)
    return values


def tag_values_b(body: Any, key: str) -> list[str]:
    """BE HandleKeyValueLookup: present values, deduplicated and sorted."""
    return sorted({r["tags"][key] for r in body["results"] if key in r["tags"]})


# ------------------------------------------------------------------ Save & test (§1.1)
def test_save_and_test_browser_path(demo_client: FlaskClient) -> None:
    response = demo_client.get("/api/suggest?type=metrics&q=cpu&max=1000")
    assert 200 <= response.status_code < 300


def test_save_and_test_backend_path(demo_client: FlaskClient) -> None:
    # CheckHealth: no max; status exactly 200 even though no metric starts with "cpu".
    response = demo_client.get("/api/suggest?q=cpu&type=metrics")
    assert response.status_code == 200
    assert response.get_json() == []


def test_version_answers(demo_client: FlaskClient) -> None:
    # The standalone plugin's e2e loader waits on GET /api/version (contract §6).
    assert ok_json(demo_client, "/api/version")["version"]


# ------------------------------------------------------------------ metrics() and suggest (§1.3)
@pytest.mark.parametrize("url", ["/api/suggest?type=metrics&q=&max=1000",  # metrics(), editor
                                 "/api/suggest?type=metrics&q=&max=0"])
def test_metrics_all(demo_client: FlaskClient, url: str) -> None:
    assert ok_json(demo_client, url) == DEMO_METRICS


def test_metrics_prefix(demo_client: FlaskClient) -> None:
    assert ok_json(demo_client, "/api/suggest?type=metrics&q=sys.&max=1000") == [
        "sys.cpu.system", "sys.cpu.user", "sys.mem.used_bytes"]


def test_suggest_tagk(demo_client: FlaskClient) -> None:
    assert ok_json(demo_client, "/api/suggest?type=tagk&q=h&max=1000") == ["host"]
    assert ok_json(demo_client, "/api/suggest?type=tagk&q=&max=1000") == [
        "dc", "host", "iface", "status"]


def test_suggest_tagv(demo_client: FlaskClient) -> None:
    # Also the editor's tag-value and filter-value autocomplete (§1.4).
    assert ok_json(demo_client, "/api/suggest?type=tagv&q=web&max=1000") == WEB_HOSTS


# ------------------------------------------------------------------ tag_names() (§1.3)
def test_tag_names(demo_client: FlaskClient) -> None:
    body_l = ok_json(demo_client, "/api/search/lookup?m=sys.cpu.user&limit=1000")
    assert sorted(tag_names_l(body_l)) == ["dc", "host"]
    assert len(tag_names_l(body_l)) == 2
    body_b = ok_json(demo_client, "/api/search/lookup?limit=1000&m=net.if.bytes_in")
    assert tag_names_b(body_b) == ["dc", "host", "iface"]


# ------------------------------------------------------------------ tag_values() (§1.3)
@pytest.mark.parametrize(("url_l", "url_b", "key", "expected"), [
    # tag_values(sys.cpu.user, host)
    ("m=sys.cpu.user%7Bhost%3D%2A%7D&limit=1000",
     "limit=1000&m=sys.cpu.user%7Bhost%3D%2A%7D", "host", ALL_HOSTS),
    # tag_values(sys.cpu.user, host, dc=lga): the extra item is passed through as a pair.
    ("m=sys.cpu.user%7Bhost%3D%2A,dc%3Dlga%7D&limit=1000",
     "limit=1000&m=sys.cpu.user%7Bhost%3D%2A%2Cdc%3Dlga%7D", "host", LGA_HOSTS),
    # dc=$dc with lga and sjc selected, 'distributed' format: dc=lga,dc=sjc (ORed).
    ("m=sys.cpu.user%7Bhost%3D%2A,dc%3Dlga,dc%3Dsjc%7D&limit=1000",
     "limit=1000&m=sys.cpu.user%7Bhost%3D%2A%2Cdc%3Dlga%2Cdc%3Dsjc%7D", "host", ALL_HOSTS),
    # A pipe-joined multi-value (Q6) and a custom "All" value of *.
    ("m=sys.cpu.user%7Bhost%3D%2A,dc%3Dlga%7Csjc%7D&limit=1000",
     "limit=1000&m=sys.cpu.user%7Bhost%3D%2A%2Cdc%3Dlga%7Csjc%7D", "host", ALL_HOSTS),
    ("m=sys.cpu.user%7Bhost%3D%2A,dc%3D%2A%7D&limit=1000",
     "limit=1000&m=sys.cpu.user%7Bhost%3D%2A%2Cdc%3D%2A%7D", "host", ALL_HOSTS),
    # tag_values(http.requests, status) and (http.requests, host): web hosts only.
    ("m=http.requests%7Bstatus%3D%2A%7D&limit=1000",
     "limit=1000&m=http.requests%7Bstatus%3D%2A%7D", "status", ["200", "500"]),
    ("m=http.requests%7Bhost%3D%2A%7D&limit=1000",
     "limit=1000&m=http.requests%7Bhost%3D%2A%7D", "host", WEB_HOSTS),
    # tag_values(sys.cpu.user, dc)
    ("m=sys.cpu.user%7Bdc%3D%2A%7D&limit=1000",
     "limit=1000&m=sys.cpu.user%7Bdc%3D%2A%7D", "dc", ["lga", "sjc"]),
])
def test_tag_values(demo_client: FlaskClient, url_l: str, url_b: str, key: str,
                    expected: list[str]) -> None:
    values_l = tag_values_l(ok_json(demo_client, "/api/search/lookup?" + url_l), key)
    assert sorted(values_l) == expected and len(values_l) == len(expected)
    assert tag_values_b(ok_json(demo_client, "/api/search/lookup?" + url_b), key) == expected


def test_tag_values_unprovisioned_limit(demo_client: FlaskClient) -> None:
    # Path B sends limit=0 when lookupLimit is not provisioned: a normal answer, not an error.
    body = ok_json(demo_client, "/api/search/lookup?limit=0&m=sys.cpu.user%7Bhost%3D%2A%7D")
    assert tag_values_b(body, "host") == ALL_HOSTS


# ------------------------------------------------------------------ editor lists (§1.5, §1.6)
def test_aggregators_as_grafana_reads_them(demo_client: FlaskClient) -> None:
    body = ok_json(demo_client, "/api/aggregators")
    assert isinstance(body, list) and all(isinstance(name, str) for name in body)
    assert DEFAULT_AGGREGATORS <= set(sorted(body))


def test_filter_types_as_grafana_reads_them(demo_client: FlaskClient) -> None:
    body = ok_json(demo_client, "/api/config/filters")
    assert isinstance(body, dict)  # Object.keys(body).sort(); an array would give "0", "1", ...
    assert DEFAULT_FILTERS <= set(sorted(body))
