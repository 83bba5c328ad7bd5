"""The ``/api/query/exp`` body (OpenTSDB 2.4's ``net.opentsdb.query.pojo``) and its validation.

Body::

    {"name": str?, "time": {"start", "end"?, "timezone"?, "aggregator", "rate"?,
                            "downsampler"?: {"interval", "aggregator", "fillPolicy"?}},
     "filters"?: [{"id", "tags": [{"type", "tagk", "filter", "groupBy"}], "explicitTags"?}],
     "metrics": [{"id", "metric", "filter"?, "aggregator"?, "timeOffset"?, "fillPolicy"?}],
     "expressions"?: [{"id", "expr", "join"?: {"operator", "useQueryTags", "includeAggTags"},
                       "fillPolicy"?}],
     "outputs"?: [{"id", "alias"?}]}

    fillPolicy: {"policy": "none"|"nan"|"null"|"zero"|"scalar", "value": number}

:func:`parse_exp_query` reads the JSON as OpenTSDB's Jackson builders do (unknown keys ignored,
numbers accepted as strings); :meth:`ExpQuery.validate` checks it in OpenTSDB's order with its
messages (``Query#validate``). Failures raise :class:`ExpQueryError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.query.expression.jexl import Node

FILL_POLICIES = ("none", "zero", "nan", "null", "scalar")
SET_OPERATORS = ("union", "intersection")


class ExpQueryError(ValueError):
    """A malformed or invalid expression query (the API answers 400)."""


@dataclass(frozen=True)
class FillPolicy:
    policy: str
    value: float

    def echo(self) -> dict[str, Any]:
        return {"policy": self.policy, "value": self.value}


@dataclass(frozen=True)
class Downsampler:
    interval: str | None
    aggregator: str | None
    fill_policy: FillPolicy | None


@dataclass(frozen=True)
class Timespan:
    start: str | None
    end: str | None
    timezone: str | None
    downsampler: Downsampler | None
    aggregator: str | None
    rate: bool


@dataclass(frozen=True)
class FilterSet:
    id: str | None
    tags: tuple[dict[str, Any], ...]
    explicit_tags: bool


@dataclass(frozen=True)
class Metric:
    metric: str | None
    id: str | None
    filter: str | None
    time_offset: str | None
    aggregator: str | None
    fill_policy: FillPolicy | None


@dataclass(frozen=True)
class Join:
    operator: str = "union"
    use_query_tags: bool = False
    include_agg_tags: bool = True


@dataclass(frozen=True)
class Expression:
    id: str | None
    expr: str | None
    join: Join | None
    fill_policy: FillPolicy | None
    tree: Node | None = None
    variables: tuple[str, ...] = ()


@dataclass(frozen=True)
class Output:
    id: str | None
    alias: str | None


@dataclass(frozen=True)
class ExpQuery:
    name: str | None
    time: Timespan | None
    filters: tuple[FilterSet, ...] | None
    metrics: tuple[Metric, ...] | None
    expressions: tuple[Expression, ...] | None
    outputs: tuple[Output, ...] | None
    parsed: dict[str, Expression] = field(default_factory=dict, compare=False)


# ------------------------------------------------------------------ reading the JSON


def _text(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
    raise ExpQueryError(f"Cannot deserialize a string out of {_json_kind(value)} for '{key}'")


def _flag(raw: Mapping[str, Any], key: str, default: bool) -> bool:
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if isinstance(value, int):
        return value != 0
    raise ExpQueryError(f"Cannot deserialize a boolean out of {_json_kind(value)} for '{key}'")


def _object(value: Any, what: str) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ExpQueryError(f"Cannot deserialize {what} out of {_json_kind(value)}")
    return value


def _list(raw: Mapping[str, Any], key: str) -> list[Mapping[str, Any]] | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise ExpQueryError(f"Cannot deserialize '{key}' out of {_json_kind(value)}")
    return [_object(item, f"an entry of '{key}'") or {} for item in value]


def _json_kind(value: Any) -> str:
    return {list: "an array", dict: "an object", str: "a string", bool: "a boolean"}.get(
        type(value), "a number")


def _fill_policy(raw: Any) -> FillPolicy | None:
    """``NumericFillPolicy``: policy by name (any case); the value checked against it."""
    body = _object(raw, "a fill policy")
    if body is None:
        return None
    value = body.get("value", 0)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError as exc:
            raise ExpQueryError(f"Invalid fill policy value: {value}") from exc
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ExpQueryError("Invalid fill policy value")
    number = float(value)
    policy = _text(body, "policy")
    if policy is None:
        return FillPolicy("zero" if number == 0 else "nan" if math.isnan(number) else "scalar",
                          number)
    policy = policy.lower()
    if policy not in FILL_POLICIES:
        raise ExpQueryError(f"Unrecognized fill policy: {body.get('policy')}")
    if policy in ("none", "nan", "null"):
        if number != 0 and not math.isnan(number):
            what = "NULL must be 0" if policy == "null" else "NONE and NAN must be NaN"
            raise ExpQueryError(f"The value for {what}")
        return FillPolicy(policy, math.nan)
    if policy == "zero" and number != 0:
        raise ExpQueryError("The value for ZERO must be 0")
    return FillPolicy(policy, number)


def _join(raw: Any) -> Join | None:
    body = _object(raw, "a join")
    if body is None:
        return None
    operator = _text(body, "operator")
    if operator is not None and operator.lower() not in SET_OPERATORS:
        raise ExpQueryError(f"Unrecognized set operator: {operator}")
    return Join(operator.lower() if operator else "",
                _flag(body, "useQueryTags", False), _flag(body, "includeAggTags", True))


def _timespan(raw: Any) -> Timespan | None:
    body = _object(raw, "the time")
    if body is None:
        return None
    ds = _object(body.get("downsampler"), "a downsampler")
    downsampler = None if ds is None else Downsampler(
        _text(ds, "interval"), _text(ds, "aggregator"), _fill_policy(ds.get("fillPolicy")))
    return Timespan(_text(body, "start"), _text(body, "end"), _text(body, "timezone"),
                    downsampler, _text(body, "aggregator"), _flag(body, "rate", False))


def parse_exp_query(body: Any) -> ExpQuery:
    """The body as OpenTSDB's builders read it (no validation yet)."""
    raw = _object(body, "the query")
    if raw is None:
        raise ExpQueryError("Incoming data was null or empty")
    filters = _list(raw, "filters")
    metrics = _list(raw, "metrics")
    expressions = _list(raw, "expressions")
    outputs = _list(raw, "outputs")
    return ExpQuery(
        name=_text(raw, "name"),
        time=_timespan(raw.get("time")),
        filters=None if filters is None else tuple(
            FilterSet(_text(f, "id"), tuple(dict(t) for t in _list(f, "tags") or ()),
                      _flag(f, "explicitTags", False)) for f in filters),
        metrics=None if metrics is None else tuple(
            Metric(_text(m, "metric"), _text(m, "id"), _text(m, "filter"),
                   _text(m, "timeOffset"), _text(m, "aggregator"),
                   _fill_policy(m.get("fillPolicy"))) for m in metrics),
        expressions=None if expressions is None else tuple(
            Expression(_text(e, "id"), _text(e, "expr"), _join(e.get("join")),
                       _fill_policy(e.get("fillPolicy"))) for e in expressions),
        outputs=None if outputs is None else tuple(
            Output(_text(o, "id"), _text(o, "alias")) for o in outputs))
