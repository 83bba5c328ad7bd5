"""Authentication on: every registered endpoint refuses requests without valid credentials,
roles limit what a token may do, and Grafana's request shapes work with both credential kinds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.functional import grafana_requests as grafana
from tests.functional.plugin.conftest import NOW_S, Credentials

# Values for the variable parts of routes.
ARGUMENTS = {"version": "1", "rest": "x", "search_type": "lookup",
             "filename": "annotations/main.js", "name": "api"}
METHODS = ("GET", "POST", "PUT", "DELETE")
PUT_BODY = [{"metric": "sys.cpu", "timestamp": NOW_S, "value": 1, "tags": {"host": "a"}}]
NOTE_BODY = {"startTime": NOW_S, "description": "deploy"}


def every_request(client: FlaskClient) -> list[tuple[str, str]]:
    """(method, path) for every rule of the app's URL map and every verb it takes."""
    app = client.application
    found = []
    for rule in app.url_map.iter_rules():
        path = rule.rule
        for name in rule.arguments:
            path = path.replace(f"<path:{name}>", ARGUMENTS[name]).replace(
                f"<{name}>", ARGUMENTS[name])
        found += [(method, path) for method in METHODS if method in (rule.methods or ())]
    return found


def snapshot(client: FlaskClient) -> list[Any]:
    tsdb = client.application.extensions["tsdb"]
    return [list(tsdb.data_table().scan()), list(tsdb.uid_table().scan())]


def seed(client: FlaskClient, creds: Credentials) -> None:
    headers = creds.bearer("admin")
    assert client.post("/api/put", json=PUT_BODY, headers=headers).status_code == 204
    assert client.post("/api/annotation", json=NOTE_BODY, headers=headers).status_code == 200


def probe(client: FlaskClient, method: str, path: str, headers: dict[str, str]) -> Any:
    """A request that would write if it got through: a JSON body that is a valid put/note."""
    body = PUT_BODY if path.endswith("/put") else NOTE_BODY
    return client.open(path, method=method, json=body if method != "GET" else None,
                       headers=headers)


@pytest.mark.parametrize("shape", ["none", "bad token", "bad password", "garbage"])
def test_no_endpoint_answers_without_valid_credentials(
        auth_client: Callable[..., FlaskClient], credentials: Credentials, shape: str) -> None:
    client = auth_client(**{"tsd.query.allow_delete": True})
    seed(client, credentials)
    before = snapshot(client)
    headers = {"none": {}, "bad token": {"Authorization": "Bearer tsd_not-a-token"},
               "bad password": credentials.basic("admin-user", "wrong-password"),
               "garbage": {"Authorization": "Basic %%%", "X-TSD-Token": ""}}[shape]
    requests = every_request(client)
    assert len(requests) > 40  # the walk sees the whole API, the UI and static files
    for method, path in requests:
        response = probe(client, method, path, headers)
        assert response.status_code == 401, (method, path, response.status_code)
        assert response.get_json() == {"error": {
            "code": 401, "message": "Unauthorized",
            "details": "Send an API token (Authorization: Bearer, X-TSD-Token) or basic auth "
                       "credentials"}}, (method, path)
        assert response.headers["WWW-Authenticate"].startswith('Basic realm="pytsd"')
        # method_override writes through a GET are refused too
        override = client.get(f"{path}?method_override=delete", headers=headers)
        assert override.status_code == 401
    assert snapshot(client) == before


def test_read_token_cannot_write_and_write_token_cannot_administer(
        auth_client: Callable[..., FlaskClient], credentials: Credentials) -> None:
    client = auth_client(**{"tsd.query.allow_delete": True})
    seed(client, credentials)
    before = snapshot(client)
    checked = {"write": 0, "admin": 0}
    for method, path in every_request(client):
        needs = security_role(client, method, path)
        if needs == "read":
            continue
        checked[needs] += 1
        weaker = ["read"] if needs == "write" else ["read", "write"]
        for role in weaker:
            response = probe(client, method, path, credentials.bearer(role))
            assert response.status_code == 403, (role, method, path, response.status_code)
            assert response.get_json()["error"]["details"] == (
                f"{role}-token has the {role} role; this request needs {needs}")
    assert snapshot(client) == before
    assert checked["write"] >= 10 and checked["admin"] >= 6
    # The query body's "delete": true needs admin too (the verb does not tell).
    delete = {"start": NOW_S - 60, "end": NOW_S + 60, "delete": True,
              "queries": [{"aggregator": "sum", "metric": "sys.cpu"}]}
    response = client.post("/api/query", json=delete, headers=credentials.bearer("write"))
    assert response.status_code == 403
    assert snapshot(client) == before


def security_role(client: FlaskClient, method: str, path: str) -> str:
    from app.api.security import required_role

    with client.application.test_request_context(path, method=method):
        from flask import request

        adapter = client.application.url_map.bind("localhost")
        endpoint, _ = adapter.match(path, method=method)
        return required_role(method, request.path, endpoint)


