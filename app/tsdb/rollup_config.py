"""``tsd.rollups.config`` as OpenTSDB 2.4 reads it (``RollupConfig``, ``RollupInterval``).

The setting holds JSON, or the path of a ``.json`` file holding it::

    {"aggregationIds": {"sum": 0, "count": 1, "min": 2, "max": 3},
     "intervals": [
       {"table": "tsdb", "preAggregationTable": "tsdb-preagg", "interval": "1m",
        "rowSpan": "1h", "defaultInterval": true},
       {"table": "tsdb-rollup-1h", "preAggregationTable": "tsdb-rollup-agg-1h",
        "interval": "1h", "rowSpan": "1d"}]}

Exactly one interval is the default: its table is the raw data table, so it is never read or
written as a rollup. Validation and messages follow 2.4; one departure: an interval whose
offsets do not fit the 12 bits of a rollup qualifier (2.4 wraps them silently) is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.engine.aggregators import AGGREGATORS
from app.errors import TsdbError
from app.query.timeparse import parse_duration_ms
from app.storage.codec_rollup import MAX_QUALIFIER_OFFSET, span_seconds

MAX_INTERVALS = 7774
MIN_INTERVALS = 12
_SPAN = re.compile(r"([0-9]+)([a-zA-Z]+)")


class RollupConfigError(TsdbError):
    """A bad ``tsd.rollups.config``."""


@dataclass(frozen=True)
class RollupInterval:
    table: str
    pre_aggregation_table: str
    interval: str
    row_span: str
    default_interval: bool
    delay_sla: str
    interval_s: int
    units: str  # row span unit: h, d, n or y
    unit_multiplier: int
    intervals: int  # intervals per row
    max_delay_s: int

    @property
    def row_span_s(self) -> int:
        """Nominal row span (calendar spans, months and years, vary in length)."""
        return span_seconds(self.units, self.unit_multiplier)


@dataclass(frozen=True)
class RollupConfig:
    intervals: tuple[RollupInterval, ...]
    aggregation_ids: Mapping[str, int]

    @property
    def default_interval(self) -> RollupInterval:
        return next(i for i in self.intervals if i.default_interval)

    def rollups(self) -> list[RollupInterval]:
        """The intervals with rollup tables of their own (not the default), finest first."""
        return sorted((i for i in self.intervals if not i.default_interval),
                      key=lambda i: i.interval_s)

    def by_interval(self, interval: str) -> RollupInterval:
        for candidate in self.intervals:
            if candidate.interval == interval:
                return candidate
        raise RollupConfigError(f"No rollup interval found for: {interval}")

    def id_for(self, aggregator: str) -> int:
        found = self.aggregation_ids.get(aggregator.lower())
        if found is None:
            raise RollupConfigError(f"No ID found mapping to aggregator: {aggregator}")
        return found

    def aggregator_for(self, aggregator_id: int) -> str | None:
        for name, number in self.aggregation_ids.items():
            if number == aggregator_id:
                return name
        return None

    def tables(self) -> list[str]:
        """Every rollup and pre-aggregate table (the default interval's rollup table is the
        raw data table, which exists anyway)."""
        names: list[str] = []
        for interval in self.intervals:
            for name in (interval.table, interval.pre_aggregation_table):
                if name not in names and not (interval.default_interval
                                              and name == interval.table):
                    names.append(name)
        return names

    def best_matches(self, interval_ms: int) -> list[RollupInterval]:
        """``RollupConfig#getRollupInterval(long, String)``: intervals that divide the
        downsample interval, coarsest first (empty when none does)."""
        interval_s = interval_ms // 1000
        if interval_ms % 1000 or interval_s <= 0:
            return []
        found = [i for i in self.intervals if interval_s % i.interval_s == 0]
        return sorted(found, key=lambda i: i.interval_s, reverse=True)


def parse_interval(raw: Mapping[str, Any]) -> RollupInterval:
    """One ``intervals[]`` entry, validated as ``RollupInterval#validateAndCompile``."""
    table, pre_agg = raw.get("table"), raw.get("preAggregationTable")
    text, span = str(raw.get("interval") or ""), str(raw.get("rowSpan") or "")
    delay = str(raw.get("delaySla") or "")
    match = _SPAN.fullmatch(span)
    if match is None:
        raise RollupConfigError(f"Invalid rowSpan: {span!r}")
    units, multiplier = match.group(2), int(match.group(1))
    if len(units) > 1:
        raise RollupConfigError("Milliseconds are not supported")
    if not table:
        raise RollupConfigError("The rollup table cannot be null or empty")
    if not pre_agg:
        raise RollupConfigError("The pre-aggregate rollup table cannot be null or empty")
    if units != "h" and multiplier > 1:
        raise RollupConfigError("Multipliers are only usable with the 'h' unit")
    if units == "h" and multiplier > 1 and multiplier % 2:
        raise RollupConfigError("The multiplier must be 1 or an even value")
    if units not in "hdny":
        raise RollupConfigError(f"Unrecogznied span '{units}'")
    interval_s = _duration_s(text, "interval")
    max_delay_s = _duration_s(delay, "delaySla") if delay else 0
    span_s = span_seconds(units, multiplier)
    if interval_s >= span_s:
        raise RollupConfigError(f"Interval [{interval_s}] is too large for the span [{units}]")
    intervals = span_s // interval_s
    if intervals > MAX_INTERVALS:
        raise RollupConfigError(f"Too many intervals [{intervals}] in the span. Must be "
                                f"smaller than [{MAX_INTERVALS}] to fit in 14 bits")
    if intervals < MIN_INTERVALS:
        raise RollupConfigError(f"Not enough intervals [{intervals}] for the span. Must be "
                                f"at least [{MIN_INTERVALS}]")
    if intervals > MAX_QUALIFIER_OFFSET + 1:
        raise RollupConfigError(f"Too many intervals [{intervals}] in the span: a rollup "
                                f"qualifier holds at most {MAX_QUALIFIER_OFFSET + 1}")
    return RollupInterval(str(table), str(pre_agg), text, span,
                          bool(raw.get("defaultInterval")), delay, interval_s, units,
                          multiplier, intervals, max_delay_s)


