"""``Fsck.fsckFloat`` and ``Fsck.fsckInteger``: one data point's value against the length and
type its qualifier's flags give. Pure; :mod:`app.tsdb.fsck` acts on the verdict.

A single cell is judged on its stored bytes (OpenTSDB's ``DP(kv)``), a point of a compacted
column on what the compaction decodes to (the flags fix its length there, so only an 8-byte
integer that fits in fewer bytes can be found in one).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from app.storage.codec_cells import FLAG_FLOAT, LENGTH_MASK

OK, ENCODING, BAD, VLE = "ok", "encoding", "bad", "vle"
_SIGN_EXTENDED = b"\xff\xff\xff\xff"


@dataclass(frozen=True)
class Verdict:
    """``kind``: OK; ENCODING (a float stored on 8 bytes, flagged 4: ``value_encoding``, fixed
    to the 4 bytes in ``value``); BAD (an unparseable value: ``bad_values``); VLE (an 8-byte
    integer that fits in fewer bytes: not an error, ``qualifier``/``value`` re-encoded)."""

    kind: str
    qualifier: bytes
    value: bytes
    message: str = ""
    # A fix OpenTSDB applies to a point of a compacted column too (else single cells only).
    fixable_compacted: bool = False


def check_value(qualifier: bytes, value: bytes) -> Verdict:
    if qualifier[-1] & FLAG_FLOAT:
        return _float(qualifier, value)
    return _integer(qualifier, value)


def _float(qualifier: bytes, value: bytes) -> Verdict:
    length = (qualifier[-1] & LENGTH_MASK) + 1
    if length == 4 and len(value) == 8:
        if value[:4] == _SIGN_EXTENDED and len(qualifier) == 2:
            return Verdict(ENCODING, qualifier, value[4:],
                           "Floating point value with 0xFF most significant bytes, probably "
                           "caused by sign extension bug present in revisions "
                           "[96908436..607256fc].", fixable_compacted=True)
        if any(value[:4]):
            return Verdict(BAD, qualifier, value, "Floating point value was marked as 4 bytes "
                           "long but was actually 8 bytes long and the first four bytes were "
                           "not zeroed")
        return Verdict(ENCODING, qualifier, value[4:], "Floating point value was marked as 4 "
                       "bytes long but was actually 8 bytes long")
    if length == 8 and len(value) == 4:
        return Verdict(BAD, qualifier, value, "This floating point value was marked as 8 bytes "
                       f"long but was only {len(value)} bytes.")
    if len(value) not in (4, 8):
        return Verdict(BAD, qualifier, value, "This floating point value must be encoded "
                       f"either on 4 or 8 bytes, but it's on {len(value)} bytes.")
    return Verdict(OK, qualifier, value)


def _integer(qualifier: bytes, value: bytes) -> Verdict:
    length = (qualifier[-1] & LENGTH_MASK) + 1
    if len(value) != length:
        return Verdict(BAD, qualifier, value, f"The integer value is {len(value)} bytes long "
                       f"but should be {length} bytes.")
    if length != 8:
        return Verdict(OK, qualifier, value)
    (decoded,) = struct.unpack(">q", value)
    for width, fmt in ((1, ">b"), (2, ">h"), (4, ">i")):
        bound = 1 << (8 * width - 1)
        if -bound <= decoded < bound:
            # OpenTSDB masks the length bits with an AND (7 & (width - 1) = width - 1).
            flags = qualifier[-1] & (0xF0 | (width - 1))
            return Verdict(VLE, qualifier[:-1] + bytes((flags,)),
                           struct.pack(fmt, decoded), fixable_compacted=True)
    return Verdict(OK, qualifier, value)
