"""Built-in authentication plugin ``auth``: API tokens and HTTP basic auth, each with a role.

Enable with ``tsd.core.authentication.enable = true`` (``tsd.core.authentication.plugin``
defaults to ``auth``); credentials live in ``tsd.core.authentication.file``, managed with
``pytsd auth``. A request authenticates with any of:

* ``Authorization: Bearer <token>`` or ``X-TSD-Token: <token>`` (Grafana: a custom header);
* ``Authorization: Basic`` of ``user:password`` (Grafana's "Basic auth"), or of
  ``token:<token>`` for clients that only speak basic auth.

A telnet connection sends ``auth <token>`` or ``auth <user> <password>`` first (OpenTSDB's
``AuthenticationChannelHandler`` passes the first line's words to the plugin).
Which role an endpoint needs is the server's decision (``app/api/security.py``), not this
plugin's: another authentication plugin gets the same authorization for free.
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from plugin.credentials import Credential, CredentialsFile
from plugin.spec import AuthState, hookimpl

TOKEN_HEADER = "X-TSD-Token"
TOKEN_USER = "token"  # basic auth with this user name carries a token as the password


class TokenAuthentication:
    """The ``auth`` plugin."""

    def __init__(self) -> None:
        self.credentials: CredentialsFile | None = None
        self._lock = threading.Lock()
        self.succeeded = {"http": 0, "telnet": 0}
        self.denied = {"http": 0, "telnet": 0}

    @hookimpl
    def pytsd_configure(self, config: Mapping[str, Any]) -> None:
        self.credentials = CredentialsFile(config["tsd.core.authentication.file"])
        self.credentials.entries()  # an unreadable file stops the start, not the first request

    @hookimpl
    def pytsd_authenticate_http(self, headers: Mapping[str, str]) -> AuthState | None:
        credential, method = self._from_headers(headers)
        return self._count("http", credential, method)

    @hookimpl
    def pytsd_authenticate_telnet(self, command: Sequence[str]) -> AuthState | None:
        credential = None
        assert self.credentials is not None
        if len(command) == 2 and command[0] == "auth":
            credential = self.credentials.by_token(command[1])
        elif len(command) == 3 and command[0] == "auth":
            credential = self.credentials.by_password(command[1], command[2])
        return self._count("telnet", credential, "telnet")

    @hookimpl
    def pytsd_collect_stats(self) -> list[tuple[str, int, Mapping[str, str]]]:
        return [(f"tsd.authentication.{outcome}", count, {"type": kind})
                for outcome, counts in (("succeeded", self.succeeded), ("denied", self.denied))
                for kind, count in counts.items()]

    def _from_headers(self, headers: Mapping[str, str]) -> tuple[Credential | None, str]:
        assert self.credentials is not None
        token = headers.get(TOKEN_HEADER)
        if token:
            return self.credentials.by_token(token.strip()), "token"
        scheme, _, value = (headers.get("Authorization") or "").strip().partition(" ")
        if scheme.lower() == "bearer":
            return self.credentials.by_token(value.strip()), "token"
        if scheme.lower() == "basic":
            user, password = _basic(value.strip())
            if user == TOKEN_USER:
                return self.credentials.by_token(password), "token"
            return self.credentials.by_password(user, password), "basic"
        return None, ""

    def _count(self, kind: str, credential: Credential | None,
               method: str) -> AuthState | None:
        with self._lock:
            (self.succeeded if credential else self.denied)[kind] += 1
        if credential is None:
            return None
        user = credential.name or f"token:{credential.id}"
        return AuthState(user=user, role=credential.role, method=method)


def _basic(value: str) -> tuple[str, str]:
    """``user, password`` of a Basic credential; empty strings when it is malformed."""
    try:
        text = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return "", ""
    user, sep, password = text.partition(":")
    return (user, password) if sep else ("", "")
