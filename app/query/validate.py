"""The one semantic check both doors of ``/api/query`` go through.

Each door builds a *draft* :class:`Query` (``start_ms``/``end_ms`` still 0, ``timezone`` empty
unless the request named one) and hands it to :func:`validate_query`, which runs OpenTSDB's
checks in OpenTSDB's order (``TSQuery#validateAndSetQuery``, ``TSSubQuery#validateAndSetQuery``)
and returns the final query. Every failure is a 400 whose ``details`` describe the query, as
OpenTSDB's do.
"""

from __future__ import annotations

from dataclasses import replace

from app.engine.aggregators import AGGREGATORS
from app.engine.downsample import FILL_POLICIES
from app.errors import BadRequestError
from app.query.ast import Downsample, Query, SubQuery
from app.query.filters import build_filter
from app.query.timeparse import is_known_timezone, parse_time

_HISTOGRAM_AGGREGATORS = ("none", "sum")


def validate_query(draft: Query, now_ms: int, tz: str = "UTC") -> Query:
    """Resolve the times and check everything; ``tz`` is the server's zone for dates."""
    try:
        return _validate(draft, now_ms, tz)
    except BadRequestError as exc:
        if exc.details is None:
            exc.details = describe_query(draft)
        raise


def _validate(draft: Query, now_ms: int, tz: str) -> Query:
    if not draft.start_text:
        raise BadRequestError("Missing start time")
    date_tz = draft.timezone or tz
    start_ms = parse_time(draft.start_text, now_ms, date_tz)
    end_ms = parse_time(draft.end_text, now_ms, date_tz) if draft.end_text else now_ms
    if end_ms <= start_ms:
        raise BadRequestError(
            f"End time [{end_ms}] must be greater than the start time [{start_ms}]")
    if not draft.queries:
        raise BadRequestError("Missing queries")
    queries: list[SubQuery] = []
    for sub in draft.queries:
        validate_sub_query(sub, draft.timezone)
        sub = _with_calendar(sub, draft.use_calendar)
        # OpenTSDB drops repeated sub-queries; the survivor keeps its own request index so
        # clients that map results back by index (Grafana) still find the right target.
        if all(replace(sub, index=0) != replace(kept, index=0) for kept in queries):
            queries.append(sub)
    # Calendar downsampling without a named zone is UTC, as in OpenTSDB (not the server zone).
    return replace(draft, start_ms=start_ms, end_ms=end_ms, queries=tuple(queries),
                   timezone=draft.timezone or "UTC")


def validate_sub_query(sub: SubQuery, timezone: str = "") -> None:
    """Check one sub-query; ``timezone`` is the zone the request named, if any."""
    if not sub.aggregator:
        raise BadRequestError("Missing the aggregation function")
    if sub.aggregator not in AGGREGATORS:
        raise BadRequestError(f"No such aggregation function: {sub.aggregator}")
    if not sub.tsuids and not sub.metric:
        raise BadRequestError("Missing the metric or tsuids, provide at least one")
    for spec in sub.filters:
        build_filter(spec)
    if sub.downsample is not None:
        _validate_downsample(sub.downsample)
    if sub.percentiles or sub.show_histogram_buckets:
        _validate_percentiles(sub)
    if timezone and sub.downsample is not None and not is_known_timezone(timezone):
        raise BadRequestError("The timezone specification could not be found")


def _validate_downsample(downsample: Downsample) -> None:
    if downsample.function not in AGGREGATORS:
        raise BadRequestError(f"No such downsampling function: {downsample.function}")
    if downsample.function == "none":
        raise BadRequestError("cannot use the NONE aggregator for downsampling")
    if downsample.fill not in FILL_POLICIES:
        if downsample.fill == "scalar":
            # OpenTSDB 2.4 parses it, then fails on the first empty bucket.
            raise BadRequestError("Unsupported fill policy: scalar "
                                  "(use one of none, nan, null, zero)")
        raise BadRequestError(f"Unrecognized fill policy: {downsample.fill}")


def _validate_percentiles(sub: SubQuery) -> None:
    if sub.aggregator not in _HISTOGRAM_AGGREGATORS:
        raise BadRequestError(
            "Only NONE or SUM aggregation function supported for histogram query")
    if sub.downsample is not None and sub.downsample.function != "sum":
        raise BadRequestError("Only SUM downsampling aggregation supported for histogram query")
    for percentile in sub.percentiles:
        if not 0 <= percentile <= 100:
            raise BadRequestError(f"Invalid percentile parameters: {percentile}")


def _with_calendar(sub: SubQuery, use_calendar: bool) -> SubQuery:
    downsample = sub.downsample
    if not use_calendar or downsample is None or downsample.run_all or downsample.calendar:
        return sub
    return replace(sub, downsample=replace(downsample, calendar=True))


def describe_query(query: Query) -> str:
    """A one-line description in the spirit of OpenTSDB's ``TSQuery.toString()``."""
    subs = ", ".join(_describe_sub(sub) for sub in query.queries)
    end = query.end_text if query.end_text else "null"
    return (f"TSQuery(start_time={query.start_text}, end_time={end}, subQueries[{subs}], "
            f"no_annotations={_b(query.no_annotations)}, "
            f"with_global_annotations={_b(query.global_annotations)}, "
            f"show_tsuids={_b(query.show_tsuids)}, ms_resolution={_b(query.ms_resolution)})")


def _describe_sub(sub: SubQuery) -> str:
    filters = ", ".join(f"filter_name={f.type}, tagk={f.tagk}, group_by={_b(f.group_by)}, "
                        f"filter={f.filter}" for f in sub.filters)
    downsample = sub.downsample.text if sub.downsample else "null"
    return (f"TSSubQuery(metric={sub.metric or ''}, filters=[{filters}], "
            f"tsuids=[{', '.join(sub.tsuids)}], agg={sub.aggregator}, "
            f"downsample={downsample}, rate={_b(sub.rate)}, "
            f"explicit_tags={_b(sub.explicit_tags)}, index={sub.index})")


def _b(flag: bool) -> str:
    return "true" if flag else "false"
