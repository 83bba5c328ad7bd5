"""One connection to an HBase server over its native RPC (``RPC.proto``).

Set up: the preamble ``HBas``, version 0, auth method 80 (SIMPLE), then the
``ConnectionHeader`` prefixed by its length as a 4-byte integer (user_info 1 {effective_user 1},
service_name 2 = ``ClientService``, cell_block_codec_class 3 = ``KeyValueCodec``: a scan's cells
then come back as one cell block, not a protobuf ``Cell`` each). The server answers nothing
when it accepts.

A call: a 4-byte total length, then the ``RequestHeader`` (call_id 1, method_name 3,
request_param 4, timeout 7) and the request, each prefixed by its length as a varint. The
reply mirrors it: a 4-byte total length, the ``ResponseHeader`` (call_id 1, exception 2 =
{exception_class_name 1, stack_trace 2}, cell_block_meta 3 = {length 1}), the
response message, then the cell block (the frame's last ``length`` bytes).

A connection makes one call at a time (no call is left in flight: a timed-out call closes
the connection).
"""

from __future__ import annotations

import getpass
import socket
import struct

from app.storage.hbase_native import wire

PREAMBLE = b"HBas\x00\x50"
CELL_CODEC = "org.apache.hadoop.hbase.codec.KeyValueCodec"
_LENGTH = struct.Struct(">I")
MAX_FRAME_BYTES = 1 << 30


class RpcError(OSError):
    """A call that failed: the server's exception (``exception_class``) or a broken
    connection (``exception_class`` empty; ``timed_out`` if the server did not answer in
    time: asking again would only double the wait). ``sent``: the whole request reached the
    socket, so the server may have acted on it (an append must then not be sent again)."""

    def __init__(self, message: str, exception_class: str = "",
                 timed_out: bool = False, sent: bool = False) -> None:
        super().__init__(message)
        self.exception_class = exception_class
        self.timed_out = timed_out
        self.sent = sent

    @property
    def short_class(self) -> str:
        return self.exception_class.rpartition(".")[2]


def unreachable(cause: BaseException | None) -> bool:
    """A native call's failure that Thrift may not share: the native RPC could not reach an
    answer (ZooKeeper, hbase:meta, a region server's address). Not an exception HBase sent,
    nor a call that timed out (the server is slow: Thrift would wait as long)."""
    if isinstance(cause, RpcError):
        return not cause.exception_class and not cause.timed_out
    return isinstance(cause, OSError)  # ZooKeeperError too


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container): HBase only logs it
        return "pytsd"


def connection_header(service: str = "ClientService") -> bytes:
    user_info = wire.field_bytes(1, _user())
    return (wire.field_bytes(1, user_info) + wire.field_bytes(2, service)
            + wire.field_bytes(3, CELL_CODEC))


class Connection:
    """A socket to one server (``host:port``), set up for ``ClientService`` calls."""

    def __init__(self, host: str, port: int, timeout_s: float,
                 service: str = "ClientService") -> None:
        self.address = f"{host}:{port}"
        self.timeout_s = timeout_s
        self.sock: socket.socket | None = socket.create_connection((host, port),
                                                                   timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        header = connection_header(service)
        self.sock.sendall(PREAMBLE + _LENGTH.pack(len(header)) + header)
        self.next_call_id = 0

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    @property
    def closed(self) -> bool:
        return self.sock is None

    def call(self, method: str, request: bytes, cells: bytes = b"") -> tuple[bytes, bytes]:
        """``(response message, cell block)`` of one call; :class:`RpcError` for the server's
        exception (the connection stays usable) or a broken one (it is closed). ``cells``: a
        cell block sent after the request (``RequestHeader.cell_block_meta`` 5 = its length)."""
        if self.sock is None:
            raise RpcError(f"connection to {self.address} is closed")
        call_id = self.next_call_id
        self.next_call_id = (call_id + 1) & 0x7FFFFFFF
        header = (wire.field_varint(1, call_id) + wire.field_bytes(3, method)
                  + wire.field_bool(4, True)
                  + wire.field_varint(7, int(self.timeout_s * 1000)))
        if cells:
            header += wire.field_bytes(5, wire.field_varint(1, len(cells)))
        body = wire.delimited(header) + wire.delimited(request) + cells
        sent = False  # a frame cut short is dropped by the server, never acted on
        try:
            self.sock.sendall(_LENGTH.pack(len(body)) + body)
            sent = True
            frame = self._frame()
        except OSError as exc:  # timed out or broken: the reply may still come, unread
            self.close()
            raise RpcError(f"{method} call to {self.address} failed: {exc}",
                           timed_out=isinstance(exc, TimeoutError), sent=sent) from exc
        except BaseException:  # cut short (KeyboardInterrupt, ...): a reply may be half read
            self.close()
            raise
        return self._reply(frame, call_id, method)

    def _reply(self, frame: memoryview, call_id: int, method: str) -> tuple[bytes, bytes]:
        data = bytes(frame)
        size, pos = wire.read_varint(data, 0)
        found = wire.message(data[pos:pos + size])
        pos += size
        if wire.first_int(found, 1, -1) != call_id:
            self.close()
            raise RpcError(f"{method} reply from {self.address} for another call")
        exception = found.get(2)
        if exception:
            raise _server_error(method, self.address, wire.first_bytes(found, 2))
        cell_bytes = wire.first_int(wire.message(wire.first_bytes(found, 3)), 1)
        size, pos = wire.read_varint(data, pos)
        response = data[pos:pos + size]
        block = data[len(data) - cell_bytes:] if cell_bytes else b""
        return response, block

    def _frame(self) -> memoryview:
        assert self.sock is not None
        (size,) = _LENGTH.unpack(self._exact(4))
        if size > MAX_FRAME_BYTES:
            raise OSError(f"reply of {size} bytes")
        return memoryview(self._exact(size))

    def _exact(self, size: int) -> bytearray:
        assert self.sock is not None
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            n = self.sock.recv_into(view[got:])
            if n == 0:
                raise OSError("the server closed the connection")
            got += n
        return buf


def _server_error(method: str, address: str, exception: bytes) -> RpcError:
    found = wire.message(exception)
    name = wire.first_bytes(found, 1).decode(errors="replace")
    trace = wire.first_bytes(found, 2).decode(errors="replace")
    first_line = trace.strip().splitlines()[0] if trace.strip() else name
    return RpcError(f"{method} on {address}: {first_line}", name, sent=True)
