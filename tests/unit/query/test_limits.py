"""The pure cost checks of ``app.query.limits``."""

from __future__ import annotations

import time

import pytest

from app.errors import QueryLimitError, QueryTimeoutError
from app.query.ast import Downsample, SubQuery
from app.query.limits import Deadline, QueryLimits, filled_buckets

MINUTE = Downsample("1m-avg-zero", 60_000, 1, "m", "avg", fill="zero")
DAY_MS = 86_400_000


@pytest.mark.parametrize(("downsample", "expected"), [
    (None, 0),
    (Downsample("1m-avg", 60_000, 1, "m", "avg"), 0),  # fill none: bounded by the points read
    (Downsample("0all-sum", 0, 0, "", "sum", fill="zero", run_all=True), 0),
    # A day of minutes plus an hour and a minute of margin each side, plus one.
    (MINUTE, (DAY_MS + 2 * 3_600_000 + 2 * 60_000) // 60_000 + 1),
])
def test_filled_buckets(downsample: Downsample | None, expected: int) -> None:
    assert filled_buckets(SubQuery("sum", downsample=downsample), 0, DAY_MS) == expected


def test_buckets_since_1970_are_counted_not_built() -> None:
    second = Downsample("1s-avg-zero", 1000, 1, "s", "avg", fill="zero")
    now_ms = 1_800_000_000_000
    assert filled_buckets(SubQuery("sum", downsample=second), 0, now_ms) > 1_800_000_000
    with pytest.raises(QueryLimitError, match=r"\(sub query 3 would emit \d+: \d+ filled "
                                              r"buckets x 1 series\)"):
        QueryLimits(emitted_points=5_000_000).check_buckets(
            SubQuery("sum", index=3, downsample=second), 0, now_ms)


def test_zero_turns_every_limit_off() -> None:
    limits = QueryLimits()
    sub = SubQuery("sum", downsample=MINUTE)
    limits.check_buckets(sub, 0, 10**13)
    limits.check_emitted(sub, 10**9, 10**6)
    limits.check_output(sub, 10**12)
    limits.check_read(sub, 10**12, 10**15)


def test_limits_are_inclusive() -> None:
    limits = QueryLimits(data_points=10, bytes=2 << 20, emitted_points=100)
    sub = SubQuery("sum")
    limits.check_read(sub, 10, 2 << 20)
    limits.check_emitted(sub, 50, 2)
    limits.check_output(sub, 100)
    with pytest.raises(QueryLimitError, match="limit of 10 data points"):
        limits.check_read(sub, 11, 0)
    with pytest.raises(QueryLimitError, match="maximum amount of 2MB from storage"):
        limits.check_read(sub, 0, (2 << 20) + 1)
    with pytest.raises(QueryLimitError, match="would emit 101"):
        limits.check_output(sub, 101)


def test_deadline() -> None:
    Deadline(0).check(0)  # 0: no deadline
    Deadline(60_000).check(0)
    deadline = Deadline(1)
    time.sleep(0.003)
    with pytest.raises(QueryTimeoutError, match=r"^Query timeout exceeded after \d+ ms, in sub "
                                                r"query 4 \(tsd.query.timeout=1\)$"):
        deadline.check(4)
