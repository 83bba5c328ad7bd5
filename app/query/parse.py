"""The GET door of ``/api/query``: query-string parameters to the query model.

Grammar (OpenTSDB's ``QueryRpc#parseMTypeSubQuery``; the value is split on every ``:``)::

    m         = agg ":" [modifier ":"]{0,3} metric ["{" tags "}" ["{" filters "}"]]
    tsuid     = agg ":" [modifier ":"]{0,3} tsuid ["," tsuid]...
    modifier  = "rate" ["{" ["drop"] "counter" ["," [max] ["," [reset]]] "}"]
              | downsample                  ; starts with a digit: "1h-avg", "0all-sum", "1dc-max"
              | "percentiles[" p ["," p]... "]"
              | "explicit_tags"             ; m only
              | "pre-agg"                   ; read the pre-aggregate table (rollups enabled)
              | "rollup_raw" | "rollup_nofallback" | "rollup_fallback" | "rollup_fallback_raw"
              | "show-histogram-buckets"
    downsample= interval "-" function ["-" fill]
    interval  = <digits><unit> ["c"]        ; "c": calendar aligned
              | <anything containing "all"> ; one bucket over the whole query range
    tags      = tagk "=" value ["," tagk "=" value]...   ; group by (see app.query.filters)

Unknown modifiers are ignored, as in OpenTSDB. Where OpenTSDB answers malformed input with a
500 (an IllegalArgumentException escaping the parser) this raises a 400 with the same message.
The result is a draft :class:`Query` handed to :func:`app.query.validate.validate_query`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from app.errors import BadRequestError
from app.query.ast import LONG_MAX, Downsample, Filter, Query, RateOptions, SubQuery
from app.query.filters import add_filters, filter_from_tag
from app.query.timeparse import java_parse_long, parse_duration_ms
from app.query.validate import validate_query

_GROUPS = re.compile(r"([^{}]*)\{([^{}]*)\}(?:\{([^{}]*)\})?", re.DOTALL)
_INTERVAL = re.compile(r"([0-9]+)([a-zA-Z]+)")
_PRESENCE_FLAGS = {
    "ms": "ms_resolution",
    "arrays": "arrays",
    "show_tsuids": "show_tsuids",
    "show_query": "show_query",
    "show_summary": "show_summary",
    "show_stats": "show_stats",
    "no_annotations": "no_annotations",
    "global_annotations": "global_annotations",
    "use_calendar": "use_calendar",
}


def _java_split(text: str, sep: str) -> list[str]:
    """``String.split``: trailing empty strings are dropped."""
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def parse_downsample(text: str, use_calendar: bool) -> Downsample:
    """Parse ``<interval>-<function>[-<fill>]``; the function and fill are checked later."""
    parts = _java_split(text, "-")
    if len(parts) < 2:
        raise BadRequestError(f"Invalid downsampling specifier '{text}': must provide at "
                              "least interval and function")
    if len(parts) > 3:
        raise BadRequestError(f"Invalid downsampling specifier '{text}': must consist of "
                              "interval, function, and optional fill policy")
    interval, function = parts[0], parts[1]
    fill = parts[2].lower() if len(parts) == 3 else "none"
    if "all" in interval.lower():
        return Downsample(text=text, interval_ms=0, count=0, unit="all", function=function,
                          fill=fill, calendar=False, run_all=True)
    calendar = use_calendar
    if interval[-1:] in ("c", "C"):
        calendar, interval = True, interval[:-1]
    interval_ms = parse_duration_ms(interval)
    match = _INTERVAL.fullmatch(interval)
    assert match is not None  # parse_duration_ms accepted it
    return Downsample(text=text, interval_ms=interval_ms, count=int(match.group(1)),
                      unit=match.group(2).lower(), function=function, fill=fill,
                      calendar=calendar)


ROLLUP_USAGES = ("ROLLUP_RAW", "ROLLUP_NOFALLBACK", "ROLLUP_FALLBACK", "ROLLUP_FALLBACK_RAW")


def parse_rollup_usage(text: str | None) -> str | None:
    """``ROLLUP_USAGE.parse``: case-insensitive; an unknown name means the default
    (``ROLLUP_NOFALLBACK``), as in OpenTSDB."""
    if not text:
        return None
    name = text.upper()
    return name if name in ROLLUP_USAGES else "ROLLUP_NOFALLBACK"


def parse_rate_options(spec: str) -> RateOptions:
    """``rate{counter[,max[,reset]]}`` or ``rate{dropcounter,...}``; plain ``rate`` → defaults."""
    if len(spec) == 4:
        return RateOptions()
    if len(spec) < 6 or spec[4] != "{" or not spec.endswith("}"):
        raise BadRequestError(f"Invalid rate options specification: {spec}")
    parts = spec[5:-1].split(",")
    if len(parts) > 3:
        raise BadRequestError(
            "Incorrect number of values in rate options specification, must be "
            f"counter[,counter max value,reset value], recieved: {len(parts)} parts")
    counter_max = _rate_number(parts, 1, LONG_MAX, "Max value of counter")
    reset_value = _rate_number(parts, 2, 0, "Reset value of counter")
    return RateOptions(counter=parts[0].endswith("counter"), counter_max=counter_max,
                       reset_value=reset_value, drop_resets=parts[0] == "dropcounter",
                       given=True)


def _rate_number(parts: list[str], position: int, default: int, what: str) -> int:
    if len(parts) <= position or not parts[position]:
        return default
    try:
        return java_parse_long(parts[position])
    except ValueError:
        raise BadRequestError(
            f"{what} was not a number, received '{parts[position]}'") from None


def _parse_percentiles(modifier: str) -> tuple[float, ...]:
    """``QueryRpc.parsePercentiles``: the floats between the first ``[`` and ``]``."""
    start, end = modifier.find("["), modifier.find("]")
    if start < 0 or end < 0:
        raise BadRequestError(f"Malformated percentile query paramater: {modifier}")
    try:
        return tuple(sorted(float(p) for p in modifier[start + 1:end].split(",") if p.strip()))
    except ValueError:
        raise BadRequestError(f"Invalid percentiles specification: {modifier}") from None


def _parse_tag_group(text: str, group_by: bool) -> list[Filter]:
    what = "tag" if group_by else "filter"
    filters: list[Filter] = []
    for entry in _java_split(text, ","):
        try:
            tagk_value = entry.split("=")
            if len(tagk_value) != 2 or not tagk_value[0] or not tagk_value[1]:
                raise BadRequestError(f"invalid tag: {entry}")
            filters.append(filter_from_tag(tagk_value[0], tagk_value[1], group_by))
        except BadRequestError as exc:
            raise BadRequestError(f"When parsing {what} '{entry}': {exc.message}",
                                  exc.details) from None
    return filters


def parse_metric_and_filters(text: str) -> tuple[str, tuple[Filter, ...]]:
    """``metric[{group-by tags}][{filters}]`` → (metric, filters), second group first."""
    if not text:
        raise BadRequestError("Metric cannot be null or empty")
    if "{" not in text:
        return text, ()
    if not text.endswith("}"):
        raise BadRequestError(f"Missing '}}' at the end of: {text}")
    match = _GROUPS.fullmatch(text)
    if match is None:
        raise BadRequestError(f"Invalid tag or filter braces in: {text}")
    metric, group_by_text, filter_text = match.group(1), match.group(2), match.group(3)
    filters = _parse_tag_group(filter_text or "", group_by=False)
    return metric, add_filters(filters, _parse_tag_group(group_by_text, group_by=True))


def _split_parts(text: str, empty_message: str) -> list[str]:
    if not text:
        raise BadRequestError(empty_message)
    parts = text.split(":")
    if len(parts) < 2 or len(parts) > 5:
        amount = "not enough" if len(parts) < 2 else "too many"
        raise BadRequestError(f"Invalid parameter m={text} ({amount} :-separated parts)")
    if any(not modifier for modifier in parts[1:-1]):
        raise BadRequestError(f"Invalid parameter m={text} (empty :-separated part)")
    return parts


def _apply_modifiers(sub: SubQuery, modifiers: list[str], allow_explicit: bool) -> SubQuery:
    fields: dict[str, Any] = {}
    for modifier in modifiers:
        lowered = modifier.lower()
        if lowered.startswith("rate"):
            fields["rate"] = True
            if "{" in modifier:
                fields["rate_options"] = parse_rate_options(modifier)
        elif modifier[0].isdigit():
            fields["downsample"] = parse_downsample(modifier, use_calendar=False)
        elif lowered == "pre-agg":
            fields["pre_aggregate"] = True
        elif lowered.startswith("rollup_"):
            fields["rollup_usage"] = parse_rollup_usage(modifier)
        elif lowered.startswith("percentiles"):
            fields["percentiles"] = _parse_percentiles(modifier)
        elif lowered.startswith("show-histogram-buckets"):
            fields["show_histogram_buckets"] = True
        elif allow_explicit and lowered.startswith("explicit_tags"):
            fields["explicit_tags"] = True
    return replace(sub, **fields)


def parse_m(text: str, index: int) -> SubQuery:
    """One ``m=`` parameter → a sub-query (aggregator and names are checked later)."""
    parts = _split_parts(text, "The query string was empty")
    metric, filters = parse_metric_and_filters(parts[-1])
    sub = SubQuery(aggregator=parts[0], index=index, metric=metric, filters=filters)
    return _apply_modifiers(sub, parts[1:-1], allow_explicit=True)


def parse_tsuid_param(text: str, index: int) -> SubQuery:
    """One ``tsuid=`` parameter → a sub-query over the listed series."""
    parts = _split_parts(text, "The tsuid query string was empty")
    tsuids = tuple(tsuid.upper() for tsuid in _java_split(parts[-1], ","))
    for tsuid in tsuids:
        if not tsuid or len(tsuid) % 2 or any(c not in "0123456789ABCDEF" for c in tsuid):
            raise BadRequestError(f"Invalid TSUID: {tsuid}")
    sub = SubQuery(aggregator=parts[0], index=index, tsuids=tsuids)
    return _apply_modifiers(sub, parts[1:-1], allow_explicit=False)


def _values(args: Mapping[str, Any], name: str) -> list[str]:
    getlist = getattr(args, "getlist", None)
    if getlist is not None:  # a werkzeug MultiDict: .get() would give only the first value
        return list(getlist(name))
    values = args.get(name)
    if values is None:
        return []
    return [values] if isinstance(values, str) else list(values)


def _last(args: Mapping[str, Any], name: str) -> str | None:
    values = _values(args, name)
    return values[-1] if values else None


def query_from_args(args: Mapping[str, list[str]], now_ms: int, tz: str = "UTC") -> Query:
    """The whole GET request → a validated :class:`Query`.

    ``tz`` is the server's zone for absolute dates; ``?timezone=`` (or ``?tz=``) overrides it
    and also drives calendar downsampling (OpenTSDB 2.4 ignores both on GET; its docs list
    them). Flags count by presence, so ``?ms=false`` still turns ms on; the last value of a
    repeated parameter wins.
    """
    start = _last(args, "start")
    if not start:
        raise BadRequestError("Missing parameter <code>start</code>")
    subs = [parse_tsuid_param(text, 0) for text in _values(args, "tsuid")]
    subs += [parse_m(text, 0) for text in _values(args, "m")]
    if not subs:
        raise BadRequestError("Missing sub queries")
    subs = [replace(sub, index=i) for i, sub in enumerate(subs)]
    flags: dict[str, Any] = {field: name in args for name, field in _PRESENCE_FLAGS.items()}
    draft = Query(start_ms=0, end_ms=0, queries=tuple(subs), start_text=start,
                  end_text=_last(args, "end") or None,
                  timezone=_last(args, "timezone") or _last(args, "tz") or "")
    return validate_query(replace(draft, **flags), now_ms, tz)
