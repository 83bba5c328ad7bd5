"""The row-key regexp pushed to HBase (``app.tsdb.read.key_regex``): hand-written expected
regexps, and matches on real row keys decoded as the region server decodes them (UTF-8, U+FFFD
for malformed bytes; ``re`` stands in for Java's regexp, whose syntax here is the same but for
the ``\\x{...}`` escape). Checked on a real HBase: tests/integration/test_hbase_row_regex.py."""

from __future__ import annotations

import random
import re

import pytest

from app.storage import codec
from app.tsdb.read.key_regex import MAX_REGEX_LITERALS, code_points, row_key_regex
from app.tsdb.read.keys import UidConstraint, passes

LAYOUT = codec.RowKeyLayout()
SALTED = codec.RowKeyLayout(salt_width=1, salt_buckets=20)
WIDE = codec.RowKeyLayout(metric_width=4, salt_width=2, salt_buckets=300)
K1, K2, K3 = b"\x00\x00\x01", b"\x00\x00\x02", b"\x00\x00\x03"
V1, V2 = b"\x00\x00\x07", b"\x00\x00\x08"
METRIC = b"\x00\x00\x09"
HOUR_S = 1_700_002_800


def found(regex: str, key: bytes) -> bool:
    """Whether ``regex`` is found in ``key`` as HBase's RegexStringComparator finds it."""
    python = re.sub(r"\\x\{([0-9a-f]+)\}", lambda m: f"\\U{int(m.group(1), 16):08x}", regex)
    return re.search(python, key.decode("utf-8", "replace")) is not None


def key(layout: codec.RowKeyLayout, tags: list[tuple[bytes, bytes]], salt: bytes = b"") -> bytes:
    return salt + METRIC + HOUR_S.to_bytes(4, "big") + b"".join(k + v for k, v in tags)


@pytest.mark.parametrize(("layout", "prefix"), [
    (LAYOUT, "(?s)^.{2,}?"),  # 7 bytes before the tags: at least 2 code points
    (SALTED, "(?s)^.{2,}?"),  # 8
    (WIDE, "(?s)^.{3,}?"),  # 10
])
def test_a_literal_pair_after_the_prefix(layout: codec.RowKeyLayout, prefix: str) -> None:
    regex = row_key_regex(layout, [UidConstraint(K1, False, frozenset({V1}))])
    assert regex == prefix + r"\x{0}\x{0}\x{1}\x{0}\x{0}\x{7}"


def test_pairs_in_tagk_order_values_alternated_keys_alone() -> None:
    constraints = [UidConstraint(K3, False, None),
                   UidConstraint(K1, False, frozenset({V2, V1})),
                   UidConstraint(K2, True, None)]  # not_key: left to the byte-level test
    assert row_key_regex(LAYOUT, constraints) == (
        r"(?s)^.{2,}?\x{0}\x{0}\x{1}(?:\x{0}\x{0}\x{7}|\x{0}\x{0}\x{8}).*?\x{0}\x{0}\x{3}")


def test_a_tag_key_ending_in_a_non_ascii_byte_is_repeated_with_each_value() -> None:
    # 0xc3 may join the value's first byte into one code point: the pairs are written whole
    regex = row_key_regex(LAYOUT, [UidConstraint(b"\x00\x00\xc3", False,
                                                 frozenset({b"\xa9\x00\x01", V1}))])
    assert regex == (r"(?s)^.{2,}?(?:\x{0}\x{0}\x{e9}\x{0}\x{1}"
                     r"|\x{0}\x{0}\x{fffd}{1,3}\x{0}\x{0}\x{7})")


def test_nothing_to_push_down() -> None:
    assert row_key_regex(LAYOUT, []) is None
    assert row_key_regex(LAYOUT, [UidConstraint(K1, True, None)]) is None
    many = frozenset(i.to_bytes(3, "big") for i in range(MAX_REGEX_LITERALS + 1))
    assert row_key_regex(LAYOUT, [UidConstraint(K1, False, many)]) is None


def test_no_value_left_matches_nothing() -> None:
    regex = row_key_regex(LAYOUT, [UidConstraint(K1, False, frozenset())])
    assert regex == "(?s)^.{2,}?(?!)"
    assert not found(regex, key(LAYOUT, [(K1, V1)]))


