"""The probes of issue 15, each answered safely (authentication off unless stated)."""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Callable
from typing import Any

from flask.testing import FlaskClient

from tests.functional.plugin.conftest import NOW_S, Credentials

POINT = {"metric": "sys.cpu", "timestamp": NOW_S, "value": 1, "tags": {"host": "a"}}
NOTE = {"startTime": NOW_S, "description": "deploy"}


def points(client: FlaskClient) -> list[Any]:
    response = client.get(f"/api/query?start={NOW_S - 3600}&end={NOW_S + 3600}&m=sum:sys.cpu")
    return response.get_json() if response.status_code == 200 else []


def test_text_plain_and_form_bodies_cannot_write(client: FlaskClient) -> None:
    """A cross-site page can POST text/plain or a form without CORS: refused, nothing stored."""
    for content_type in ("text/plain", "application/x-www-form-urlencoded",
                         "multipart/form-data; boundary=x"):
        for path, body in (("/api/put", POINT), ("/api/annotation", NOTE),
                           ("/api/annotation/bulk", [NOTE])):
            response = client.post(path, data=json.dumps(body), content_type=content_type)
            assert response.status_code == 415, (content_type, path)
            assert response.get_json()["error"]["message"] == "Unsupported media type"
    assert points(client) == []
    assert client.get(f"/api/annotations?start_time={NOW_S - 60}").get_json() == []


def test_json_and_gzipped_json_write(client: FlaskClient) -> None:
    assert client.post("/api/put", json=POINT).status_code == 204
    zipped = gzip.compress(json.dumps([{**POINT, "timestamp": NOW_S + 1}]).encode())
    response = client.post("/api/put", data=zipped, headers={
        "Content-Type": "application/json; charset=utf-8", "Content-Encoding": "gzip"})
    assert response.status_code == 204
    assert len(points(client)[0]["dps"]) == 2


