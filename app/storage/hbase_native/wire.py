"""Protocol buffers' wire format (proto2) for the few HBase messages the native scan client
sends and reads: varints, length-delimited fields, and a message read as its fields.

Field numbers are HBase's own (``RPC.proto``, ``Client.proto``, ``HBase.proto``,
``Filter.proto``, ``ZooKeeper.proto`` of hbase-protocol-shaded 2.6); each caller names them.
"""

from __future__ import annotations

from collections.abc import Iterator

VARINT = 0
FIXED64 = 1
LENGTH = 2
FIXED32 = 5


class WireError(ValueError):
    """Bytes that are not the protobuf message expected."""


def varint(value: int) -> bytes:
    """An unsigned varint (a negative ``int32`` is sent as its 64-bit two's complement)."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """``(value, position after it)``."""
    value = shift = 0
    while True:
        if pos >= len(data):
            raise WireError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise WireError("varint too long")


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3 | VARINT) + varint(value)


def field_bool(number: int, value: bool) -> bytes:
    return field_varint(number, int(value))


def field_bytes(number: int, value: bytes | str) -> bytes:
    """A length-delimited field: bytes, a string (UTF-8) or an embedded message."""
    if isinstance(value, str):
        value = value.encode()
    return varint(number << 3 | LENGTH) + varint(len(value)) + value


def delimited(message: bytes) -> bytes:
    """``Message#writeDelimitedTo``: the message prefixed by its length as a varint."""
    return varint(len(message)) + message


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """``(field number, value)`` of each field of a message: an ``int`` for varint and fixed
    fields, ``bytes`` for length-delimited ones."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = read_varint(data, pos)
        number, kind = key >> 3, key & 7
        if kind == VARINT:
            value, pos = read_varint(data, pos)
            yield number, value
        elif kind == LENGTH:
            size, pos = read_varint(data, pos)
            if pos + size > end:
                raise WireError("truncated field")
            yield number, data[pos:pos + size]
            pos += size
        elif kind in (FIXED64, FIXED32):
            width = 8 if kind == FIXED64 else 4
            yield number, int.from_bytes(data[pos:pos + width], "little")
            pos += width
        else:
            raise WireError(f"unsupported wire type {kind}")


def message(data: bytes) -> dict[int, list[int | bytes]]:
    """A message's fields by number (repeated fields keep their order)."""
    found: dict[int, list[int | bytes]] = {}
    for number, value in fields(data):
        found.setdefault(number, []).append(value)
    return found


def first_bytes(found: dict[int, list[int | bytes]], number: int, default: bytes = b"") -> bytes:
    values = found.get(number)
    if not values:
        return default
    value = values[-1]
    if not isinstance(value, bytes):
        raise WireError(f"field {number} is not length-delimited")
    return value


def first_int(found: dict[int, list[int | bytes]], number: int, default: int = 0) -> int:
    values = found.get(number)
    if not values:
        return default
    value = values[-1]
    if not isinstance(value, int):
        raise WireError(f"field {number} is not a varint")
    return value
