"""``/api/query/exp``: OpenTSDB 2.4's expression query (``QueryRpc#handleExpressionQuery``).

The body (``app.query.expression.model``) names metrics, each run as an ordinary sub-query
through ``app.tsdb.execute`` (same limits, same deadline), and expressions over them,
evaluated by ``app.engine.expression``. POST (or GET with a body) as in 2.4; malformed or
invalid bodies are 400 with 2.4's message (2.4 itself answers most of them with a 500).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from flask import Response, current_app, request

from app.api import bp
from app.api.body import parse_json, raw_body
from app.api.budget import request_budget
from app.api.exp_serialize import expression_output, metric_output, query_echo
from app.api.query import JSON_TYPE, authorize_delete, delete_allowed
from app.api.query_tracking import tracked
from app.api.schemas import query_from_json
from app.api.serialize import dumps_opentsdb
from app.api.stats import record_points_read
from app.engine.expression import (
    Context,
    ExpressionRuntimeError,
    MetricInput,
    VarSeries,
    evaluate_expression,
)
from app.engine.model import GroupResult
from app.errors import BadRequestError
from app.jackson import java_hashmap_iteration
from app.query.ast import Query
from app.query.expression.jexl import Node
from app.query.expression.model import ExpQuery, ExpQueryError, Output, parse_exp_query
from app.query.expression.validate import validate_exp_query
from app.tsdb import TSDB
from app.tsdb.execute import run_query


@bp.route("/query/exp", methods=["GET", "POST", "DELETE"])
def query_exp() -> Response:
    if request.method == "DELETE" and not delete_allowed():  # as /api/query, checked first
        authorize_delete()
    text = raw_body().decode("utf-8", errors="replace").strip()
    if not text:
        raise BadRequestError("Incoming data was null or empty")
    now_ms = time.time_ns() // 1_000_000
    budget = request_budget()
    try:
        exp = parse_exp_query(parse_json(text))
        for expression in exp.expressions or ():
            budget.bounds.check_expression(expression.expr or "")  # before it is parsed
        exp = validate_exp_query(exp, now_ms)
    except ExpQueryError as exc:
        raise BadRequestError(str(exc)) from exc
    budget.bounds.check_expression_nodes(sum(_nodes(e.tree) for e in exp.parsed.values()))
    tsdb = current_app.extensions["tsdb"]
    query, source_of = _sub_queries(exp, now_ms)
    with tracked(query) as tracking:  # its lane, /api/stats/query, the query log
        outcome = run_query(tsdb, query, keep_scanned=True, budget=budget)
        tracking.ran(outcome.stats)
    record_points_read(sum(stats["dpsRead"] for stats in outcome.stats.values()))
    inputs = _inputs(tsdb, exp, outcome.results, source_of)
    budget.check_estimate("the expressions", _estimated_points(exp, inputs))
    ctx = Context(inputs, java_hashmap_iteration([m.id or "" for m in exp.metrics or ()],
                                        len(exp.metrics or ())), exp.parsed, deadline=budget)
    try:
        outputs = []
        for output in _outputs(exp):
            budget.check()
            outputs.append(_output(output, ctx, query))
    except ExpressionRuntimeError as exc:
        raise BadRequestError(str(exc)) from exc
    body = {"outputs": [o for o in outputs if o is not None], "query": query_echo(exp)}
    return Response(dumps_opentsdb(body), content_type=JSON_TYPE)


def _nodes(tree: Node | None) -> int:
    """The nodes of one parsed expression (each is evaluated once, however often used)."""
    count, stack = 0, [tree] if tree is not None else []
    while stack:
        node = stack.pop()
        count += 1
        stack.extend(node.args)
    return count


def _estimated_points(exp: ExpQuery, inputs: dict[str, MetricInput]) -> int:
    """Points the request builds, before it builds them: every expression (all are kept
    while the outputs are evaluated) holds at most the points of the metrics it reaches,
    its time-synced union of timestamps; metric outputs hold their metric's points."""
    points = {name: sum(s.ts_ms.size for s in metric.series) for name, metric in inputs.items()}
    reached: dict[str, frozenset[str]] = {}  # expression -> the metrics it reaches
    for exp_id in exp.parsed:
        stack = [(exp_id, False)]
        while stack:  # depth first, each expression once (a chain of 1,000 is linear)
            name, expanded = stack.pop()
            if name in reached:
                continue
            uses = exp.parsed[name].variables
            if expanded:
                reached[name] = frozenset().union(
                    *(reached[v] for v in uses if v in exp.parsed),
                    (v for v in uses if v in points))
                continue
            stack.append((name, True))
            stack.extend((v, False) for v in uses if v in exp.parsed and v not in reached)
    total = sum(points[m] for metrics in reached.values() for m in metrics)
    return total + sum(points.get(o.id or "", 0) for o in _outputs(exp)
                       if o.id not in exp.parsed)