def _duration_s(text: str, what: str) -> int:
    try:
        duration_ms = parse_duration_ms(text)
    except TsdbError as exc:
        raise RollupConfigError(f"Invalid {what} {text!r}: {exc.message}") from None
    if duration_ms < 1000:
        raise RollupConfigError(f"Milliseconds are not supported as the {what}")
    return duration_ms // 1000


def parse_rollup_config(raw: Any) -> RollupConfig:
    """The whole JSON document, validated as ``RollupConfig``'s constructor and 2.4's TSDB."""
    if not isinstance(raw, Mapping):
        raise RollupConfigError("The rollup config must be a JSON object")
    entries = raw.get("intervals") or []
    if not entries:
        raise RollupConfigError("Rollup config given but no intervals were found.")
    ids = raw.get("aggregationIds") or {}
    if not ids:
        raise RollupConfigError("Rollup config given but no aggegation ID mappings found.")
    intervals: list[RollupInterval] = []
    for entry in entries:
        interval = parse_interval(entry if isinstance(entry, Mapping) else {})
        if any(i.interval == interval.interval for i in intervals):
            raise RollupConfigError("Only one interval of each type can be configured: "
                                    f"{interval.interval}")
        intervals.append(interval)
    if sum(i.default_interval for i in intervals) > 1:
        raise RollupConfigError("Multiple default intervals configured. Only one is allowed")
    if not any(i.default_interval for i in intervals):
        raise RollupConfigError('None of the rollup intervals were marked as the "default".')
    return RollupConfig(tuple(intervals), _aggregation_ids(ids))


def _aggregation_ids(ids: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, number in ids.items():
        if not isinstance(number, int) or not 0 <= number <= 127:
            raise RollupConfigError(f"ID for aggregator must be between 0 and 127: {name}")
        if number in out.values():
            raise RollupConfigError(f"Multiple mappings for the ID '{number}' are not allowed.")
        if name.lower() not in AGGREGATORS:
            raise RollupConfigError(f"No such aggregator found for {name.lower()}")
        out[name.lower()] = number
    return out


def load_rollup_config(setting: str) -> RollupConfig:
    """From ``tsd.rollups.config``: inline JSON, or a path ending in ``.json``."""
    text = (setting or "").strip()
    if not text:
        raise RollupConfigError("Rollups were enabled but 'tsd.rollups.config' is null or "
                                "empty.")
    if text.endswith(".json"):
        try:
            text = Path(text).read_text(encoding="utf-8")
        except OSError as exc:
            raise RollupConfigError(f"Failed to open conf file: {setting}", str(exc)) from exc
    try:
        return parse_rollup_config(json.loads(text))
    except json.JSONDecodeError as exc:
        raise RollupConfigError("Unable to parse the rollup config", str(exc)) from exc
