"""Where ``hbase:meta`` is served, from ZooKeeper: one ``getData`` of
``<basedir>/meta-region-server`` in a session of its own, closed at once.

ZooKeeper's client protocol (jute encoding, big-endian, each message prefixed by its length as a
4-byte integer): a ``ConnectRequest`` (protocol version, last zxid seen, session timeout, session
id, password, read-only flag) answered by a ``ConnectResponse``; then a ``RequestHeader`` (xid,
op code 4 = getData) and ``GetDataRequest`` (path, watch flag), answered by a ``ReplyHeader``
(xid, zxid, error code) and ``GetDataResponse`` (data, then a stat we skip); then op -11 closes
the session.

HBase's znode data: byte 0xFF, the 4-byte length of the writer's id, the id, ``PBUF``, then a
``MetaRegionServer`` message (field 1: ``ServerName`` = host_name 1, port 2, start_code 3).
"""

from __future__ import annotations

import socket
import struct

from app.storage.hbase_native import wire

_GET_DATA = 4
_CLOSE_SESSION = -11
_NO_NODE = -101
_SESSION_TIMEOUT_MS = 10_000
_HEADER = struct.Struct(">iqi")  # ReplyHeader: xid, zxid, err


class ZooKeeperError(OSError):
    """ZooKeeper could not say where ``hbase:meta`` is."""


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    parts: list[bytes] = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            raise ZooKeeperError("ZooKeeper closed the connection")
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)


def _frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    return _recv_exact(sock, size)


def _send(sock: socket.socket, body: bytes) -> None:
    sock.sendall(struct.pack(">i", len(body)) + body)


def get_data(host: str, port: int, path: str, timeout_s: float) -> bytes:
    """The data of the znode ``path``."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        _send(sock, struct.pack(">iqiqi", 0, 0, _SESSION_TIMEOUT_MS, 0, 16) + bytes(16)
              + b"\x00")
        _frame(sock)  # ConnectResponse: a session; nothing in it is needed
        encoded = path.encode()
        _send(sock, struct.pack(">iii", 1, _GET_DATA, len(encoded)) + encoded + b"\x00")
        reply = _frame(sock)
        _xid, _zxid, err = _HEADER.unpack_from(reply)
        if err == _NO_NODE:
            raise ZooKeeperError(f"no znode {path} in ZooKeeper at {host}:{port}")
        if err != 0:
            raise ZooKeeperError(f"ZooKeeper getData {path} failed: error {err}")
        (size,) = struct.unpack_from(">i", reply, _HEADER.size)
        start = _HEADER.size + 4
        data = reply[start:start + max(size, 0)]
        try:  # the session's end; the data is read either way
            _send(sock, struct.pack(">ii", 2, _CLOSE_SESSION))
        except OSError:
            pass
        return data


DEFAULT_PORT = 2181


def parse_quorum(quorum: str) -> list[tuple[str, int]]:
    """``host[:port],...`` (OpenTSDB's ``tsd.storage.hbase.zk_quorum``) as ``(host, port)``s."""
    servers: list[tuple[str, int]] = []
    for part in quorum.split(","):
        part = part.strip()
        if not part:
            continue
        host, colon, port = part.rpartition(":")
        if not colon or not port.isdigit():
            host, port = part, str(DEFAULT_PORT)
        servers.append((host, int(port)))
    if not servers:
        raise ZooKeeperError(f"no ZooKeeper server in {quorum!r}")
    return servers


def meta_server(servers: list[tuple[str, int]], basedir: str,
                timeout_s: float) -> tuple[str, int]:
    """``(host, port)`` of the region server holding ``hbase:meta``, from the first
    ZooKeeper server that answers."""
    path = basedir.rstrip("/") + "/meta-region-server"
    failures: list[str] = []
    for host, port in servers:
        try:
            return parse_meta_region_server(get_data(host, port, path, timeout_s))
        except OSError as exc:
            failures.append(f"{host}:{port}: {exc}")
    raise ZooKeeperError("no ZooKeeper server said where hbase:meta is: " + "; ".join(failures))


def parse_meta_region_server(data: bytes) -> tuple[str, int]:
    if not data or data[0] != 0xFF:
        raise ZooKeeperError("meta-region-server znode without HBase's magic byte")
    (id_length,) = struct.unpack_from(">i", data, 1)
    body = data[5 + id_length:]
    if not body.startswith(b"PBUF"):
        raise ZooKeeperError("meta-region-server znode is not a protobuf (HBase < 0.96?)")
    server = wire.message(wire.first_bytes(wire.message(body[4:]), 1))
    return wire.first_bytes(server, 1).decode(), wire.first_int(server, 2)
