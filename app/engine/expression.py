"""OpenTSDB 2.4's expression evaluation (``ExpressionIterator``) over sub-query results.

An expression's variables are metric ids (each a set of group-by series from one sub-query) or
other expressions. Evaluating one, as 2.4 does:

1. **Join** the variables' series on their tags (``IntersectionIterator``/``UnionIterator``):
   the join key is the series' (tagk, tagv) UIDs, only the tag keys of the metric's filters
   with ``useQueryTags``, plus its aggregated tag key UIDs with ``includeAggTags``; output rows
   come in key byte order. An intersection keeps keys every variable has (none: an error); a
   union keeps all, a missing variable reading 0.
2. **Time-sync**: the steps are every timestamp of the joined series. At a step a series without
   a point there reads its metric's fill policy value (default ``zero``); a NaN reads it too.
   A nested expression advances one of its own steps per step of the outer one (2.4 does not
   align them; when it runs out first, 2.4 fails with ``No more data``); its NaN reads its own
   fill policy (default ``nan``).
3. **Evaluate** the JEXL tree (``app.engine.expression_eval``) over all steps and rows; a result
   that is not a Double or Boolean is 2.4's error.

The iteration orders of 2.4's hash maps decide which variable's tags a row carries
(``app.jackson.java_hashmap_iteration``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from app.engine.expression_eval import BOOL, DOUBLE, JAVA_TYPE, evaluate
from app.engine.model import Float64Array, Int64Array
from app.jackson import java_hashmap_iteration
from app.query.expression.model import Expression, Join
from app.query.limits import NO_DEADLINE, Deadline

LONG_MAX = 2**63 - 1


class ExpressionRuntimeError(ValueError):
    """An expression cannot be evaluated over these results (OpenTSDB answers 400)."""


@dataclass
class VarSeries:
    """One group-by series of a sub-query, with the UIDs its join key is made of."""

    metric: str
    tags: dict[str, str]                          # tagk UID order
    tag_uids: tuple[tuple[bytes, bytes], ...]     # (tagk, tagv) sorted by tagk UID
    agg_tags: tuple[tuple[bytes, str], ...]       # (tagk UID, name) sorted by UID
    ts_ms: Int64Array
    values: Float64Array


@dataclass
class MetricInput:
    id: str
    series: list[VarSeries]
    query_tagks: frozenset[bytes]
    fill_value: float = 0.0  # TimeSyncedIterator's default policy is zero


@dataclass
class Row:
    """Meta of one output series (OpenTSDB's ``ExpressionDataPoint``)."""

    metrics: frozenset[str]
    tags: dict[str, str]
    tag_uids: tuple[tuple[bytes, bytes], ...]
    agg_tags: tuple[tuple[bytes, str], ...]


@dataclass
class SeriesSet:
    """An evaluated expression: ``values[row, step]`` at ``timeline[step]``."""

    id: str
    timeline: Int64Array
    rows: list[Row]
    values: Float64Array
    fill_value: float = math.nan  # the expression's fill policy (default nan)


@dataclass
class Context:
    metrics: dict[str, MetricInput]
    metric_order: list[str]          # OpenTSDB's sub-query map order of the metric ids
    expressions: dict[str, Expression]
    done: dict[str, SeriesSet] = field(default_factory=dict)
    # The request's budget: checked before each expression is evaluated.
    deadline: Deadline = NO_DEADLINE


def row_of(series: VarSeries) -> Row:
    return Row(frozenset([series.metric]), series.tags, series.tag_uids, series.agg_tags)


@dataclass
class _Sub:
    """One joined variable: a metric's series (time-synced) or a nested expression."""

    id: str
    rows: list[Row]
    query_tagks: frozenset[bytes] | None
    metric: MetricInput | None = None
    nested: SeriesSet | None = None
    nulled: set[int] = field(default_factory=set)


def evaluate_expression(exp_id: str, ctx: Context) -> SeriesSet:
    """``exp_id`` evaluated, its nested expressions first (bottom-up, without recursion, so a
    long chain of expressions cannot exhaust the stack)."""
    for dependency in _bottom_up(exp_id, ctx.expressions):
        if dependency not in ctx.done:
            ctx.deadline.check()
            ctx.done[dependency] = _evaluate_one(dependency, ctx)
    return ctx.done[exp_id]


def _bottom_up(exp_id: str, expressions: dict[str, Expression]) -> list[str]:
    """``exp_id`` and the expressions it uses, each after those it uses (no cycles: the
    validation refused them)."""
    order: list[str] = []
    seen: set[str] = set()
    stack: list[tuple[str, bool]] = [(exp_id, False)]
    while stack:
        name, expanded = stack.pop()
        if expanded:
            order.append(name)
            continue
        if name in seen:
            continue
        seen.add(name)
        stack.append((name, True))
        stack.extend((var, False) for var in expressions[name].variables
                     if var in expressions and var not in seen)
    return order


def _evaluate_one(exp_id: str, ctx: Context) -> SeriesSet:
    expression = ctx.expressions[exp_id]
    assert expression.tree is not None
    subs = _subs(expression, ctx)
    join = expression.join or Join()
    table = _intersect(exp_id, subs, join) if join.operator == "intersection" else \
        _union(subs, join)
    timeline = _timeline(subs)
    env = {sub.id: _variable_values(sub, table, position, timeline)
           for position, sub in enumerate(subs)}
    shape = (len(table), timeline.size)
    result = evaluate(expression.tree, env, shape)
    _check_types(exp_id, expression, result.kinds)
    rows = [_row_meta(subs, entry) for entry in table]
    fill = expression.fill_policy.value if expression.fill_policy is not None else math.nan
    return SeriesSet(exp_id, timeline, rows, result.values, fill)


def _subs(expression: Expression, ctx: Context) -> list[_Sub]:
    """The variables in the order of 2.4's ``results``/``queries`` hash maps."""
    names = set(expression.variables)
    inserted = [m for m in ctx.metric_order if m in names]
    inserted += [v for v in java_hashmap_iteration(expression.variables) if v in ctx.expressions]
    results = java_hashmap_iteration(inserted)
    queries = java_hashmap_iteration(results, len(results))
    subs: list[_Sub] = []
    for name in queries:
        if name in ctx.metrics:
            metric = ctx.metrics[name]
            subs.append(_Sub(name, [row_of(s) for s in metric.series], metric.query_tagks,
                             metric=metric))
        else:
            nested = ctx.done[name]  # evaluated first (evaluate_expression)
            subs.append(_Sub(name, nested.rows, None, nested=nested))
    return subs


def _key(row: Row, sub: _Sub, join: Join) -> bytes:
    if not row.tag_uids:
        return b""
    parts = [k + v for k, v in row.tag_uids
             if not join.use_query_tags or (sub.query_tagks and k in sub.query_tagks)]
    if join.include_agg_tags:
        parts += [uid for uid, _ in row.agg_tags]
    return b"".join(parts)


def _union(subs: list[_Sub], join: Join) -> list[list[int | None]]:
    table: dict[bytes, list[int | None]] = {}
    for position, sub in enumerate(subs):
        for i, row in enumerate(sub.rows):
            table.setdefault(_key(row, sub, join), [None] * len(subs))[position] = i
    return [table[key] for key in sorted(table)]


def _intersect(exp_id: str, subs: list[_Sub], join: Join) -> list[list[int | None]]:
    """2.4's ``computeIntersection``, step by step (its nulled iterators drop out of the
    time sync; a key seen twice in one variable keeps the last series)."""
    if not any(sub.rows for sub in subs):
        return []
    first = subs[0]
    table: dict[bytes, list[int | None]] = {}
    seen: dict[str, dict[bytes, int]] = {first.id: {}}
    for i, row in enumerate(first.rows):
        key = _key(row, first, join)
        seen[first.id][key] = i
        table[key] = [None] * len(subs)
        table[key][0] = i
    for position, sub in enumerate(subs[1:], start=1):
        keys: dict[bytes, int] = {}
        seen[sub.id] = keys
        for i, row in enumerate(sub.rows):
            key = _key(row, sub, join)
            keys[key] = i
            if key not in table:
                sub.nulled.add(i)
                continue
            table[key][position] = i
        for key in [k for k in table if k not in keys]:
            for other in subs:
                if other.id != sub.id and key in seen.get(other.id, {}):
                    other.nulled.add(seen[other.id][key])
            del table[key]
    if not table:
        raise ExpressionRuntimeError(
            f"No intersections found: IntersectionIterator(id={exp_id}, useQueryTags="
            f"{_java_bool(join.use_query_tags)}, includeAggTags="
            f"{_java_bool(join.include_agg_tags)})")
    return [table[key] for key in sorted(table)]


def _timeline(subs: list[_Sub]) -> Int64Array:
    """Every step's timestamp: the earliest next point of any live series or nested step."""
    stamps = [s.ts_ms for sub in subs if sub.metric is not None
              for i, s in enumerate(sub.metric.series) if i not in sub.nulled]
    merged = np.unique(np.concatenate(stamps)) if stamps else np.empty(0, dtype=np.int64)
    nested = [sub.nested.timeline for sub in subs if sub.nested is not None]
    if not nested:
        return merged.astype(np.int64)
    steps: list[int] = []
    m = k = 0
    while m < merged.size or any(k < line.size for line in nested):
        ts = min([int(merged[m])] if m < merged.size else [LONG_MAX])
        ts = min([ts] + [int(line[k]) for line in nested if k < line.size])
        if m < merged.size and merged[m] == ts:
            m += 1
        if any(k >= line.size for line in nested):
            raise ExpressionRuntimeError("No more data")
        k += 1
        steps.append(ts)
    return np.array(steps, dtype=np.int64)


def _variable_values(sub: _Sub, table: list[list[int | None]], position: int,
                     timeline: Int64Array) -> Float64Array:
    out = np.zeros((len(table), timeline.size), dtype=np.float64)
    for r, entry in enumerate(table):
        index = entry[position]
        if index is None:
            continue  # a union's missing variable reads 0 (UnionIterator's fill)
        if sub.nested is not None:
            values = sub.nested.values[index][: timeline.size]
            # A NaN reads the nested expression's fill policy (2.4 meant to; its copy of the
            # expression has none and fails: docs/differences.md)
            out[r, : values.size] = np.where(np.isnan(values), sub.nested.fill_value, values)
            continue
        assert sub.metric is not None
        fill = sub.metric.fill_value
        series = sub.metric.series[index]
        row = np.full(timeline.size, fill, dtype=np.float64)
        if index not in sub.nulled and series.ts_ms.size:
            where = np.searchsorted(series.ts_ms, timeline)
            where = np.minimum(where, series.ts_ms.size - 1)
            hit = series.ts_ms[where] == timeline
            row[hit] = series.values[where[hit]]
        row[np.isnan(row)] = fill
        out[r] = row
    return out


def _check_types(exp_id: str, expression: Expression, kinds: np.ndarray) -> None:
    """2.4 accepts a Double or a Boolean; it meets values step by step, row by row."""
    bad = (kinds != DOUBLE) & (kinds != BOOL)
    if not bad.any():
        return
    step_major = np.argwhere(bad.T)[0]
    kind = int(kinds[step_major[1], step_major[0]])
    raise ExpressionRuntimeError(
        f"Expression returned a result of type: {JAVA_TYPE[kind]} for ExpressionIterator("
        f"id={exp_id}, expression=\"{expression.expr}")


def _row_meta(subs: list[_Sub], entry: list[int | None]) -> Row:
    """The first variable (2.4's result map order) gives the tags; metrics and aggregated
    tags are the union over all variables."""
    order = java_hashmap_iteration([sub.id for sub in subs], len(subs))
    by_id = {sub.id: (sub, entry[position]) for position, sub in enumerate(subs)}
    first_sub, first_index = by_id[order[0]]
    first = first_sub.rows[first_index] if first_index is not None else None
    metrics: set[str] = set()
    agg: dict[bytes, str] = {}
    for sub, index in by_id.values():
        if index is not None:
            row = sub.rows[index]
            metrics |= row.metrics
            agg.update(row.agg_tags)
    return Row(frozenset(metrics), dict(first.tags) if first else {},
               first.tag_uids if first else (), tuple(sorted(agg.items())))


def _java_bool(flag: bool) -> str:
    return "true" if flag else "false"