def test_roles_that_suffice(auth_client: Callable[..., FlaskClient],
                            credentials: Credentials) -> None:
    client = auth_client()
    assert client.get("/api/version", headers=credentials.bearer("read")).status_code == 200
    assert client.get("/annotations", headers=credentials.basic("read-user")).status_code == 200
    assert client.post("/api/put", json=PUT_BODY,
                       headers=credentials.bearer("write")).status_code == 204
    assert client.get("/api/dropcaches", headers=credentials.bearer("admin")).status_code == 200
    assert client.post("/api/put", json=PUT_BODY,
                       headers=credentials.basic("admin-user")).status_code == 204
    # A CORS preflight carries no credentials and reads nothing: CORS answers it.
    preflight = client.options("/api/query", headers={
        "Origin": "https://grafana.example", "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 405  # CORS is off here; never a 401 or data


SETTINGS = grafana.Settings(tsdb_version=3, tsdb_resolution=1, lookup_limit=1000)


def grafana_requests() -> list[grafana.Request]:
    target = {"metric": "sys.cpu", "aggregator": "sum", "downsampleAggregator": "avg",
              "downsampleInterval": "1m", "tags": {"host": "*"}}
    panel = grafana.legacy_panel_request([target], {}, "1m", (NOW_S - 3600) * 1000, SETTINGS)
    assert panel is not None
    backend = grafana.backend_query(grafana.backend_metric(target, 60_000), NOW_S - 3600,
                                    NOW_S + 60, SETTINGS)
    finds = [*grafana.find_query_requests("tag_values(sys.cpu, host)", {}, SETTINGS).values(),
             *grafana.find_query_requests("metrics(sys)", {}, SETTINGS).values()]
    return [panel, backend, *finds]


@pytest.mark.parametrize("how", ["basic auth", "token header", "bearer header"])
def test_grafana_requests_work_with_credentials(
        auth_client: Callable[..., FlaskClient], credentials: Credentials, how: str) -> None:
    """The datasource's "Basic auth" (user + password) and its custom header (name + value)."""
    client = auth_client()
    seed(client, credentials)
    headers = {"basic auth": credentials.basic("read-user"),
               "token header": {"X-TSD-Token": credentials.tokens["read"]},
               "bearer header": credentials.bearer("read")}[how]
    for request in grafana_requests():
        response = client.open(request.url, method=request.method, data=request.body,
                               content_type="application/json" if request.body else None,
                               headers=headers)
        assert response.status_code == 200, (request, response.get_data(as_text=True))
        anonymous = client.open(request.url, method=request.method, data=request.body)
        assert anonymous.status_code == 401
    panel = client.open(grafana_requests()[0].url, method="POST",
                        data=grafana_requests()[0].body, headers=headers)
    assert json.loads(panel.get_data())[0]["dps"]  # the data is really there


# --- the line protocol ---------------------------------------------------------------------


def telnet(client: FlaskClient) -> Any:
    from app.lineproto.session import TelnetSession

    return TelnetSession(client.application, "127.0.0.1:5555")


def send(session: Any, *lines: str) -> str:
    reply, _ = session.handle_lines([line.encode() for line in lines])
    return str(reply.decode())


def test_line_protocol_needs_auth_first(auth_client: Callable[..., FlaskClient],
                                        credentials: Credentials) -> None:
    """OpenTSDB's AuthenticationChannelHandler: until a line authenticates, every line is
    answered AUTH_FAIL and nothing runs."""
    client = auth_client()
    seed(client, credentials)
    before = snapshot(client)
    session = telnet(client)
    put = f"put sys.cpu {NOW_S + 5} 9 host=a"
    lines = [f"{command} x y" for command in session.commands if command != "exit"]
    reply = send(session, put, *lines, "auth nope", f"auth read-user {credentials.password}x")
    assert reply == "AUTH_FAIL\r\n" * (len(lines) + 3)
    assert snapshot(client) == before

    reader = telnet(client)
    assert send(reader, f"auth {credentials.tokens['read']}") == "AUTH_SUCCESS\r\n"
    assert send(reader, put) == ("put: forbidden: read-token has the read role; put needs "
                                 "write\n")
    assert send(reader, "version").startswith("pytsd")
    assert snapshot(client) == before

    writer = telnet(client)
    reply = send(writer, f"auth write-user {credentials.password}", put, "dropcaches")
    assert reply == ("AUTH_SUCCESS\r\n"
                     "dropcaches: forbidden: write-user has the write role; dropcaches needs "
                     "admin\n")
    assert snapshot(client) != before  # the put was stored
    admin = telnet(client)
    assert send(admin, f"auth {credentials.tokens['admin']}", "dropcaches") == (
        "AUTH_SUCCESS\r\nCaches dropped.\n")


def test_line_protocol_without_auth_is_unchanged(client: FlaskClient) -> None:
    assert send(telnet(client), f"put sys.cpu {NOW_S} 1 host=a", "dropcaches") == (
        "Caches dropped.\n")


def test_basic_auth_refuses_an_unknown_user_as_slowly_as_a_wrong_password(
        auth_client: Callable[..., FlaskClient], credentials: Credentials) -> None:
    """Issue 25: over HTTP, the refusal's time must not tell which user names exist."""
    import time

    client = auth_client()

    def median_s(headers: dict[str, str]) -> float:
        spent = []
        for _ in range(5):
            started = time.perf_counter()
            assert client.get("/api/version", headers=headers).status_code == 401
            spent.append(time.perf_counter() - started)
        return sorted(spent)[2]

    wrong_password = median_s(credentials.basic("read-user", "wrong"))
    unknown_user = median_s(credentials.basic("mallory", "wrong"))
    # A wrong password costs an scrypt (tens of ms); an unknown user used to cost a dict miss.
    assert wrong_password > 0.005
    assert unknown_user > wrong_password / 3, (unknown_user, wrong_password)
