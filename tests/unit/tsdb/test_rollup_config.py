"""``tsd.rollups.config`` parsed and validated as 2.4's RollupConfig/RollupInterval do."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from app.tsdb.rollup_config import (
    RollupConfigError,
    load_rollup_config,
    parse_interval,
    parse_rollup_config,
)
from tests.rollup_fixtures import ROLLUP_CONFIG


def _interval(interval: str, span: str, **extra: Any) -> dict[str, Any]:
    return {"table": "r", "preAggregationTable": "p", "interval": interval, "rowSpan": span,
            **extra}


@pytest.mark.parametrize(("interval", "span", "units", "intervals", "seconds"), [
    ("1s", "1h", "h", 3600, 1), ("7s", "1h", "h", 514, 7), ("15s", "1h", "h", 240, 15),
    ("30s", "1h", "h", 120, 30), ("1m", "1d", "d", 1440, 60), ("10m", "1d", "d", 144, 600),
    ("10m", "6h", "h", 36, 600), ("10m", "12h", "h", 72, 600), ("15m", "1d", "d", 96, 900),
    ("1h", "1n", "n", 768, 3600), ("1d", "1y", "y", 366, 86400),
])
def test_intervals_compile_as_in_opentsdb(interval: str, span: str, units: str,
                                          intervals: int, seconds: int) -> None:
    parsed = parse_interval(_interval(interval, span))
    assert (parsed.units, parsed.intervals, parsed.interval_s) == (units, intervals, seconds)


@pytest.mark.parametrize(("raw", "message"), [
    (_interval("1m", "1h", table=""), "The rollup table cannot be null or empty"),
    (_interval("1m", "1h", preAggregationTable=None), "pre-aggregate rollup table cannot"),
    (_interval("1m", "2d"), "Multipliers are only usable with the 'h' unit"),
    (_interval("1m", "3h"), "The multiplier must be 1 or an even value"),
    (_interval("1h", "1h"), "Interval [3600] is too large for the span [h]"),
    (_interval("10m", "1h"), "Not enough intervals [6] for the span"),
    (_interval("1s", "1d"), "Too many intervals [86400] in the span"),
    (_interval("1m", "1000ms"), "Milliseconds are not supported"),
    (_interval("1h", "1x"), "Unrecogznied span 'x'"),
    # pytsd: 2.4 would wrap offsets past 12 bits into other intervals' cells.
    (_interval("15s", "1d"), "a rollup qualifier holds at most 4096"),
])
def test_bad_intervals_are_refused(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(RollupConfigError) as error:
        parse_interval(raw)
    assert message in error.value.message


def test_the_whole_config() -> None:
    config = parse_rollup_config(ROLLUP_CONFIG)
    assert config.default_interval.table == "tsdb"
    assert [i.interval for i in config.rollups()] == ["1m", "10m", "1h"]
    assert config.id_for("SUM") == 0 and config.aggregator_for(3) == "max"
    assert config.tables() == ["tsdb-preagg", "tsdb-rollup-1m", "tsdb-rollup-agg-1m",
                               "tsdb-rollup-10m", "tsdb-rollup-agg-10m", "tsdb-rollup-1h",
                               "tsdb-rollup-agg-1h"]
    # getRollupInterval(long, String): every interval dividing the downsample, coarsest first
    assert [i.interval for i in config.best_matches(7_200_000)] == ["1h", "10m", "1m", "1s"]
    assert [i.interval for i in config.best_matches(90_000)] == ["1s"]


@pytest.mark.parametrize(("change", "message"), [
    (lambda c: c.update(intervals=[]), "no intervals were found"),
    (lambda c: c.update(aggregationIds={}), "no aggegation ID mappings found"),
    (lambda c: c["aggregationIds"].update(avg=0), "Multiple mappings for the ID '0'"),
    (lambda c: c["aggregationIds"].update(avg=128), "must be between 0 and 127"),
    (lambda c: c["aggregationIds"].update(nope=9), "No such aggregator found for nope"),
    (lambda c: c["intervals"].append(dict(c["intervals"][1])),
     "Only one interval of each type"),
    (lambda c: c["intervals"][0].update(defaultInterval=False),
     'None of the rollup intervals were marked as the "default"'),
    (lambda c: c["intervals"][1].update(defaultInterval=True),
     "Multiple default intervals configured"),
])
def test_bad_configs_are_refused(change: Any, message: str) -> None:
    raw = copy.deepcopy(ROLLUP_CONFIG)
    change(raw)
    with pytest.raises(RollupConfigError) as error:
        parse_rollup_config(raw)
    assert message in error.value.message


def test_loads_inline_json_or_a_json_file(tmp_path: Path) -> None:
    path = tmp_path / "rollups.json"
    path.write_text(json.dumps(ROLLUP_CONFIG))
    assert load_rollup_config(str(path)) == load_rollup_config(json.dumps(ROLLUP_CONFIG))
    with pytest.raises(RollupConfigError, match="Failed to open conf file"):
        load_rollup_config(str(tmp_path / "missing.json"))
    with pytest.raises(RollupConfigError, match="null or empty"):
        load_rollup_config("")
    with pytest.raises(RollupConfigError, match="Unable to parse"):
        load_rollup_config("{not json")
