"""The serving model's timeouts and caps, read once per worker from the settings registry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Paths (lower-cased, no trailing slash) whose requests run in the small "heavy" pool: the
# ones that can spend seconds in numpy while holding the GIL.
HEAVY_PREFIXES = ("/api/query", "/q", "/api/search")

# The most bytes read from a socket at once (also the line protocol's block size).
READ_BLOCK_BYTES = 64 * 1024


@dataclass(frozen=True)
class ServerLimits:
    socket_timeout_s: float  # line protocol idle; 0 = never
    connections_limit: int  # per worker; 0 = none
    max_body_bytes: int
    max_line_bytes: int
    max_header_bytes: int
    head_timeout_s: float
    body_timeout_s: float
    keepalive_timeout_s: float
    threads: int
    heavy_threads: int
    queue_limit: int
    telnet_port: int = 0  # a line-protocol-only port; 0 = none
    max_buffered_bytes: int = 256 << 20  # request bodies held at once per worker
    first_byte_timeout_s: float = 5.0  # a new connection's first byte, whatever the protocol
    per_ip_limit: int = 0  # connections from one address, all workers together; 0 = none

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ServerLimits:
        return cls(
            socket_timeout_s=float(config["tsd.core.socket.timeout"]),
            connections_limit=int(config["tsd.core.connections.limit"]),
            max_body_bytes=int(config["tsd.http.request.max_body_bytes"]),
            max_line_bytes=int(config["tsd.http.request.max_line_bytes"]),
            max_header_bytes=int(config["tsd.http.request.max_header_bytes"]),
            head_timeout_s=float(config["tsd.http.request.head_timeout_s"]),
            body_timeout_s=float(config["tsd.http.request.body_timeout_s"]),
            keepalive_timeout_s=float(config["tsd.http.keepalive_timeout_s"]),
            threads=max(1, int(config["tsd.server.threads"])),
            heavy_threads=max(1, int(config["tsd.server.heavy_threads"])),
            queue_limit=max(1, int(config["tsd.server.queue_limit"])),
            telnet_port=int(config["tsd.network.telnet_port"]),
            max_buffered_bytes=int(config["tsd.server.max_buffered_bytes"]),
            first_byte_timeout_s=float(config["tsd.server.first_byte_timeout_s"]),
            per_ip_limit=int(config["tsd.core.connections.per_ip_limit"]),
        )


def is_heavy(path: str) -> bool:
    """Whether a request path belongs to the heavy pool (OpenTSDB routes case-insensitively)."""
    path = path.lower().rstrip("/")
    return any(path == prefix or path.startswith(prefix + "/") for prefix in HEAVY_PREFIXES)
