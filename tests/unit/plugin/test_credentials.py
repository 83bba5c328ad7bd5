"""The auth plugin's credentials file and its telnet gate, through the public interface."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from plugin.credentials import CredentialsError, CredentialsFile
from plugin.manager import PluginHost
from plugin.telnet import AUTH_FAIL, AUTH_SUCCESS, TelnetGate


def host_with_auth(path: Path) -> PluginHost:
    return PluginHost({"tsd.core.authentication.enable": True,
                       "tsd.core.authentication.plugin": "auth",
                       "tsd.core.authentication.file": str(path)})


def basic(user: str, password: str) -> dict[str, str]:
    raw = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {raw}"}


def test_file_holds_hashes_only_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / "auth.json"
    creds = CredentialsFile(path)
    token = creds.add_token("write", "collector")
    creds.add_user("alice", "correct horse", "read")
    text = path.read_text()
    assert token not in text and "correct horse" not in text
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    kinds = sorted((c["kind"], c["role"]) for c in json.loads(text)["credentials"])
    assert kinds == [("token", "write"), ("user", "read")]


def test_lookups(tmp_path: Path) -> None:
    creds = CredentialsFile(tmp_path / "auth.json")
    token = creds.add_token("admin")
    creds.add_user("bob", "s3cret-pass", "write")
    found = creds.by_token(token)
    assert found is not None and found.role == "admin"
    assert creds.by_token(token + "x") is None
    user = creds.by_password("bob", "s3cret-pass")
    assert user is not None and user.role == "write"
    assert creds.by_password("bob", "s3cret-pasS") is None
    assert creds.by_password("nobody", "s3cret-pass") is None


def test_bad_input_is_refused(tmp_path: Path) -> None:
    creds = CredentialsFile(tmp_path / "auth.json")
    with pytest.raises(CredentialsError, match="Unknown role"):
        creds.add_token("root")
    with pytest.raises(CredentialsError, match="at least 8"):
        creds.add_user("carol", "short", "read")
    creds.add_user("carol", "long enough", "read")
    with pytest.raises(CredentialsError, match="exists"):
        creds.add_user("carol", "long enough", "admin")


def test_revoke_takes_effect_without_restart(tmp_path: Path) -> None:
    """The server's copy re-reads the file the CLI changed."""
    path = tmp_path / "auth.json"
    server = host_with_auth(path)
    cli = CredentialsFile(path)
    token = cli.add_token("read", "grafana")
    headers = {"Authorization": f"Bearer {token}"}
    state = server.authenticate("pytsd_authenticate_http", headers=headers)
    assert state is not None and state.role == "read"
    assert cli.revoke("grafana") == 1
    assert server.authenticate("pytsd_authenticate_http", headers=headers) is None


def test_http_credential_shapes(tmp_path: Path) -> None:
    path = tmp_path / "auth.json"
    cli = CredentialsFile(path)
    token = cli.add_token("write")
    cli.add_user("grafana", "viewer-pass", "read")
    host = host_with_auth(path)

    def role(headers: dict[str, str]) -> str | None:
        state = host.authenticate("pytsd_authenticate_http", headers=headers)
        return None if state is None else state.role

    assert role({"Authorization": f"Bearer {token}"}) == "write"
    assert role({"X-TSD-Token": token}) == "write"
    assert role(basic("token", token)) == "write"
    assert role(basic("grafana", "viewer-pass")) == "read"
    assert role(basic("grafana", "viewer-pass")) == "read"  # the verified-credentials cache
    assert role(basic("grafana", "wrong")) is None
    assert role({"Authorization": "Basic !!!"}) is None
    assert role({"Authorization": "Bearer "}) is None
    assert role({}) is None


def test_telnet_auth_as_opentsdb(tmp_path: Path) -> None:
    """OpenTSDB: every line is an auth attempt until one succeeds; AUTH_FAIL/AUTH_SUCCESS."""
    path = tmp_path / "auth.json"
    cli = CredentialsFile(path)
    read_token = cli.add_token("read")
    cli.add_user("tcollector", "collector-pass", "write")
    host = host_with_auth(path)

    gate = TelnetGate(host)
    assert gate.admit(["put", "m", "1", "1", "a=b"]) == AUTH_FAIL  # not executed
    assert gate.admit(["auth", "nope"]) == AUTH_FAIL
    assert gate.admit(["auth", read_token]) == AUTH_SUCCESS
    assert gate.admit(["version"]) is None  # run it
    refused = gate.admit(["put", "m", "1", "1", "a=b"])
    assert refused is not None and "forbidden" in refused and "needs write" in refused

    writer = TelnetGate(host)
    assert writer.admit(["auth", "tcollector", "collector-pass"]) == AUTH_SUCCESS
    assert writer.admit(["put", "m", "1", "1", "a=b"]) is None
    assert writer.admit(["dropcaches"]) is not None  # admin only


def test_telnet_without_auth_runs_everything(tmp_path: Path) -> None:
    gate = TelnetGate(PluginHost({}))
    assert gate.admit(["put", "m", "1", "1", "a=b"]) is None
