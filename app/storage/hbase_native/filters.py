"""The HBase filter-language strings pytsd's HBase backend builds, as native ``Filter``
messages, so a scan reads the same cells either way. Only the forms ``app.storage.hbase``
writes are known (``KeyOnlyFilter()``, ``KeyOnlyFilter(true)``,
``MultipleColumnPrefixFilter('a', 'b')``, ``RowFilter(=, 'regexstring:...')``, joined by
`` AND ``); anything else raises :class:`Unsupported` and the scan stays on Thrift.

As HBase's ``ParseFilter`` builds them: quoted bytes with a quote doubled; a ``regexstring``
comparator is ``RegexStringComparator(text)``: the bytes decoded as UTF-8, flags DOTALL (32),
charset UTF-8, Java's engine.
"""

from __future__ import annotations

import re

from app.storage.hbase_native import messages, wire

_NAME = re.compile(rb"\s*([A-Za-z]+)\(")
_AND = re.compile(rb"\s+AND\s+")
_DOTALL = 32
_EQUAL = 2  # CompareType


class Unsupported(ValueError):
    """A filter string the native client does not express."""


def _arguments(text: bytes, pos: int) -> tuple[list[bytes], int]:
    """The arguments of a call whose ``(`` ends at ``pos``: quoted strings unquoted, other
    tokens stripped; and the position after the ``)``."""
    args: list[bytes] = []
    while True:
        while pos < len(text) and text[pos:pos + 1] in b" ,":
            pos += 1
        if pos >= len(text):
            raise Unsupported("unterminated filter")
        if text[pos:pos + 1] == b")":
            return args, pos + 1
        if text[pos:pos + 1] == b"'":
            value, pos = _quoted(text, pos + 1)
            args.append(value)
            continue
        token = re.compile(rb"[^,)\s]+").match(text, pos)
        if token is None:
            raise Unsupported("unreadable filter argument")
        args.append(token.group())
        pos = token.end()


def _quoted(text: bytes, pos: int) -> tuple[bytes, int]:
    out = bytearray()
    while pos < len(text):
        if text[pos:pos + 2] == b"''":
            out += b"'"
            pos += 2
        elif text[pos:pos + 1] == b"'":
            return bytes(out), pos + 1
        else:
            out += text[pos:pos + 1]
            pos += 1
    raise Unsupported("unterminated quoted string")


def _one(name: bytes, args: list[bytes]) -> bytes:
    if name == b"KeyOnlyFilter" and args in ([], [b"true"], [b"false"]):
        return messages.key_only_filter(args == [b"true"])
    if name == b"MultipleColumnPrefixFilter" and args:
        return messages.column_prefix_filter(args)
    if name == b"RowFilter" and len(args) == 2 and args[0] == b"=" \
            and args[1].startswith(b"regexstring:"):
        return row_regex_filter(args[1][len(b"regexstring:"):].decode("utf-8"))
    raise Unsupported(f"filter {name.decode(errors='replace')} with these arguments")


def row_regex_filter(regex: str) -> bytes:
    """``RowFilter`` (compare_filter 1 = ``CompareFilter``: compare_op 1 = EQUAL, comparator 2
    = ``Comparator``: name 1, serialized_comparator 2 = ``RegexStringComparator``: pattern 1,
    pattern_flags 2, charset 3)."""
    comparator = (wire.field_bytes(1, regex) + wire.field_varint(2, _DOTALL)
                  + wire.field_bytes(3, "UTF-8"))
    compare = wire.field_varint(1, _EQUAL) + wire.field_bytes(2, wire.field_bytes(
        1, messages.FILTER_PACKAGE + "RegexStringComparator") + wire.field_bytes(2, comparator))
    return messages.named_filter("RowFilter", wire.field_bytes(1, compare))


def from_filter_string(text: bytes | None) -> bytes | None:
    """The native ``Filter`` for a filter-language string (``None`` for none)."""
    if text is None or not text.strip():
        return None
    found: list[bytes] = []
    pos = 0
    while True:
        match = _NAME.match(text, pos)
        if match is None:
            raise Unsupported("not a filter call")
        args, pos = _arguments(text, match.end())
        found.append(_one(match.group(1), args))
        if pos >= len(text.rstrip()):
            break
        joiner = _AND.match(text, pos)
        if joiner is None:
            raise Unsupported("filters joined by anything but AND")
        pos = joiner.end()
    return found[0] if len(found) == 1 else messages.all_filters(found)
