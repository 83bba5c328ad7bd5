"""Expression benchmark (``/api/query/exp``'s engine and answer, no storage).

Two metrics x 50 group-by series x 1 day at 10 s (864,000 points per metric); the expression
``a * 100 / (a + b)`` joined by union and by intersection on the series' tags, then the answer
rendered as OpenTSDB's JSON. Prints CPU seconds and points per CPU-second for each stage.
"""

from __future__ import annotations

import time

import numpy as np

from app.api.exp_serialize import expression_output
from app.api.serialize import dumps_opentsdb
from app.engine.expression import Context, MetricInput, VarSeries, evaluate_expression
from app.query.expression.jexl import parse, variables
from app.query.expression.model import Expression, Join, Output

SERIES = 50
STEP_MS = 10_000
START_MS = 1_700_000_000_000
POINTS = 8640
RUNS = 3


def metric(ident: str, name: str, seed: int) -> MetricInput:
    rng = np.random.default_rng(seed)
    ts = START_MS + np.arange(POINTS, dtype=np.int64) * STEP_MS
    series = []
    for i in range(SERIES):
        tagv = (i + 1).to_bytes(3, "big")
        keep = rng.random(POINTS) > 0.05  # a few gaps: the fill policy matters
        series.append(VarSeries(name, {"host": f"web{i:03d}"}, ((b"\0\0\1", tagv),), (),
                                ts[keep], rng.uniform(0, 100, int(keep.sum()))))
    return MetricInput(ident, series, frozenset())


def cpu(call):  # noqa: ANN001, ANN201
    best = float("inf")
    result = None
    for _ in range(RUNS):
        started = time.process_time()
        result = call()
        best = min(best, time.process_time() - started)
    return best, result


def main() -> None:
    inputs = {"a": metric("a", "bench.user", 1), "b": metric("b", "bench.sys", 2)}
    points = sum(s.ts_ms.size for m in inputs.values() for s in m.series)
    text = "a * 100 / (a + b)"
    tree = parse(text)
    for operator in ("union", "intersection"):
        exp = Expression("e", text, Join(operator), None, tree, tuple(variables(tree)))

        def evaluate(exp: Expression = exp) -> object:
            return evaluate_expression("e", Context(inputs, ["a", "b"], {"e": exp}))

        eval_s, result = cpu(evaluate)

        def render(result: object = result) -> str:
            return dumps_opentsdb(expression_output(
                Output("e", None), result, START_MS, START_MS + POINTS * STEP_MS))  # type: ignore[arg-type]

        render_s, body = cpu(render)
        print(f"{operator:12s} evaluate {eval_s * 1000:7.1f} ms CPU "
              f"({points / eval_s / 1e6:5.1f} M input points/CPU-s); render "
              f"{render_s * 1000:7.1f} ms CPU ({points / render_s / 1e6:5.2f} M points/CPU-s, "
              f"{len(body) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
