"""What a query may cost, and until when it may run: pure checks the read path and engine call.

A query's cost is bounded on three counts, each per sub-query and each checked *before* the
work it bounds (``QueryLimits``):

- points read (``tsd.query.limits.data_points.default``) and bytes read
  (``tsd.query.limits.bytes.default``), counted per chunk of rows as they arrive, as
  OpenTSDB's ``SaltScanner`` does between scanner batches;
- points emitted (``tsd.query.limits.emitted_points``): a filling downsampler (``-nan``,
  ``-null``, ``-zero``) emits every bucket of the time range for every series whether or not
  it holds data, so its cost is buckets x series. The buckets per series follow from the time
  range alone (refused before any read); the series count is known once the rows are grouped,
  before a point is decoded. Any other output is bounded by the points read, and checked
  once more after the engine, before serialising (which bounds the JSON's size too).

``Deadline`` carries ``tsd.query.timeout``: the reader checks it per chunk of rows, the engine
per stage, so a runaway query stops within a chunk's time and frees its worker.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.errors import QueryLimitError, QueryTimeoutError
from app.query.ast import SubQuery

HOUR_MS = 3_600_000
# Words OpenTSDB ends its limit messages with.
NARROW_HINT = "Please try filtering using more tags or decrease your time range."


class Deadline:
    """A point in (monotonic) time a query must finish by; ``timeout_ms`` 0 means never."""

    def __init__(self, timeout_ms: int) -> None:
        self.timeout_ms = timeout_ms
        self.started_s = time.perf_counter()

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started_s) * 1000

    def check(self, index: int = 0) -> None:
        """Raise OpenTSDB's timeout (408) when the time is up; ``index`` names the sub-query."""
        if not self.timeout_ms:
            return
        elapsed_ms = self.elapsed_ms()
        if elapsed_ms > self.timeout_ms:
            raise QueryTimeoutError(f"Query timeout exceeded after {elapsed_ms:.0f} ms, "
                                    f"in sub query {index} "
                                    f"(tsd.query.timeout={self.timeout_ms})")


NO_DEADLINE = Deadline(0)


def filled_buckets(sub: SubQuery, start_ms: int, end_ms: int) -> int:
    """Buckets a filling downsampler emits per series over ``[start_ms, end_ms]`` (an upper
    bound: the scan window adds up to an hour and an interval at each end); 0 when the
    sub-query does not fill (its output is then bounded by the points it reads)."""
    spec = sub.downsample
    if spec is None or spec.run_all or spec.fill == "none" or spec.interval_ms <= 0:
        return 0
    span_ms = max(end_ms - start_ms, 0) + 2 * (HOUR_MS + spec.interval_ms)
    return span_ms // spec.interval_ms + 1


@dataclass(frozen=True)
class QueryLimits:
    """Per-sub-query caps; 0 turns one off."""

    data_points: int = 0
    bytes: int = 0
    emitted_points: int = 0

    def check_buckets(self, sub: SubQuery, start_ms: int, end_ms: int) -> None:
        """Before any read: a filling downsampler whose buckets alone exceed the limit."""
        self.check_emitted(sub, filled_buckets(sub, start_ms, end_ms), 1)

    def check_emitted(self, sub: SubQuery, buckets: int, series: int) -> None:
        """Once the series are known: buckets x series against the emitted-points limit."""
        emitted = buckets * series
        if self.emitted_points and emitted > self.emitted_points:
            self._refuse_emitted(sub, f"would emit {emitted}: {buckets} filled buckets x "
                                      f"{series} series")

    def check_output(self, sub: SubQuery, emitted: int) -> None:
        """After the engine, before serialising: what the sub-query's results hold (raw
        queries and fill policy none are bounded here, and with them the JSON's size)."""
        if self.emitted_points and emitted > self.emitted_points:
            self._refuse_emitted(sub, f"would emit {emitted}")

    def _refuse_emitted(self, sub: SubQuery, what: str) -> None:
        raise QueryLimitError(
            f"Sorry, you have attempted to emit more than our limit of {self.emitted_points} "
            f"data points (sub query {sub.index} {what}). Please try downsampling, a longer "
            "downsample interval, filtering using more tags or decrease your time range.")

    def check_read(self, sub: SubQuery, points: int, read_bytes: int) -> None:
        """During the read: what was fetched so far, after each chunk of rows."""
        if self.data_points and points > self.data_points:
            raise QueryLimitError(
                f"Sorry, you have attempted to fetch more than our limit of {self.data_points} "
                f"data points (sub query {sub.index} read {points}). {NARROW_HINT}")
        if self.bytes and read_bytes > self.bytes:
            raise QueryLimitError(
                "Sorry, you have attempted to fetch more than our maximum amount of "
                f"{self.bytes // 1024 // 1024}MB from storage (sub query {sub.index} read "
                f"{read_bytes} bytes). {NARROW_HINT}")