def _sub_queries(exp: ExpQuery, now_ms: int) -> tuple[Query, list[int]]:
    """One ``/api/query`` sub-query per metric, built as 2.4's ``QueryExecutor`` does (the
    downsampler's fill policy is not passed on in 2.4, nor is a metric's ``timeOffset``),
    and for each metric the index of the sub-query that answers it (the query model keeps
    one of several equal sub-queries, as OpenTSDB does; 2.4 gives each the same results)."""
    span = exp.time
    assert span is not None and exp.metrics
    filters = {f.id: f for f in exp.filters or ()}
    subs: list[dict[str, Any]] = []
    for metric in exp.metrics:
        sub: dict[str, Any] = {"metric": metric.metric, "rate": span.rate,
                               "aggregator": (metric.aggregator or span.aggregator or "").lower()}
        if span.downsampler is not None:
            sub["downsample"] = f"{span.downsampler.interval}-{span.downsampler.aggregator}"
        chosen = filters.get(metric.filter) if metric.filter else None
        if chosen is not None:
            sub["filters"] = list(chosen.tags)
            sub["explicitTags"] = chosen.explicit_tags
        subs.append(sub)
    body: dict[str, Any] = {"start": span.start, "queries": subs}
    if span.end:
        body["end"] = span.end
    if span.timezone:
        body["timezone"] = span.timezone
    tz = current_app.config["TSD"]["tsd.core.timezone"]
    query = query_from_json(body, now_ms, tz)
    kept = [dataclasses.replace(sub, index=0) for sub in query.queries]
    source_of = []
    for sub in subs:
        alone = query_from_json({**body, "queries": [sub]}, now_ms, tz).queries[0]
        source_of.append(query.queries[kept.index(alone)].index)
    return query, source_of


def _inputs(tsdb: TSDB, exp: ExpQuery, results: list[GroupResult],
            source_of: list[int]) -> dict[str, MetricInput]:
    filters = {f.id: f for f in exp.filters or ()}
    inputs: dict[str, MetricInput] = {}
    for index, metric in enumerate(exp.metrics or ()):
        chosen = filters.get(metric.filter) if metric.filter else None
        tagks = frozenset(tsdb.tagk.get_id(str(t.get("tagk"))) for t in chosen.tags
                          ) if chosen is not None else frozenset()
        series = [_var_series(tsdb, r) for r in results if r.query_index == source_of[index]]
        fill = metric.fill_policy.value if metric.fill_policy is not None else 0.0
        inputs[metric.id or ""] = MetricInput(metric.id or "", series, tagks, fill)
    return inputs


def _var_series(tsdb: TSDB, result: GroupResult) -> VarSeries:
    pairs = sorted((tsdb.tagk.get_id(k), tsdb.tagv.get_id(v)) for k, v in result.tags.items())
    names = {tsdb.tagk.get_id(k): k for k in result.tags}
    agg = sorted((tsdb.tagk.get_id(k), k) for k in result.aggregate_tags)
    return VarSeries(result.metric, {names[k]: result.tags[names[k]] for k, _ in pairs},
                     tuple(pairs), tuple(agg), result.ts_ms.astype("int64"),
                     result.values.astype("float64"))


def _outputs(exp: ExpQuery) -> list[Output]:
    if exp.outputs:
        return list(exp.outputs)
    if exp.expressions:
        return [Output(e.id, None) for e in exp.expressions]
    return [Output(m.id, None) for m in exp.metrics or ()]


def _output(output: Output, ctx: Context, query: Query) -> dict[str, Any] | None:
    if output.id in ctx.expressions:
        result = evaluate_expression(output.id, ctx)
        return expression_output(output, result, query.start_ms, query.end_ms)
    if output.id in ctx.metrics:
        return metric_output(output, ctx.metrics[output.id].series)
    return None


