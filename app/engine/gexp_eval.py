"""Evaluating a parsed ``exp=`` tree over its leaves' results (OpenTSDB's ``ExpressionTree``)."""

from __future__ import annotations

import re

from app.engine.gexp_functions import FUNCTIONS, GexpContext
from app.engine.model import GroupResult
from app.errors import BadRequestError
from app.query.gexp import Call, MetricLeaf

_TAGS = re.compile(r"\{.*\}", re.DOTALL)


def _java_hash_order(keys: list[int]) -> list[int]:
    """The iteration order of a ``java.util.HashMap`` of small non-negative Integer keys
    inserted in this order (OpenTSDB prints an expression's metrics in this order)."""
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2
    return sorted(keys, key=lambda k: k & (capacity - 1))  # stable: insertion order in a bucket


def tree_text(call: Call) -> str:
    """The tree as OpenTSDB writes it in errors: nested calls first, then the metric names of
    the leaves, without the functions' parameters (except alias's)."""
    parts = [tree_text(arg) for arg in call.args if isinstance(arg, Call)]
    leaves = {arg.index: arg.text for arg in call.args if isinstance(arg, MetricLeaf)}
    if leaves:
        names = [_TAGS.sub("", leaves[i]).rsplit(":", 1)[-1]
                 for i in _java_hash_order(list(leaves))]
        parts.append(",".join(names))
    inner = ",".join(parts)
    function = FUNCTIONS[call.name]
    if function.name == "alias" and call.params:
        inner += "," + ",".join(call.params)
    return f"{function.name}({inner})"


def evaluate_tree(call: Call, leaf_results: list[list[GroupResult]],
                  ctx: GexpContext) -> list[GroupResult]:
    """The tree's output series; ``leaf_results[i]`` holds the series of leaf ``i``."""
    ctx.deadline.check()
    positions = [i for i, _ in call.series_args]
    if positions != list(range(len(positions))):
        # OpenTSDB looks series arguments up by position 0, 1, ...: a plain parameter
        # before a series argument leaves a hole.
        raise BadRequestError(f"Unknown parameter type: null in tree: {tree_text(call)}")
    inputs = []
    for _, arg in call.series_args:
        if isinstance(arg, MetricLeaf):
            inputs.append(leaf_results[arg.index])
        else:
            assert isinstance(arg, Call)
            inputs.append(evaluate_tree(arg, leaf_results, ctx))
    return FUNCTIONS[call.name].evaluate(ctx, inputs, call.params)
