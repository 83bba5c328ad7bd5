"""CORS for Grafana's browser access mode (contract Q18, OpenTSDB's RpcHandler#applyCorsConfig).

Browsers need, for a credentialed cross-origin request: the origin echoed in
Access-Control-Allow-Origin (``*`` is answered ``*``, never with credentials),
Allow-Credentials ``true``, and, on the preflight, the request's headers (Authorization)
among Allow-Headers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

GRAFANA = "http://grafana.example:3000"
PREFLIGHT = {"Origin": GRAFANA, "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization,content-type"}


@pytest.fixture
def cors_client(make_client: Callable[[dict[str, Any]], FlaskClient]
                ) -> Callable[..., FlaskClient]:
    def build(domains: str, extra: dict[str, str] | None = None) -> FlaskClient:
        return make_client({"tsd.http.request.enable_cors": "true",
                            "tsd.http.request.cors_domains": domains, **(extra or {})})
    return build


def test_off_by_default(client: FlaskClient) -> None:
    response = client.get("/api/suggest?type=metrics", headers={"Origin": GRAFANA})
    assert response.status_code == 200
    assert "Access-Control-Allow-Origin" not in response.headers
    preflight = client.options("/api/query", headers=PREFLIGHT)
    assert preflight.status_code == 405
    assert "Access-Control-Allow-Origin" not in preflight.headers


def test_preflight(cors_client: Callable[..., FlaskClient]) -> None:
    client = cors_client(f"http://other.example, {GRAFANA}")
    response = client.options("/api/query", headers=PREFLIGHT)
    assert response.status_code == 200
    assert response.data == b""
    assert response.headers["Access-Control-Allow-Origin"] == GRAFANA
    assert response.headers["Access-Control-Allow-Credentials"] == "true"
    assert response.headers["Access-Control-Allow-Methods"] == "GET, POST, PUT, DELETE"
    allowed = {h.strip().lower()
               for h in response.headers["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "content-type"} <= allowed


def test_simple_request_and_errors_carry_the_headers(
        cors_client: Callable[..., FlaskClient]) -> None:
    client = cors_client(GRAFANA.upper())  # domains match case-insensitively
    response = client.get("/api/suggest?type=metrics", headers={"Origin": GRAFANA})
    assert response.status_code == 200
    assert response.headers["Access-Control-Allow-Origin"] == GRAFANA
    assert "Origin" in response.headers["Vary"]
    # A browser can only show Grafana the error message if the error carries the headers.
    error = client.get("/api/suggest?type=nope", headers={"Origin": GRAFANA})
    assert error.status_code == 400
    assert error.headers["Access-Control-Allow-Origin"] == GRAFANA


def test_wildcard_domain_never_grants_credentials(
        cors_client: Callable[..., FlaskClient]) -> None:
    """Issue 15: `*` must not reflect any origin with Allow-Credentials (any page could then
    read with the victim's login). It answers `*`, which browsers never pair with cookies."""
    client = cors_client("*")
    response = client.get("/api/version", headers={"Origin": "https://any.example"})
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in response.headers
    preflight = client.options("/api/query", headers={**PREFLIGHT,
                                                      "Origin": "https://evil.example"})
    assert preflight.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in preflight.headers


def test_refused_origin(cors_client: Callable[..., FlaskClient]) -> None:
    client = cors_client(GRAFANA)
    response = client.get("/api/version", headers={"Origin": "https://evil.example"})
    assert response.status_code == 403
    assert response.get_json()["error"] == {
        "code": 403, "message": "CORS domain not allowed",
        "details": "The domain [https://evil.example] is not permitted access"}
    assert "Access-Control-Allow-Origin" not in response.headers
    preflight = client.options("/api/query", headers={**PREFLIGHT,
                                                      "Origin": "https://evil.example"})
    assert preflight.status_code == 403


def test_without_origin_nothing_changes(cors_client: Callable[..., FlaskClient]) -> None:
    client = cors_client(GRAFANA)
    response = client.get("/api/version")
    assert response.status_code == 200
    assert "Access-Control-Allow-Origin" not in response.headers
    assert client.options("/api/version").status_code == 405


def test_credentials_can_be_turned_off(cors_client: Callable[..., FlaskClient]) -> None:
    client = cors_client(GRAFANA, {"tsd.http.request.cors_credentials": "false"})
    response = client.options("/api/query", headers=PREFLIGHT)
    assert response.headers["Access-Control-Allow-Origin"] == GRAFANA
    assert "Access-Control-Allow-Credentials" not in response.headers


def test_only_the_api(cors_client: Callable[..., FlaskClient]) -> None:
    client = cors_client("*")
    response = client.get("/", headers={"Origin": GRAFANA})
    assert "Access-Control-Allow-Origin" not in response.headers
