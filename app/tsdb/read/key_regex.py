"""The row-key regexp a scan pushes to HBase's region servers (pure: no IO).

OpenTSDB 2.4 sets a ``KeyRegexpFilter`` on every data scan with tag filters
(``QueryUtil.getRowKeyUIDRegex``): ``(?s)^.{salt+metric+timestamp}`` then, per tag key in
UID order, any number of skipped tag pairs and the pair ``\\Qtagk\\E(?:\\Qv1\\E|\\Qv2\\E)``,
matched on the key decoded as ISO-8859-1 (one character per byte). So the region servers drop
the rows of series the literal filters exclude, instead of sending them to the TSD.

pytsd talks to HBase through the Thrift1 gateway, whose only filter is the filter language:
``RowFilter(=, 'regexstring:...')`` builds a ``RegexStringComparator`` that decodes the row key
as UTF-8 (and the pattern too). Binary UID bytes do not survive that decode one for one: a
valid multi-byte sequence becomes one character, a malformed one ``U+FFFD``, whichever bytes it
was. OpenTSDB's byte-counting regexp would then drop rows it should keep. This module builds
instead a regexp that is true of every key the constraints keep, whatever the UIDs' bytes:

* each tag pair becomes the code points that start within its bytes in the decoded key, exact
  where the decode is certain (ASCII, complete sequences), a class of the possibilities where
  it depends on the neighbouring bytes (a sequence cut at either end of the pair);
* the pairs follow one another in tag key UID order (tags are sorted in a row key), anything
  between them (the alignment of OpenTSDB's ``(?:.{6})*`` is not expressible on decoded text);
* not_key constraints are left out: an absence cannot be tested on a superset, and
  OpenTSDB's own ``(?!...)`` after a skip never rejects a row either.

Rows it lets through that the constraints do not keep (a pair's bytes found misaligned, a
non-ASCII UID byte that decodes like its neighbours) are dropped by the byte-level test
(``keys.passes``) that still runs on every row HBase returns. The regexp is pure ASCII (every
character is a ``\\x{...}`` escape), so it travels in the filter string without quoting issues.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from app.storage import codec
from app.tsdb.read.keys import UidConstraint

# More literal values than this in one constraint: the alternation (tried on every row, sent
# with every scanner: ~40 bytes a value) is not worth its size.
MAX_REGEX_LITERALS = 1024
NON_ASCII = "[^\\x{0}-\\x{7f}]"
REPLACEMENT = "\\x{fffd}"  # what the UTF-8 decode puts for a malformed sequence
SEQUENCE_MIN = {2: 0x80, 3: 0x800, 4: 0x10000}  # the least code point of each length
MAX_CODE_POINT = 0x10FFFF  # past it a 4-byte sequence is malformed (and Java's regexp fails)


def row_key_regex(layout: codec.RowKeyLayout, constraints: Sequence[UidConstraint]
                  ) -> str | None:
    """The regexp (Java syntax, over the key decoded as UTF-8) every row key that passes
    ``constraints`` matches; None when no constraint narrows anything (only not_key ones,
    or too many literals)."""
    present = sorted((c for c in constraints if not c.excluded), key=lambda c: c.tagk_uid)
    if not present or any(len(c.literal_uids or ()) > MAX_REGEX_LITERALS for c in present):
        return None
    # Code points that start within the salt, metric and base time: at least one per 4 bytes.
    prefix_chars = -(-layout.tags_start // 4)
    pairs = ".*?".join(_constraint(c) for c in present)
    return f"(?s)^.{{{prefix_chars},}}?{pairs}"


def _constraint(constraint: UidConstraint) -> str:
    if constraint.literal_uids is None:
        return code_points(constraint.tagk_uid)
    if not constraint.literal_uids:
        return "(?!)"  # no value may match (an unresolved value dropped): nothing passes
    tagk = constraint.tagk_uid
    if tagk[-1] < 0x80:
        # The key's code points end with it: the tag key once, then its values (the region
        # server tries the values only where the key matched, as in OpenTSDB's regexp).
        return code_points(tagk) + _either(code_points(v) for v in constraint.literal_uids)
    return _either(code_points(tagk + value) for value in constraint.literal_uids)


def _either(alternatives: Iterable[str]) -> str:
    unique = sorted(set(alternatives))
    return unique[0] if len(unique) == 1 else f"(?:{'|'.join(unique)})"


def code_points(uid_bytes: bytes) -> str:
    """A regexp of the code points that start within ``uid_bytes`` when a key holding them
    is decoded as UTF-8 (with U+FFFD for malformed input), wherever they sit in the key.

    * leading continuation bytes (0x80-0xBF) may belong to a sequence begun before: each is
      absorbed by it or a U+FFFD of its own (a sequence takes at most 3 of them);
    * a sequence still open at the end may be completed by the bytes after: a code point of
      the range its bits allow, or U+FFFDs;
    * the rest decodes the same wherever it sits (a byte after a complete sequence, or after a
      byte that cannot continue one, starts afresh).
    """
    lead_cont = 0
    while lead_cont < len(uid_bytes) and 0x80 <= uid_bytes[lead_cont] <= 0xBF:
        lead_cont += 1
    parts = []
    if lead_cont:
        parts.append(f"{REPLACEMENT}{{{max(0, lead_cont - 3)},{lead_cont}}}")
    body = uid_bytes[lead_cont:]
    open_at = _open_sequence(body)
    parts.append(_certain(body[:open_at]))
    if open_at < len(body):
        parts.append(_open_tail(body[open_at:]))
    return "".join(parts)


def _sequence_length(lead: int) -> int:
    """Bytes of the UTF-8 sequence ``lead`` starts (1 for a byte that starts none)."""
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 1


def _open_sequence(body: bytes) -> int:
    """Where a multi-byte sequence begins that the end of ``body`` cuts (len: none)."""
    for at in range(len(body) - 1, max(-1, len(body) - 4), -1):
        byte = body[at]
        if 0x80 <= byte <= 0xBF:
            continue  # a continuation: look further back for its lead
        if at + _sequence_length(byte) > len(body) and all(
                0x80 <= b <= 0xBF for b in body[at + 1:]):
            return at
        return len(body)
    return len(body)


def _certain(body: bytes) -> str:
    """The code points of bytes whose decode does not depend on what follows; a run of
    U+FFFDs is allowed any count up to its bytes (decoders group malformed bytes
    differently)."""
    out: list[str] = []
    text = body.decode("utf-8", "replace")
    at = 0
    while at < len(text):
        if text[at] == "\ufffd":
            run = 1
            while at + run < len(text) and text[at + run] == "\ufffd":
                run += 1
            out.append(f"{REPLACEMENT}{{1,{3 * run}}}")
            at += run
            continue
        out.append(_escape(ord(text[at])))
        at += 1
    return "".join(out)


def _open_tail(tail: bytes) -> str:
    """A sequence cut by the end: a code point its known bits allow, or U+FFFDs."""
    length = _sequence_length(tail[0])
    missing = length - len(tail)
    bits = tail[0] & (0xFF >> (length + 1))
    for byte in tail[1:]:
        bits = bits << 6 | (byte & 0x3F)
    low = max(bits << (6 * missing), SEQUENCE_MIN[length])  # shorter forms are malformed
    high = min((bits << (6 * missing)) | ((1 << (6 * missing)) - 1), MAX_CODE_POINT)
    replaced = f"{REPLACEMENT}{{1,{len(tail)}}}"
    if high < low:  # the bytes so far are malformed whatever follows
        return replaced
    return f"(?:[{_escape(low)}-{_escape(high)}]|{replaced})"


def _escape(code_point: int) -> str:
    return f"\\x{{{code_point:x}}}"
