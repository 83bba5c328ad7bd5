"""Authentication through a real gunicorn (2 workers) and a real browser: tokens, basic auth,
the CLI adding a token while the server runs, and the annotation page logging in through the
browser's own Basic prompt under the strict CSP."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from plugin.credentials import CredentialsFile
from tests.e2e.tsd_process import ROOT, gunicorn_server

T0 = 1_600_000_000
PASSWORD = "browser-pass"


def pytsd(*args: str, env: dict[str, str]) -> str:
    result = subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120, check=True)
    return result.stdout.strip()


@pytest.fixture(scope="module")
def auth_server(demo_store: str, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("auth-server")
    auth_file = folder / "auth.json"
    creds = CredentialsFile(auth_file)
    tokens = {role: creds.add_token(role) for role in ("read", "write")}
    creds.add_user("viewer", PASSWORD, "write")
    env = {"TSD_STORAGE": demo_store, "TSD_CORE_AUTO_CREATE_METRICS": "true",
           "TSD_CORE_AUTHENTICATION_ENABLE": "true",
           "TSD_CORE_AUTHENTICATION_FILE": str(auth_file)}
    with gunicorn_server(env, folder / "gunicorn.log",
                         headers={"Authorization": f"Bearer {tokens['read']}"}) as tsd:
        yield {"url": tsd.url, "tokens": tokens, "env": {**os.environ, "PYTHONPATH": str(ROOT),
                                                          **env}}


def test_anonymous_requests_get_nothing(auth_server: dict[str, Any]) -> None:
    url = auth_server["url"]
    for method, path in (("GET", "/api/query?start=1d-ago&m=sum:sys.cpu.user"),
                         ("GET", "/api/suggest?type=metrics"), ("GET", "/annotations"),
                         ("GET", "/"), ("POST", "/api/put"), ("GET", "/api/config")):
        response = requests.request(method, url + path, timeout=30,
                                    json={"metric": "e2e.anon", "timestamp": T0, "value": 1,
                                          "tags": {"host": "a"}} if method == "POST" else None)
        assert response.status_code == 401, path
        assert response.headers["WWW-Authenticate"].startswith("Basic")
        assert "sys.cpu" not in response.text


def test_tokens_and_roles(auth_server: dict[str, Any]) -> None:
    url, tokens = auth_server["url"], auth_server["tokens"]
    point = {"metric": "e2e.auth", "timestamp": T0, "value": 1, "tags": {"host": "a"}}
    read = {"Authorization": f"Bearer {tokens['read']}"}
    refused = requests.post(f"{url}/api/put", json=point, headers=read, timeout=30)
    assert refused.status_code == 403
    written = requests.post(f"{url}/api/put", json=point, timeout=30,
                            headers={"X-TSD-Token": tokens["write"]})
    assert written.status_code == 204
    query = requests.get(f"{url}/api/query", params={"start": T0 - 10, "end": T0 + 10,
                                                    "m": "sum:e2e.auth"}, headers=read,
                         timeout=30)
    assert query.json()[0]["dps"] == {str(T0): 1}
    basic = requests.get(f"{url}/api/query", params={"start": T0 - 10, "m": "sum:e2e.auth"},
                         auth=("viewer", PASSWORD), timeout=30)
    assert basic.status_code == 200
    assert requests.get(f"{url}/api/dropcaches", timeout=30, headers={
        "X-TSD-Token": tokens["write"]}).status_code == 403


def test_cli_token_works_without_restart(auth_server: dict[str, Any]) -> None:
    env = {**auth_server["env"]}
    token = pytsd("auth", "add-token", "--role", "admin", "--name", "ops", env=env)
    assert token.startswith("tsd_")
    listed = pytsd("auth", "list", env=env)
    assert "\ttoken\tadmin\tops" in listed and token not in listed
    for _ in range(4):  # both workers
        response = requests.get(f"{auth_server['url']}/api/dropcaches", timeout=30,
                                headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200
    assert pytsd("auth", "revoke", "ops", env=env) == "revoked 1"
    for _ in range(4):
        response = requests.get(f"{auth_server['url']}/api/dropcaches", timeout=30,
                                headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 401


def test_annotation_page_logs_in_under_the_csp(auth_server: dict[str, Any], browser: Any
                                               ) -> None:
    """The browser's Basic prompt (credentials given to the context) logs the page in; its
    own API calls then carry them. Any CSP violation is a console error, failing the test."""
    context = browser.new_context(timezone_id="UTC", http_credentials={
        "username": "viewer", "password": PASSWORD})
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    try:
        response = page.goto(f"{auth_server['url']}/annotations?range=24h")
        assert response is not None and response.status == 200
        assert "default-src 'self'" in response.headers["content-security-policy"]
        page.get_by_role("status").filter(has_text="Showing").wait_for()
        assert page.locator("#notes-body tr").count() > 0  # the demo notes, read via the API
        home = page.goto(auth_server["url"] + "/")
        assert home is not None and home.status == 200
    finally:
        context.close()
    assert errors == []
    anonymous = browser.new_context()
    try:
        # Headless Chromium turns the Basic challenge it cannot answer into this error.
        from playwright.sync_api import Error as PlaywrightError

        with pytest.raises(PlaywrightError, match="ERR_INVALID_AUTH_CREDENTIALS"):
            anonymous.new_page().goto(f"{auth_server['url']}/annotations")
        response = anonymous.request.get(f"{auth_server['url']}/api/annotations?start_time=1")
        assert response.status == 401
    finally:
        anonymous.close()
