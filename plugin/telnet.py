"""Authentication of line-protocol ("telnet") connections, as OpenTSDB 2.4 does it.

OpenTSDB's ``AuthenticationChannelHandler`` sits first in a connection's pipeline when
authentication is on: every line is split into words and handed to the plugin's
``authenticateTelnet`` until one succeeds; it answers ``AUTH_SUCCESS`` or ``AUTH_FAIL`` and
runs no command before that. pytsd's built-in plugin takes ``auth <token>`` or
``auth <user> <password>``. After that, each command also needs the right role (``put``
needs write, ``dropcaches`` admin).

The line-protocol session owns one :class:`TelnetGate` per connection and asks it about
each line before executing it::

    reply = self.gate.admit(words)
    if reply is not None:   # an auth attempt or a refused command: answer, don't execute
        replies.append(reply)
        continue
"""

from __future__ import annotations

from collections.abc import Sequence

from plugin.manager import PluginHost
from plugin.spec import AuthState, role_allows

AUTH_SUCCESS = "AUTH_SUCCESS\r\n"
AUTH_FAIL = "AUTH_FAIL\r\n"
COMMAND_ROLES = {"put": "write", "rollup": "write", "histogram": "write",
                 "dropcaches": "admin"}


def command_role(command: str) -> str:
    return COMMAND_ROLES.get(command.lower(), "read")


class TelnetGate:
    """One connection's authentication state."""

    def __init__(self, host: PluginHost) -> None:
        self.host = host
        self.state: AuthState | None = None

    @property
    def required(self) -> bool:
        return self.host.authenticates

    def admit(self, words: Sequence[str]) -> str | None:
        """None to execute the command; else the reply to send instead of executing it."""
        if not words or not self.required:
            return None
        if self.state is None:
            if words[0] == "exit":
                return None
            self.state = self.host.authenticate("pytsd_authenticate_telnet", command=words)
            return AUTH_SUCCESS if self.state is not None else AUTH_FAIL
        needed = command_role(words[0])
        if not role_allows(self.state.role, needed):
            return (f"{words[0]}: forbidden: {self.state.user} has the {self.state.role} "
                    f"role; {words[0]} needs {needed}\n")
        return None
