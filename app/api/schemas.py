"""The POST door of ``/api/query``: the JSON body (OpenTSDB's ``TSQuery``) to the query model.

Body shape (unknown keys are ignored everywhere, since Grafana sends whole panel targets)::

    {"start": "1h-ago" | 1356998400, "end": ..., "timezone": "UTC", "useCalendar": false,
     "msResolution": false, "showTSUIDs": false, "showQuery": false, "showStats": false,
     "showSummary": false, "noAnnotations": false, "globalAnnotations": false, "delete": false,
     "queries": [{"aggregator": "sum", "metric": "sys.cpu.user" | "tsuids": ["0000..."],
                  "downsample": "1m-avg-nan", "rate": false,
                  "rateOptions": {"counter", "counterMax", "resetValue", "dropResets"},
                  "filters": [{"type", "tagk", "filter", "groupBy" | "group_by"}],
                  "tags": {"host": "*"} | [], "explicitTags": false, "percentiles": [99.9]}]}

``tags`` and ``filters`` are merged (OpenTSDB keeps whichever comes last in the document),
empty ones count as absent, and ``tags: []`` is accepted. Malformed bodies are 400
``Unable to parse the given JSON`` with the reason in ``details``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from marshmallow import EXCLUDE, Schema, ValidationError, fields

from app.errors import BadRequestError
from app.query.ast import LONG_MAX, Filter, Query, RateOptions, SubQuery
from app.query.filters import add_filters, filter_from_tag
from app.query.parse import parse_downsample, parse_rollup_usage
from app.query.timeparse import java_parse_long
from app.query.validate import validate_query

PARSE_ERROR = "Unable to parse the given JSON"


class Text(fields.Field):
    """A string; numbers and booleans are turned into their text, as Jackson does."""

    def _deserialize(self, value: Any, attr: str | None, data: Mapping[str, Any] | None,
                     **kwargs: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        if isinstance(value, str | int | float):
            return str(value)
        raise ValidationError("Expected a string.")


class Long(fields.Field):
    """A Java long: ints, floats (truncated), numeric strings; out-of-range values clamp."""

    def _deserialize(self, value: Any, attr: str | None, data: Mapping[str, Any] | None,
                     **kwargs: Any) -> int | None:
        if isinstance(value, bool):
            raise ValidationError("Expected a number.")
        if isinstance(value, str):
            value = _number_from_text(value.strip())
        if isinstance(value, float):
            if math.isnan(value):
                return None  # Grafana sends parseInt("") = NaN for an empty counter max
            if math.isinf(value):
                return LONG_MAX if value > 0 else -LONG_MAX - 1
            value = int(value)
        if not isinstance(value, int):
            raise ValidationError("Expected a number.")
        # 2^64 counters (1.8446744073709552e+19 from Grafana) do not fit a long: clamp.
        return max(-LONG_MAX - 1, min(LONG_MAX, value))


def _number_from_text(text: str) -> int | float:
    try:
        return java_parse_long(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise ValidationError(f"Not a number: {text!r}") from None


class Tags(fields.Field):
    """A ``{tagk: value}`` object; ``[]`` (old Grafana dashboards) and null mean none."""

    def _deserialize(self, value: Any, attr: str | None, data: Mapping[str, Any] | None,
                     **kwargs: Any) -> dict[str, str]:
        if value is None or value == []:
            return {}
        if not isinstance(value, dict):
            raise ValidationError("Expected an object of tag keys to values.")
        text = Text()
        return {str(k): "" if v is None else text.deserialize(v) for k, v in value.items()}


class Time(Text):
    """``start``/``end``: a string, or a number taken as its decimal text."""


class _Base(Schema):
    class Meta:
        unknown = EXCLUDE


class FilterSchema(_Base):
    type = Text(load_default=None, allow_none=True)
    tagk = Text(load_default=None, allow_none=True)
    filter = Text(load_default=None, allow_none=True)
    groupBy = fields.Boolean(load_default=None, allow_none=True)
    group_by = fields.Boolean(load_default=None, allow_none=True)


class RateOptionsSchema(_Base):
    counter = fields.Boolean(load_default=None, allow_none=True)
    counterMax = Long(load_default=None, allow_none=True)
    resetValue = Long(load_default=None, allow_none=True)
    dropResets = fields.Boolean(load_default=None, allow_none=True)


class SubQuerySchema(_Base):
    aggregator = Text(load_default=None, allow_none=True)
    metric = Text(load_default=None, allow_none=True)
    tsuids = fields.List(Text(), load_default=None, allow_none=True)
    downsample = Text(load_default=None, allow_none=True)
    rate = fields.Boolean(load_default=None, allow_none=True)
    rateOptions = fields.Nested(RateOptionsSchema, load_default=None, allow_none=True)
    tags = Tags(load_default=None, allow_none=True)
    filters = fields.List(fields.Nested(FilterSchema), load_default=None, allow_none=True)
    explicitTags = fields.Boolean(load_default=None, allow_none=True)
    percentiles = fields.List(fields.Float(), load_default=None, allow_none=True)
    showHistogramBuckets = fields.Boolean(load_default=None, allow_none=True)
    rollupUsage = Text(load_default=None, allow_none=True)
    preAggregate = fields.Boolean(load_default=None, allow_none=True)


class QuerySchema(_Base):
    start = Time(load_default=None, allow_none=True)
    end = Time(load_default=None, allow_none=True)
    queries = fields.List(fields.Nested(SubQuerySchema), load_default=None, allow_none=True)
    timezone = Text(load_default=None, allow_none=True)
    useCalendar = fields.Boolean(load_default=None, allow_none=True)
    msResolution = fields.Boolean(load_default=None, allow_none=True)
    showTSUIDs = fields.Boolean(load_default=None, allow_none=True)
    showQuery = fields.Boolean(load_default=None, allow_none=True)
    showStats = fields.Boolean(load_default=None, allow_none=True)
    showSummary = fields.Boolean(load_default=None, allow_none=True)
    noAnnotations = fields.Boolean(load_default=None, allow_none=True)
    globalAnnotations = fields.Boolean(load_default=None, allow_none=True)
    delete = fields.Boolean(load_default=None, allow_none=True)


_FLAGS = {
    "useCalendar": "use_calendar",
    "msResolution": "ms_resolution",
    "showTSUIDs": "show_tsuids",
    "showQuery": "show_query",
    "showStats": "show_stats",
    "showSummary": "show_summary",
    "noAnnotations": "no_annotations",
    "globalAnnotations": "global_annotations",
    "delete": "delete",
}


def _flatten(messages: Any, prefix: str = "") -> list[str]:
    if isinstance(messages, dict):
        return [line for key, value in messages.items()
                for line in _flatten(value, f"{prefix}.{key}" if prefix else str(key))]
    if isinstance(messages, list):
        return [line for item in messages for line in _flatten(item, prefix)]
    return [f"{prefix}: {messages}" if prefix else str(messages)]


def _rate_options(raw: Mapping[str, Any] | None) -> RateOptions:
    if raw is None:
        return RateOptions()
    counter_max, reset_value = raw.get("counterMax"), raw.get("resetValue")
    return RateOptions(counter=bool(raw.get("counter")),
                       counter_max=LONG_MAX if counter_max is None else counter_max,
                       reset_value=0 if reset_value is None else reset_value,
                       drop_resets=bool(raw.get("dropResets")), given=True)


def _filters(raw: Mapping[str, Any]) -> tuple[Filter, ...]:
    specs = [Filter(type=(f["type"] or "").lower(), tagk=f["tagk"] or "",
                    filter=f["filter"] or "", group_by=bool(f["groupBy"] or f["group_by"]))
             for f in raw["filters"] or ()]
    tags = [filter_from_tag(tagk, value, group_by=True)
            for tagk, value in (raw["tags"] or {}).items()]
    return add_filters(add_filters((), specs), tags)


def _sub_query(raw: Mapping[str, Any], index: int) -> SubQuery:
    try:
        filters = _filters(raw)
    except BadRequestError as exc:
        raise BadRequestError(PARSE_ERROR, exc.message) from None
    tsuids = tuple(t.upper() for t in raw["tsuids"] or ())
    downsample = raw["downsample"]
    return SubQuery(
        aggregator=raw["aggregator"] or "", index=index,
        # With tsuids, OpenTSDB ignores metric, tags and filters.
        metric=None if tsuids else raw["metric"] or None, tsuids=tsuids,
        filters=() if tsuids else filters,
        downsample=parse_downsample(downsample, use_calendar=False) if downsample else None,
        rate=bool(raw["rate"]), rate_options=_rate_options(raw["rateOptions"]),
        explicit_tags=bool(raw["explicitTags"]),
        percentiles=tuple(sorted(raw["percentiles"] or ())),
        show_histogram_buckets=bool(raw["showHistogramBuckets"]),
        rollup_usage=parse_rollup_usage(raw["rollupUsage"]),
        pre_aggregate=bool(raw["preAggregate"]))


def query_from_json(body: object, now_ms: int, tz: str = "UTC", *,
                    arrays: bool = False) -> Query:
    """A parsed JSON body → a validated :class:`Query`.

    ``tz`` is the server's zone for absolute dates; ``arrays`` is the query-string flag
    (OpenTSDB reads ``?arrays`` for POST too).
    """
    if body is None or body == "":
        raise BadRequestError("Missing message content",
                              "Supply valid JSON formatted data in the body of your request")
    if not isinstance(body, dict):
        raise BadRequestError(PARSE_ERROR, "The query must be a JSON object")
    try:
        raw = QuerySchema().load(body)
    except ValidationError as exc:
        raise BadRequestError(PARSE_ERROR, "; ".join(_flatten(exc.messages))) from None
    # An empty list is reported by validate_query, after the start/end checks, like OpenTSDB.
    subs = tuple(_sub_query(sub, i) for i, sub in enumerate(raw["queries"] or ()))
    draft = Query(start_ms=0, end_ms=0, queries=subs, start_text=raw["start"] or "",
                  end_text=raw["end"] or None, timezone=raw["timezone"] or "", arrays=arrays)
    flags: dict[str, Any] = {field: bool(raw[name]) for name, field in _FLAGS.items()}
    # Grafana's server-side client (12.4+) never asks for global annotations, so a JSON body
    # that does not mention the key gets them; `false` still turns them off
    # (docs/query-differences.md).
    flags["global_annotations"] = raw["globalAnnotations"] is not False
    return validate_query(replace(draft, **flags), now_ms, tz)