def test_cross_site_browser_writes_are_refused(client: FlaskClient) -> None:
    """A foreign Origin (or Sec-Fetch-Site: cross-site) may not write, even with an empty
    body or through a GET with method_override."""
    evil = {"Origin": "https://evil.example"}
    assert client.post("/api/put", json=POINT, headers=evil).status_code == 403
    query_string = f"?start_time={NOW_S}&description=pwned"
    assert client.post("/api/annotation" + query_string, headers=evil).status_code == 403
    assert client.get("/api/annotation" + query_string + "&method_override=post",
                      headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert points(client) == []
    # The same page's own requests (same origin) and non-browser clients are fine.
    same = {"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}
    assert client.post("/api/put", json=POINT, headers=same).status_code == 204
    # Reads from anywhere are not writes.
    assert client.get("/api/version", headers=evil).status_code == 200


def test_listed_cors_origin_may_write(make_client: Callable[[dict[str, Any]], FlaskClient]
                                      ) -> None:
    grafana = "https://grafana.example"
    client = make_client({"tsd.http.request.enable_cors": True,
                          "tsd.http.request.cors_domains": grafana})
    response = client.post("/api/put", json=POINT, headers={"Origin": grafana})
    assert response.status_code == 204
    assert response.headers["Access-Control-Allow-Credentials"] == "true"


def test_read_only_mode_refuses_admin_endpoints(
        make_client: Callable[[dict[str, Any]], FlaskClient]) -> None:
    client = make_client({"tsd.mode": "ro", "tsd.query.allow_delete": True})
    assert client.get("/api/dropcaches").status_code == 404
    assert client.delete("/api/dropcaches").status_code == 404
    assert client.get("/api/uid/assign?metric=x").status_code == 404
    bulk = client.delete("/api/annotation/bulk", json={"startTime": 1, "global": True})
    assert bulk.status_code == 404
    delete = client.post("/api/query", json={"start": 1, "delete": True, "queries": [
        {"aggregator": "sum", "metric": "sys.cpu"}]})
    assert delete.status_code == 400
    assert delete.get_json()["error"]["details"] == "Deleting data is not allowed in tsd.mode=ro"


def test_global_bulk_delete_needs_admin(auth_client: Callable[..., FlaskClient],
                                        credentials: Credentials) -> None:
    client = auth_client()
    assert client.post("/api/annotation", json=NOTE,
                       headers=credentials.bearer("write")).status_code == 200
    wipe = {"startTime": 1, "global": True}
    for role in ("read", "write"):
        response = client.delete("/api/annotation/bulk", json=wipe,
                                 headers=credentials.bearer(role))
        assert response.status_code == 403
    notes = client.get(f"/api/annotations?start_time={NOW_S - 60}",
                       headers=credentials.bearer("read")).get_json()
    assert [n["description"] for n in notes] == ["deploy"]
    response = client.delete("/api/annotation/bulk", json=wipe,
                             headers=credentials.bearer("admin"))
    assert response.get_json()["totalDeleted"] == 1


def test_delete_method_without_allow_delete_is_opentsdbs_400(client: FlaskClient) -> None:
    assert client.post("/api/put", json=POINT).status_code == 204
    response = client.delete(f"/api/query?start={NOW_S - 60}&m=sum:sys.cpu")
    assert response.status_code == 400
    assert response.get_json() == {"error": {
        "code": 400, "message": "Bad request",
        "details": "Deleting data is not enabled (tsd.query.allow_delete=false)"}}
    body = {"start": NOW_S - 60, "delete": True,
            "queries": [{"aggregator": "sum", "metric": "sys.cpu"}]}
    assert client.post("/api/query", json=body).status_code == 400  # never silently ignored
    assert len(points(client)[0]["dps"]) == 1


def test_config_masks_secrets(make_client: Callable[[dict[str, Any]], FlaskClient]) -> None:
    client = make_client({
        "tsd.custom.api_token": "tok-123", "tsd.custom.client_secret": "sec-456",
        "tsd.custom.api_key": "key-789", "tsd.custom.password": "pw-000",
        "tsd.custom.credentials": "cred", "tsd.rtpublisher.webhook.url":
            "https://user:hunter2@hooks.example/in", "tsd.custom.sink": "redis://:pw@cache:6379/0",
    })
    config = client.get("/api/config").get_json()
    text = json.dumps(config)
    for secret in ("tok-123", "sec-456", "key-789", "pw-000", "cred\"", "hunter2", ":pw@"):
        assert secret not in text, secret
    assert config["tsd.rtpublisher.webhook.url"] == "https://user:********@hooks.example/in"
    assert config["tsd.custom.api_token"] == "********"
    assert config["tsd.core.auto_create_tagks"] == "true"  # ordinary keys stay readable


def test_security_headers(client: FlaskClient) -> None:
    for path in ("/", "/annotations", "/api/version", "/api/nope",
                 "/ui/static/annotations/main.js"):
        response = client.get(path)
        response.close()  # the static file's handle
        assert response.headers["X-Content-Type-Options"] == "nosniff", path
        assert response.headers["X-Frame-Options"] == "DENY", path
        assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"], path
    page_csp = client.get("/annotations").headers["Content-Security-Policy"]
    assert page_csp.startswith("default-src 'self'")
    assert "unsafe-inline" not in page_csp
    assert client.get("/api/version").headers["Content-Security-Policy"].startswith(
        "default-src 'none'")


def test_every_answer_carries_each_security_header_once(client: FlaskClient) -> None:
    """The API's answers (a put's 204 and its 400 included), and the pages', each with the
    four headers, once each."""
    api = {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
           "Referrer-Policy": "same-origin",
           "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'"}
    for response in (client.post("/api/put", json=POINT), client.post("/api/put", json=[]),
                     client.get("/api/version"), client.get("/plugin/nope")):
        for name, value in api.items():
            assert response.headers.getlist(name) == [value], (response.status_code, name)
    page = client.get("/annotations")
    assert page.headers.getlist("Referrer-Policy") == ["same-origin"]
    assert page.headers.getlist("Content-Security-Policy") == [
        "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'self'; "
        "form-action 'self'; frame-ancestors 'none'"]


def test_a_views_own_security_header_is_kept(
        make_client: Callable[[dict[str, Any]], FlaskClient]) -> None:
    """A view (a plugin's page, say) that sets one of the headers keeps its value, in any
    letter case; the others are still added."""
    client = make_client({})

    def framed() -> Any:
        return "ok", 200, {"content-security-policy": "default-src 'self'",
                           "X-Frame-Options": "SAMEORIGIN"}

    client.application.add_url_rule("/api/test/framed", "test_framed", framed)
    response = client.get("/api/test/framed")
    assert response.headers.getlist("Content-Security-Policy") == ["default-src 'self'"]
    assert response.headers.getlist("X-Frame-Options") == ["SAMEORIGIN"]
    assert response.headers.getlist("X-Content-Type-Options") == ["nosniff"]
    assert response.headers.getlist("Referrer-Policy") == ["same-origin"]


def test_a_chunked_form_body_cannot_write(client: FlaskClient) -> None:
    """A chunked body has no Content-Length: it is checked for its type all the same."""
    response = client.post("/api/put", input_stream=io.BytesIO(json.dumps(POINT).encode()),
                           headers={"Transfer-Encoding": "chunked",
                                    "Content-Type": "text/plain"})
    assert response.status_code == 415
    assert points(client) == []
