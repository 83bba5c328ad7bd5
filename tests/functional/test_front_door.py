"""The front door's smaller holes (issue 25): same-origin writes under CORS, basic auth that
costs the same for an unknown user, ``dropcaches`` in ``ro`` mode on the line protocol, plugin
routes whose names cannot clash, and a store outage logged once rather than per request."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, jsonify
from flask.testing import FlaskClient

from app.config import load_config
from app.lineproto.session import TelnetSession
from app.observe.health import StoreHealth
from app.tsdb import TSDB
from plugin import Route, hookimpl
from plugin.credentials import CredentialsFile
from plugin.http import mount_routes
from plugin.manager import PluginHost
from tests.conftest import app_over

POINT = {"metric": "door.m", "timestamp": 1_700_000_000, "value": 1, "tags": {"host": "a"}}


def test_a_same_origin_write_is_allowed_whatever_the_cors_list(
        make_client: Callable[[dict[str, Any]], FlaskClient]) -> None:
    client = make_client({"tsd.http.request.enable_cors": "true",
                          "tsd.http.request.cors_domains": "http://grafana.example:3000",
                          "tsd.core.auto_create_metrics": True})
    # Flask's test client sends Host: localhost; a browser on the UI sends its own origin.
    own = client.post("/api/put", data=json.dumps(POINT), content_type="application/json",
                      headers={"Origin": "http://localhost"})
    assert own.status_code == 204, own.get_json()
    foreign = client.post("/api/put", data=json.dumps(POINT), content_type="application/json",
                          headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403
    assert foreign.get_json()["error"]["message"] == "CORS domain not allowed"


def _median_s(check: Callable[[], object], times: int = 5) -> float:
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        assert check() is None
        spent.append(time.perf_counter() - started)
    return sorted(spent)[times // 2]


def test_an_unknown_user_costs_an_scrypt_like_a_wrong_password(tmp_path: Path) -> None:
    creds = CredentialsFile(tmp_path / "auth.json")
    creds.add_user("alice", "right-password", "read")
    wrong_password = _median_s(lambda: creds.by_password("alice", "wrong"))
    unknown_user = _median_s(lambda: creds.by_password("mallory", "wrong"))
    # scrypt (n=2^14) takes tens of ms; a dictionary miss microseconds. Same order of cost:
    assert wrong_password > 0.005
    assert unknown_user > wrong_password / 3, (unknown_user, wrong_password)


def test_dropcaches_is_refused_on_the_line_protocol_in_ro_mode(
        make_client: Callable[[dict[str, Any]], FlaskClient], tsd_config: dict[str, Any],
        tmp_path: Path) -> None:
    tsdb = TSDB(load_config({**tsd_config, "tsd.mode": "ro"}, environ={}))
    session = TelnetSession(app_over(tsdb), "127.0.0.1:5555")
    reply, close = session.handle_lines([b"dropcaches", b"help"])
    assert not close
    assert reply.decode() == ("unknown command: dropcaches.  Try `help'.\n"
                              "available commands: stats version exit help \n")
    assert app_over(tsdb).test_client().get("/api/dropcaches").status_code == 404


class TwoLambdas:
    @hookimpl
    def pytsd_http_routes(self) -> list[Route]:
        return [Route("twin/a", lambda: jsonify("a")), Route("twin/b", lambda: jsonify("b")),
                Route("twin/c", _shared), Route("twin/d", _shared)]


def _shared() -> Any:
    return jsonify("shared")


def test_plugin_routes_on_lambdas_or_one_view_get_names_that_cannot_clash() -> None:
    host = PluginHost({})
    host.add("twins", TwoLambdas())
    app = Flask(__name__)
    mount_routes(app, host)  # two "<lambda>" views used to fail the boot (AssertionError)
    client = app.test_client()
    assert [client.get(f"/plugin/twin/{x}").get_json() for x in "abcd"] == [
        "a", "b", "shared", "shared"]


def test_a_store_outage_is_logged_once_not_per_request(caplog: pytest.LogCaptureFixture) -> None:
    with closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    tsdb = TSDB(load_config({"tsd.storage": f"hbase://127.0.0.1:{port}",
                             "tsd.storage.hbase.timeout_ms": 300}, environ={}))
    client = app_over(tsdb).test_client()
    caplog.set_level(logging.INFO)
    for _ in range(5):
        assert client.get("/api/suggest?type=metrics").status_code == 503
    failing = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(failing) == 1, [r.getMessage() for r in failing]
    assert failing[0].getMessage().startswith("The store is failing: ")
    # One traceback for the outage (the first failure's cause), none per request.
    assert sum(1 for r in caplog.records if r.exc_info) == 1


def test_the_end_of_an_outage_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    health = StoreHealth()
    caplog.set_level(logging.INFO, logger="app.store")
    health.succeeded()
    health.failed("down")
    health.failed("still down")
    health.succeeded()
    health.succeeded()
    health.failed("down again")
    assert [r.getMessage().split(" after")[0].split(":")[0] for r in caplog.records] == [
        "The store is failing", "The store recovered", "The store is failing"]
    assert "and 2 failed requests" in caplog.records[1].getMessage()


