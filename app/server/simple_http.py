"""The everyday HTTP/1.1 request and answer, framed without h11's state machine (pure).

A keep-alive client's ``POST /api/put`` spends ~100-150 µs per request in h11 (a parser made
per request, its events and state changes), as much as Flask's whole request. Most requests
are the plain shape: HTTP/1.1, one Host, at most one Content-Length, no Transfer-Encoding,
Expect or Connection header, ``\\r\\n`` line ends. This module reads and writes that shape
alone, with h11's own grammar (``h11/_abnf.py``, RFC 9110/9112), and gives None for anything
else: the caller then takes h11's path, which decides it as before. So a request is accepted
or refused, and an answer written, byte for byte as h11 would
(``tests/unit/test_simple_http.py`` compares the two on every shape).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# h11's grammar (h11/_abnf.py): a header field, the request line.
_TOKEN = rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+"
_FIELD_VCHAR = rb"[^\x00\s]"
_FIELD_CONTENT = _FIELD_VCHAR + rb"+(?:[ \t]+" + _FIELD_VCHAR + rb"+)*"
_FIELD_VALUE = rb"(?:" + _FIELD_CONTENT + rb")?"
_HEADER_RE = re.compile(rb"(" + _TOKEN + rb"):[ \t]*(" + _FIELD_VALUE + rb")[ \t]*")
# HTTP/1.1 only: a 1.0 client's connection closes after each answer, which h11 decides.
_REQUEST_LINE_RE = re.compile(rb"(" + _TOKEN + rb") ([\x21-\x7e]+) HTTP/1\.1")
_NAME_RE = re.compile(_TOKEN)
_VALUE_RE = re.compile(_FIELD_VALUE)
_DIGITS_RE = re.compile(rb"[0-9]{1,20}")  # h11's CONTENT_LENGTH_MAX_DIGITS is 20
_REASON_RE = re.compile(rb"[\x20-\x7e]*")
# Headers whose meaning h11 acts on (framing, keep-alive, 100-continue, upgrades):
# a request that has any of them takes h11's path.
_FRAMING_NAMES = frozenset({b"transfer-encoding", b"connection", b"expect", b"upgrade"})


@dataclass(frozen=True)
class SimpleHead:
    """A request head as h11's ``Request`` event gives it, and the body's length."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]  # names lower-cased, values without surrounding space
    content_length: int


def parse_head(head: bytes) -> SimpleHead | None:
    """``head``: the request line and headers up to and including the blank line.

    None unless it is the plain shape described above (h11 then reads it)."""
    if not head.endswith(b"\r\n\r\n"):
        return None
    lines = head[:-4].split(b"\r\n")
    line = _REQUEST_LINE_RE.fullmatch(lines[0])
    if line is None:
        return None
    method = line.group(1)
    if method == b"CONNECT":  # h11 treats it as a protocol switch
        return None
    headers: list[tuple[bytes, bytes]] = []
    hosts = 0
    length: bytes | None = None
    for raw in lines[1:]:
        field = _HEADER_RE.fullmatch(raw)
        if field is None:  # a bare \r or \n, a folded line, a bad name or value
            return None
        name = field.group(1).lower()
        value = field.group(2)
        if name in _FRAMING_NAMES:
            return None
        if name == b"host":
            hosts += 1
        elif name == b"content-length":
            if length is not None or _DIGITS_RE.fullmatch(value) is None:
                return None  # a second one, a list, or not a number: h11 decides
            length = value
        headers.append((name, value))
    if hosts != 1:
        return None  # h11 refuses none (HTTP/1.1) and several
    return SimpleHead(method, line.group(2), headers, int(length) if length else 0)


def encode_reply(status: int, reason: str, headers: list[tuple[str, str]],
                 body: bytes) -> bytes | None:
    """The bytes h11 writes for this answer to a plain request (keep-alive, not HEAD),
    ``body`` included; None when it is not the plain shape (h11 then writes it, or refuses
    it). The connection stays open after it, as it would with h11."""
    if not 200 <= status < 600:
        return None
    try:
        reason_bytes = reason.encode("ascii")
        encoded = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]
    except UnicodeEncodeError:
        return None
    if _REASON_RE.fullmatch(reason_bytes) is None:
        return None
    no_body = status in (204, 304)
    length_seen = False
    out = [b"HTTP/1.1 %d %s\r\n" % (status, reason_bytes)]
    for name, value in encoded:
        if _NAME_RE.fullmatch(name) is None or _VALUE_RE.fullmatch(value) is None:
            return None
        lower = name.lower()
        if lower in _FRAMING_NAMES or lower == b"host":
            return None  # h11 frames, closes or reorders: its path
        if lower == b"content-length":
            if length_seen or no_body or value != b"%d" % len(body):
                return None
            length_seen = True
        out.append(b"%s: %s\r\n" % (name, value))
    if no_body:
        if body:
            return None  # h11 refuses it (the caller answers 500)
    elif not length_seen:
        return None  # h11 would send it chunked
    out.append(b"\r\n")
    out.append(body)
    return b"".join(out)
