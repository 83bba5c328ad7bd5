"""The credentials file of the ``auth`` plugin: API tokens and users, each with a role.

Only hashes are stored. Tokens are 256 random bits, so one SHA-256 is enough and lookups are
a dictionary hit. Passwords are chosen by people, so they get scrypt (salted, deliberately
slow); a verified ``user:password`` is then remembered in memory by its SHA-256 so that
Grafana's basic auth on every request costs a hash, not an scrypt.

The file is JSON, written atomically with mode 0600; the server re-reads it when its
modification time changes, so ``pytsd auth add-token`` needs no restart.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from plugin.spec import ROLES

TOKEN_PREFIX = "tsd_"
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
VERIFIED_CACHE_SIZE = 1024


class CredentialsError(ValueError):
    """Bad input to the credentials file (unknown role, duplicate user, unreadable file)."""


@dataclass(frozen=True)
class Credential:
    kind: str  # "token" or "user"
    name: str  # the user name, or the token's label
    role: str
    hash: str  # token: sha256 hex; user: scrypt$n$r$p$salt$hex
    id: str  # a short public handle (list, revoke)
    created_s: int


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def password_hash(password: str, salt: bytes | None = None) -> str:
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=SCRYPT_N, r=SCRYPT_R,
                            p=SCRYPT_P, maxmem=64 * 1024 * 1024)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${salt.hex()}${digest.hex()}"


def password_matches(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt_hex, digest_hex = stored.split("$")
        if scheme != "scrypt":
            return False
        digest = hashlib.scrypt(password.encode("utf-8"), salt=bytes.fromhex(salt_hex),
                                n=int(n), r=int(r), p=int(p), maxmem=64 * 1024 * 1024)
    except ValueError:
        return False
    return hmac.compare_digest(digest.hex(), digest_hex)


@functools.cache
def _dummy_hash() -> str:
    """A hash no password matches (of random bytes), verified for unknown users."""
    return password_hash(secrets.token_urlsafe(32))


def _check_role(role: str) -> str:
    if role not in ROLES:
        raise CredentialsError(f"Unknown role {role!r}: use one of {', '.join(ROLES)}")
    return role


class CredentialsFile:
    """The file, and the lookups the server makes against it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._version: tuple[int, int, int] | None = None
        self._entries: list[Credential] = []
        self._tokens: dict[str, Credential] = {}
        self._users: dict[str, Credential] = {}
        self._verified: dict[str, Credential] = {}

    # --- reading -----------------------------------------------------------------------------

    def entries(self) -> list[Credential]:
        self._refresh()
        return list(self._entries)

    def _refresh(self) -> None:
        """Re-read the file when it changed (one ``stat`` per call)."""
        try:
            stat = self.path.stat()
            # The inode changes on every save (an atomic rename), even within one mtime tick.
            version: tuple[int, int, int] | None = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            version = None
        if version == self._version and (version is not None or not self._entries):
            return
        with self._lock:
            entries = self._read() if version is not None else []
            self._entries = entries
            self._tokens = {c.hash: c for c in entries if c.kind == "token"}
            self._users = {c.name: c for c in entries if c.kind == "user"}
            self._verified = {}
            self._version = version

    def _read(self) -> list[Credential]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            return [Credential(**item) for item in raw.get("credentials", [])]
        except (OSError, ValueError, TypeError) as exc:
            raise CredentialsError(f"Cannot read the credentials file {self.path}: {exc}") from exc

    def by_token(self, token: str) -> Credential | None:
        self._refresh()
        return self._tokens.get(token_hash(token))

    def by_password(self, user: str, password: str) -> Credential | None:
        self._refresh()
        key = token_hash(f"{user}\0{password}")
        known = self._verified.get(key)
        if known is not None:
            return known
        credential = self._users.get(user)
        # An unknown user costs the same scrypt as a wrong password: the time of a refusal
        # must not tell which user names exist.
        stored = credential.hash if credential is not None else _dummy_hash()
        if not password_matches(password, stored) or credential is None:
            return None
        if len(self._verified) >= VERIFIED_CACHE_SIZE:
            self._verified.clear()
        self._verified[key] = credential
        return credential

    # --- writing (the CLI) -------------------------------------------------------------------

    def add_token(self, role: str, name: str = "") -> str:
        """Create a token; return it (the only time it is shown)."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        digest = token_hash(token)
        self._save([*self.entries(), Credential("token", name, _check_role(role), digest,
                                                digest[:12], int(time.time()))])
        return token

    def add_user(self, name: str, password: str, role: str) -> None:
        if not name or ":" in name:
            raise CredentialsError("A user name must be non-empty and contain no ':'")
        if len(password) < 8:
            raise CredentialsError("A password must have at least 8 characters")
        if any(c.kind == "user" and c.name == name for c in self.entries()):
            raise CredentialsError(f"User {name!r} exists; revoke it first")
        self._save([*self.entries(), Credential("user", name, _check_role(role),
                                                password_hash(password),
                                                token_hash(name)[:12], int(time.time()))])

    def revoke(self, handle: str) -> int:
        """Remove the tokens and users whose id or name is ``handle``; return how many."""
        entries = self.entries()
        kept = [c for c in entries if handle not in (c.id, c.name)]
        if len(kept) != len(entries):
            self._save(kept)
        return len(entries) - len(kept)

    def _save(self, entries: list[Credential]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body: dict[str, Any] = {"version": 1, "credentials": [asdict(c) for c in entries]}
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(body, out, indent=1)
        os.replace(temp, self.path)
        self._version = None
        self._entries = []