@pytest.mark.parametrize(("uid", "expected"), [
    # metacharacters, a quote, \E: every byte is an escape, nothing is quoted
    (b"\\E'", r"\x{5c}\x{45}\x{27}"),
    (b".*$", r"\x{2e}\x{2a}\x{24}"),
    (b"\x00\x00\x00", r"\x{0}\x{0}\x{0}"),
    # a complete two-byte sequence is one code point
    (b"\x00\xc3\xa9", r"\x{0}\x{e9}"),
    # a lead byte at the end: completed by the next byte, or a U+FFFD
    (b"\x00\x00\xc8", r"\x{0}\x{0}(?:[\x{200}-\x{23f}]|\x{fffd}{1,1})"),
    # continuation bytes first: maybe absorbed by a sequence begun before
    (b"\xa9\x00A", r"\x{fffd}{0,1}\x{0}\x{41}"),
    (b"\x80\x80\x80\x80", r"\x{fffd}{1,4}"),
    # malformed whatever follows
    (b"\xff\xfe", r"\x{fffd}{1,6}"),
    (b"\x00\xe0\x80", r"\x{0}\x{fffd}{1,2}"),
    # a 4-byte lead past U+10FFFF is malformed: no code point range beyond it
    (b"\x00\xf4\x90", r"\x{0}\x{fffd}{1,2}"),
    (b"\xf0\x9f\x98", r"(?:[\x{1f600}-\x{1f63f}]|\x{fffd}{1,3})"),
])
def test_code_points(uid: bytes, expected: str) -> None:
    assert code_points(uid) == expected


def test_ascii_uids_match_exactly_the_keys_that_pass() -> None:
    keys = [key(LAYOUT, tags) for tags in (
        [(K1, V1)], [(K1, V2)], [(K1, V1), (K3, V2)], [(K2, V1)], [(K2, K1), (K3, V1)],
        [(K1, V2), (K2, V1), (K3, V1)])]
    constraints = [UidConstraint(K1, False, frozenset({V1, V2})), UidConstraint(K3, False, None)]
    regex = row_key_regex(LAYOUT, constraints)
    assert regex is not None
    assert [found(regex, k) for k in keys] == [False, False, True, False, False, True]
    assert [passes(LAYOUT, k, constraints) for k in keys] == [
        False, False, True, False, False, True]


def test_a_salted_key_matches() -> None:
    regex = row_key_regex(SALTED, [UidConstraint(K2, False, frozenset({V1}))])
    assert regex is not None
    assert found(regex, key(SALTED, [(K1, V2), (K2, V1)], salt=b"\x13"))
    assert not found(regex, key(SALTED, [(K1, V2), (K2, V2)], salt=b"\x13"))


@pytest.mark.parametrize("layout", [LAYOUT, SALTED, WIDE])
def test_every_key_that_passes_matches_whatever_its_bytes(layout: codec.RowKeyLayout) -> None:
    rng = random.Random(270)
    awkward = [b"\xc3", b"\xa9", b"\xe2\x82", b"\xf0\x9f\x98", b"\xff", b"'", b"\\", b"E",
               b"\x00", b"\x7f", b"\x80", b"\xed"]

    def uid() -> bytes:
        out = b""
        while len(out) < 3:
            out += rng.choice(awkward) if rng.random() < 0.7 else bytes([rng.randrange(256)])
        return out[:3]

    uids = [uid() for _ in range(12)]
    salt = b"\xc3\xa9"[:layout.salt_width]
    metric = METRIC if layout.metric_width == 3 else b"\xe2" + METRIC
    keys = []
    for _ in range(400):
        tags = sorted((k, rng.choice(uids)) for k in rng.sample(uids, rng.randint(1, 3)))
        base_s = HOUR_S + 3600 * rng.randint(0, 100)
        keys.append(salt + metric + base_s.to_bytes(4, "big") + b"".join(k + v for k, v in tags))
    narrowed = 0
    for _ in range(80):
        constraints = [UidConstraint(k, False, frozenset(rng.sample(uids, rng.randint(1, 3)))
                                     if rng.random() < 0.8 else None)
                       for k in sorted(rng.sample(uids, rng.randint(1, 2)))]
        regex = row_key_regex(layout, constraints)
        assert regex is not None
        for k in keys:
            if passes(layout, k, constraints):
                assert found(regex, k), (k, constraints, regex)
        narrowed += sum(not found(regex, k) for k in keys) > 0
    assert narrowed > 40
