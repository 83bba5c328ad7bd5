"""``/api/query/exp`` validation in OpenTSDB 2.4's order, with its messages.

First ``Query#validate`` (a nested failure is reported as ``Invalid time`` or
``Invalid <what> at index <i>``, its cause hidden, as 2.4 does), then the checks 2.4 makes
while planning the query (``QueryExecutor``): filters named by a metric, expressions without
variables, self and circular references between expressions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

from app.engine.aggregators import AGGREGATORS
from app.errors import TsdbError
from app.jackson import java_hashmap_iteration
from app.query.expression.jexl import ExpressionSyntaxError, parse, variables
from app.query.expression.model import (
    Downsampler,
    ExpQuery,
    ExpQueryError,
    Expression,
    Join,
    Metric,
    Timespan,
)
from app.query.timeparse import parse_duration_ms, parse_time

T = TypeVar("T")
R = TypeVar("R")


class _Invalid(ValueError):
    """A nested check failed; the caller reports it under its own name, as 2.4 does."""


def validate_id(id_: str | None) -> None:
    if not id_:
        raise _Invalid("The ID cannot be null or empty")
    for char in id_:
        if not char.isalnum():
            raise _Invalid(f'Invalid id ("{id_}"): illegal character: {char}')
    if len(id_) == 1 and id_.isdigit():
        raise _Invalid("The ID cannot be an integer")


def _aggregator(name: str | None, missing: str) -> None:
    if not name:
        raise _Invalid(missing)
    if name.lower() not in AGGREGATORS:
        raise _Invalid("Invalid aggregator")


def _parse(text: str, now_ms: int, tz: str) -> None:
    try:
        parse_time(text, now_ms, tz)
    except TsdbError as exc:
        raise _Invalid(exc.message) from exc


def _validate_time(time: Timespan, now_ms: int) -> None:
    if not time.start:
        raise _Invalid("missing or empty start")
    tz = time.timezone or "UTC"
    _parse(time.start, now_ms, tz)
    if time.end:
        _parse(time.end, now_ms, tz)
    if time.downsampler is not None:
        _validate_downsampler(time.downsampler)
    _aggregator(time.aggregator, "Missing or empty aggregator")


def _validate_downsampler(ds: Downsampler) -> None:
    if not ds.interval:
        raise _Invalid("Missing or empty interval")
    try:
        parse_duration_ms(ds.interval)
    except TsdbError as exc:
        raise _Invalid(exc.message) from exc
    _aggregator(ds.aggregator, "Missing or empty aggregator")


def _validate_metric(metric: Metric, now_ms: int) -> None:
    if not metric.metric:
        raise _Invalid("missing or empty metric")
    if not metric.id:
        raise _Invalid("missing or empty id")
    validate_id(metric.id)
    if metric.time_offset is not None:
        _parse(metric.time_offset, now_ms, "UTC")
    if metric.aggregator:
        _aggregator(metric.aggregator, "")


def _parsed_expression(expression: Expression) -> Expression:
    if not expression.id:
        raise _Invalid("missing or empty id")
    validate_id(expression.id)
    if not expression.expr:
        raise _Invalid("missing or empty expr")
    try:
        tree = parse(expression.expr)
    except ExpressionSyntaxError as exc:
        raise ExpQueryError(str(exc)) from exc  # 2.4 reports JEXL's error unwrapped
    return dataclasses.replace(expression, tree=tree, variables=tuple(variables(tree)),
                               join=expression.join or Join())


def _each(items: tuple[T, ...], what: str, check: Callable[[T], R]) -> list[R]:
    out: list[R] = []
    for i, item in enumerate(items):
        try:
            out.append(check(item))
        except _Invalid as exc:
            raise ExpQueryError(f"Invalid {what} at index {i}") from exc
    return out


def validate_exp_query(query: ExpQuery, now_ms: int) -> ExpQuery:
    """The query with its expressions parsed, or :class:`ExpQueryError` (2.4's message)."""
    if query.time is None:
        raise ExpQueryError("missing time")
    try:
        _validate_time(query.time, now_ms)
    except _Invalid as exc:
        raise ExpQueryError("Invalid time") from exc
    if not query.metrics:
        raise ExpQueryError("missing or empty metrics")
    ids = _unique_ids(query)
    _each(query.metrics, "metric", lambda m: _validate_metric(m, now_ms))
    _each(query.filters or (), "filter", lambda f: validate_id(f.id) if f.id else _missing_id())
    expressions = _each(query.expressions or (), "expression", _parsed_expression)
    if query.filters is not None:
        for metric in query.metrics:
            if metric.filter and metric.filter not in {f.id for f in query.filters}:
                raise ExpQueryError(
                    f"unrecognized filter id {metric.filter} in metric {metric.id}")
    for expression in expressions:
        for var in java_hashmap_iteration(expression.variables):
            if var not in ids:
                raise ExpQueryError(f"Expression [{expression.expr}] was missing input {var}")
    parsed = {e.id or "": e for e in expressions}
    query = dataclasses.replace(query, expressions=tuple(expressions) if expressions else
                                query.expressions, parsed=parsed)
    _plan_checks(query)
    return query


def _unique_ids(query: ExpQuery) -> set[str | None]:
    """Metric ids, filter ids and expression ids must not repeat (in 2.4's order)."""
    assert query.metrics
    ids: set[str | None] = set()
    for metric in query.metrics:
        if metric.id in ids:
            raise ExpQueryError(f"duplicated metric id: {_java(metric.id)}")
        ids.add(metric.id)
    filter_ids: set[str | None] = set()
    for filter_set in query.filters or ():
        if filter_set.id in filter_ids:
            raise ExpQueryError(f"duplicated filter id: {_java(filter_set.id)}")
        filter_ids.add(filter_set.id)
    for expression in query.expressions or ():
        if expression.id in ids:
            raise ExpQueryError(f"Duplicated variable or expression id: {_java(expression.id)}")
        ids.add(expression.id)
    return ids


def _missing_id() -> None:
    raise _Invalid("Missing or empty id")


def _java(value: str | None) -> str:
    return "null" if value is None else value


def _plan_checks(query: ExpQuery) -> None:
    """What 2.4's ``QueryExecutor`` rejects after validation."""
    for metric in query.metrics or ():
        if metric.filter and not query.filters:
            raise ExpQueryError(f"No filter defined: {metric.filter}")
    for expression in query.parsed.values():
        if not expression.variables:
            raise ExpQueryError("The expression didn't appear to have any variables")
    edges: dict[str, set[str]] = {}
    for exp_id in java_hashmap_iteration(query.parsed, len(query.parsed)):
        for var in java_hashmap_iteration(query.parsed[exp_id].variables):
            if var not in query.parsed:
                continue
            if var == exp_id:
                raise ExpQueryError(f"Self referencing expression found: {exp_id}")
            if _reaches(edges, var, exp_id):
                raise ExpQueryError(f"Circular reference found: {exp_id}")
            edges.setdefault(exp_id, set()).add(var)


def _reaches(edges: dict[str, set[str]], start: str, goal: str) -> bool:
    stack, seen = [start], set()
    while stack:
        node = stack.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(edges.get(node, ()))
    return False
