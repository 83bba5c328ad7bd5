"""A block of known series' plain lines taken column by column: what the words give, line for
line, and any one odd line among them judged as alone."""

from __future__ import annotations

import pytest

from app.lineproto.parse import PutParser
from app.tsdb.points import PointBatch

from .test_parse import RAW_LINES, messages

PLAIN = [b"put m 1356998400 42 host=a cpu=0", b"put m 1356998401 -1.5 host=a cpu=0",
         b"put m 1356998402 .25 host=b", b"put m 1356998403 7. host=b",
         b"put m 1356998404 -0 host=a cpu=0", b"put n 1356998405 123456789012345678 host=a"]


def by_words(lines: list[bytes]) -> PointBatch:
    batch, parser = PointBatch(), PutParser()
    for line in lines:
        parser.add(line.decode("utf-8", "replace").split(), batch)
    return batch


def same(got: PointBatch, want: PointBatch) -> None:
    assert messages(got) == messages(want)
    assert got.timestamps == want.timestamps
    assert got.values == want.values
    assert [type(v) for v in got.values] == [type(v) for v in want.values]
    assert [None if k is None else got.series[k] for k in got.series_of] == \
        [None if k is None else want.series[k] for k in want.series_of]
    assert list(got.series.values()) == list(want.series.values())


def test_a_block_of_known_plain_lines_parses_as_its_words() -> None:
    parser = PutParser()
    parser.add_lines(PLAIN, PointBatch())  # every series known
    block = PLAIN * 3
    got = PointBatch()
    parser.add_lines(block, got)
    same(got, by_words(block))


@pytest.mark.parametrize("odd", RAW_LINES + [b"put m 1356998400 1", b"put", b"put m 0 1 host=b",
                                             b"put m 01356998400 1 host=b",
                                             b"put m 1234567890123456789 1 host=b",
                                             b"put m 1356998400 1234567890123456789 host=b",
                                             b"put m  1 host=b", b"put unknown 1 1 host=b"])
def test_one_odd_line_among_known_plain_ones_is_judged_alone(odd: bytes) -> None:
    parser = PutParser()
    parser.add_lines(PLAIN, PointBatch())
    block = PLAIN[:3] + [odd] + PLAIN[3:]
    got = PointBatch()
    parser.add_lines(block, got)
    want = by_words(PLAIN + block)
    assert messages(got) == messages(want)[len(PLAIN):]
    assert got.timestamps == want.timestamps[len(PLAIN):]
    assert got.values == want.values[len(PLAIN):]
    assert [type(v) for v in got.values] == [type(v) for v in want.values[len(PLAIN):]]


@pytest.mark.parametrize("at", [0, 249, 250, 299])
def test_an_odd_line_in_any_run_of_a_long_block_keeps_every_points_place(at: int) -> None:
    parser = PutParser()
    parser.add_lines(PLAIN, PointBatch())
    block = PLAIN * 50
    block[at] = b"put m 1356998400 x host=a cpu=0"
    got = PointBatch()
    parser.add_lines(block, got)
    want = by_words(block)
    assert messages(got) == messages(want) and messages(got).count(None) == len(block) - 1
    assert got.timestamps == want.timestamps and got.values == want.values
