"""One line-protocol connection's commands.

The contract with the server: the server reads a block of bytes, splits it into complete
lines (``\\n`` terminated; a trailing ``\\r`` removed; each at most the framing limit), and
calls :meth:`TelnetSession.handle_lines` from a worker thread, one call at a time per
connection, before it reads the next block (that is the back-pressure). The answer is the
bytes to write back, in order, and whether the connection must be closed afterwards.
"""

from __future__ import annotations

from typing import Any


class TelnetSession:
    """The commands of one connection. Placeholder: every command is unknown but ``exit``."""

    def __init__(self, app: Any, peer: str) -> None:
        self.app = app
        self.peer = peer

    def handle_lines(self, lines: list[bytes]) -> tuple[bytes, bool]:
        """Execute ``lines`` in order; return the reply bytes and whether to close."""
        replies: list[bytes] = []
        for line in lines:
            words = line.split()
            if not words:
                continue
            if words[0] == b"exit":
                return b"".join(replies), True
            command = words[0].decode("utf-8", "replace")
            replies.append(f"unknown command: {command}.  Try `help'.\n".encode())
        return b"".join(replies), False
