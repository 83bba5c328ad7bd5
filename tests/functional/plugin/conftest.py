"""Fixtures: an app with the auth plugin on, a credentials file with one token per role."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from plugin.credentials import CredentialsFile

NOW_S = 1_700_000_000


@dataclass
class Credentials:
    path: Path
    tokens: dict[str, str]  # role -> token
    password: str = "grafana-pass"

    def bearer(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    def basic(self, user: str, password: str | None = None) -> dict[str, str]:
        raw = f"{user}:{self.password if password is None else password}".encode()
        return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


@pytest.fixture
def credentials(tmp_path: Path) -> Credentials:
    path = tmp_path / "auth.json"
    creds = CredentialsFile(path)
    tokens = {role: creds.add_token(role, f"{role}-token") for role in ("read", "write", "admin")}
    for role in ("read", "write", "admin"):
        creds.add_user(f"{role}-user", "grafana-pass", role)
    return Credentials(path, tokens)


@pytest.fixture
def auth_client(make_client: Callable[[dict[str, Any]], FlaskClient],
                credentials: Credentials) -> Callable[..., FlaskClient]:
    """A client of an app with authentication on (extra settings may be added)."""

    def build(**extra: Any) -> FlaskClient:
        return make_client({"tsd.core.authentication.enable": True,
                            "tsd.core.authentication.file": str(credentials.path),
                            "tsd.core.auto_create_metrics": True, **extra})

    return build
