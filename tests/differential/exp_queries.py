"""Generated ``/api/query/exp`` requests and the comparison of two answers to one.

The generator covers several expression shapes (arithmetic, comparisons, booleans, the
ternary, decimal literals, division by zero, nested expressions), both joins with
``useQueryTags``/``includeAggTags``, metric fill policies, aggregators, downsampling and rate,
filter sets (group-by and not, explicit tags), outputs with aliases and metric outputs, plus
malformed bodies answered by status and message.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from typing import Any

from tests.differential.exp_data import SPAN_S, T0

METRICS = ("ex.a", "ex.b", "ex.c", "ex.z")
AGGREGATORS = ("sum", "avg", "max", "min", "count", "none", "dev", "zimsum")
EXPRS_1 = ("a * 2", "a + 1.5", "a / 3", "-a", "a % 7", "a > 100", "!a", "a == a",
           "a >= 200 && a < 400", "a * 0.1", "(a - 10) * (a + 10)")
EXPRS_2 = ("a + b", "a - b", "a * b", "a / b", "b / a", "a % b", "a > b", "a == b",
           "a != b || b > 3", "a > b ? a : b", "(a + b) / 2", "a * 100 / (a + b)",
           "a ?: b", "a lt b", "a div b")
FILLS = (None, {"policy": "zero"}, {"policy": "nan"}, {"policy": "scalar", "value": 1},
         {"policy": "scalar", "value": -2.5}, {"policy": "none"}, {"policy": "null"}, {"value": 7})


@dataclass(frozen=True)
class ExpCase:
    ident: str
    body: str
    kind: str = "generated"  # generated | malformed


class ExpQueryGenerator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def _time(self) -> dict[str, Any]:
        rng = self.rng
        start = T0 + rng.choice((0, 0, 300, 1800, 3600))
        time: dict[str, Any] = {"start": str(start) if rng.random() < 0.8 else start * 1000,
                                "end": str(start + rng.choice((600, 1800, 3600, SPAN_S))),
                                "aggregator": rng.choice(AGGREGATORS[:5])}
        if rng.random() < 0.35:
            time["downsampler"] = {"interval": rng.choice(("1m", "2m", "5m", "10m")),
                                   "aggregator": rng.choice(("avg", "sum", "max", "count"))}
        if rng.random() < 0.1:
            time["rate"] = True
        if rng.random() < 0.1:
            time["timezone"] = "UTC"
        return time

    def _filters(self) -> list[dict[str, Any]]:
        rng = self.rng
        tags = [{"type": "wildcard", "tagk": "host", "filter": "*",
                 "groupBy": rng.random() < 0.8}]
        if rng.random() < 0.4:
            kind = rng.choice(("literal_or", "wildcard"))
            tags.append({"type": kind, "tagk": "dc",
                         "filter": rng.choice(("lga", "lga|sjc") if kind == "literal_or" else
                                              ("*", "s*", "*a")),
                         "groupBy": rng.random() < 0.5})
        filters = [{"id": "f1", "tags": tags}]
        if rng.random() < 0.2:
            filters[0]["explicitTags"] = True
        if rng.random() < 0.5:
            filters.append({"id": "f2", "tags": [{"type": "literal_or", "tagk": "host",
                                                  "filter": "web01|web02", "groupBy": True}]})
        return filters

    def _metric(self, ident: str, filters: list[dict[str, Any]]) -> dict[str, Any]:
        rng = self.rng
        metric: dict[str, Any] = {"id": ident, "metric": rng.choice(METRICS[:3])}
        if rng.random() < 0.75:
            metric["filter"] = rng.choice([f["id"] for f in filters])
        if rng.random() < 0.25:
            metric["aggregator"] = rng.choice(AGGREGATORS)
        fill = rng.choice(FILLS)
        if fill is not None:
            metric["fillPolicy"] = fill
        return metric

    def one(self) -> dict[str, Any]:
        rng = self.rng
        filters = self._filters()
        two = rng.random() < 0.7
        metrics = [self._metric("a", filters)]
        if two:
            metrics.append(self._metric("b", filters))
        expr = rng.choice(EXPRS_2 if two else EXPRS_1)
        expression: dict[str, Any] = {"id": "e", "expr": expr}
        if rng.random() < 0.8:
            expression["join"] = {"operator": rng.choice(("union", "intersection")),
                                  "useQueryTags": rng.random() < 0.5,
                                  "includeAggTags": rng.random() < 0.6}
        expressions = [expression]
        if rng.random() < 0.15:
            expressions.append({"id": "g", "expr": rng.choice(("e * 2", "e + a", "e > 1"))})
        body: dict[str, Any] = {"time": self._time(), "filters": filters, "metrics": metrics,
                                "expressions": expressions}
        if rng.random() < 0.4:
            outputs = [{"id": "e", "alias": "the e"} if rng.random() < 0.5 else {"id": "e"}]
            if rng.random() < 0.5:
                outputs.append({"id": "a"})
            body["outputs"] = outputs
        if rng.random() < 0.1:
            body["name"] = "q"
        return body

    def generate(self, count: int) -> list[ExpCase]:
        return [ExpCase(f"exp{i}", json.dumps(self.one())) for i in range(count)]


def malformed() -> list[ExpCase]:
    time = {"start": str(T0), "end": str(T0 + 600), "aggregator": "sum"}
    a = {"id": "a", "metric": "ex.a"}
    bodies: list[Any] = [
        {}, {"time": {}}, {"time": {"start": str(T0)}}, {"time": {**time, "aggregator": "x"}},
        {"time": {**time, "start": "yesterday"}}, {"time": time}, {"time": time, "metrics": []},
        {"time": time, "metrics": [{"metric": "ex.a"}]}, {"time": time, "metrics": [{"id": "a"}]},
        {"time": time, "metrics": [{"id": "a-b", "metric": "ex.a"}]},
        {"time": time, "metrics": [{"id": "1", "metric": "ex.a"}]},
        {"time": time, "metrics": [a, {"id": "a", "metric": "ex.b"}]},
        {"time": time, "metrics": [{**a, "filter": "f9"}]},
        {"time": time, "metrics": [{**a, "filter": "f9"}], "filters": [{"id": "f1", "tags": []}]},
        {"time": time, "metrics": [a], "filters": [{"id": "f1", "tags": []},
                                                   {"id": "f1", "tags": []}]},
        {"time": time, "metrics": [{"id": "a", "metric": "no.such"}]},
        {"time": time, "metrics": [a], "expressions": [{"id": "e", "expr": "a + q"}]},
        {"time": time, "metrics": [a], "expressions": [{"id": "a", "expr": "a + 1"}]},
        {"time": time, "metrics": [a], "expressions": [{"id": "e", "expr": "e + 1"}]},
        {"time": time, "metrics": [a], "expressions": [{"id": "e", "expr": "2"}]},
        {"time": time, "metrics": [a], "expressions": [{"id": "e"}]},
        {"time": time, "metrics": [a], "expressions": [{"id": "e", "expr": "a +"}]},
        {"time": time, "metrics": [a], "expressions": [{"id": "e", "expr": "(a * 2"}]},
        {"time": time, "metrics": [a], "expressions": [{"id": "e", "expr": "a > 1 ? 1 : 0"}]},
        {"time": time, "metrics": [a], "expressions": [{"id": "e", "expr": "a > 1 ? 0.5 : a"}]},
        {"time": time, "metrics": [a], "expressions": [{"id": "e", "expr": "a + 1"},
                                                       {"id": "g", "expr": "e + h"},
                                                       {"id": "h", "expr": "g * 2"}]},
        {"time": time, "metrics": [a], "outputs": [{"id": "nothing"}]},
        {"time": {**time, "downsampler": {"interval": "1m"}}, "metrics": [a]},
        {"time": {**time, "downsampler": {"interval": "1x", "aggregator": "sum"}},
         "metrics": [a]},
        {"time": time, "metrics": [{**a, "aggregator": "bogus"}]},
        {"time": time, "metrics": [{**a, "timeOffset": "1h-ago"}]},
        {"time": time, "metrics": [a, {"id": "b", "metric": "ex.c", "filter": "f1"}],
         "filters": [{"id": "f1", "tags": [{"type": "literal_or", "tagk": "host",
                                           "filter": "web09", "groupBy": True}]}],
         "expressions": [{"id": "e", "expr": "a + b", "join": {"operator": "intersection"}}]},
    ]
    return [ExpCase(f"bad{i}", json.dumps(b), "malformed") for i, b in enumerate(bodies)]


# ------------------------------------------------------------------ comparison


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, str) or isinstance(b, str) or a is None or b is None:
        return a == b
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if a == b:
        return True
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def _error_message(text: str) -> str:
    """2.4 appends its iterators' ``toString`` to some messages: compare up to it."""
    cut = text.find("Iterator(")
    return text if cut < 0 else text[:cut]


def compare_exp(ref: tuple[int, str], got: tuple[int, str]) -> list[str]:
    (status_r, text_r), (status_g, text_g) = ref, got
    lines: list[str] = []
    if status_r != status_g:
        lines.append(f"status {status_r} vs {status_g}")
    try:
        body_r, body_g = json.loads(text_r), json.loads(text_g)
    except ValueError:
        return lines + [f"unparsable: {text_r[:200]!r} vs {text_g[:200]!r}"]
    if "error" in body_r or "error" in body_g:
        msg_r = _error_message(str(body_r.get("error", {}).get("message")))
        msg_g = _error_message(str(body_g.get("error", {}).get("message")))
        if msg_r != msg_g:
            lines.append(f"message {msg_r[:300]!r} vs {msg_g[:300]!r}")
        return lines
    if body_r.get("query") != body_g.get("query"):
        lines.append(f"query echo {json.dumps(body_r.get('query'))[:400]} vs "
                     f"{json.dumps(body_g.get('query'))[:400]}")
    outs_r, outs_g = body_r.get("outputs", []), body_g.get("outputs", [])
    if len(outs_r) != len(outs_g):
        return lines + [f"{len(outs_r)} outputs vs {len(outs_g)}"]
    for out_r, out_g in zip(outs_r, outs_g, strict=True):
        lines += _compare_output(out_r, out_g)
    return lines


def _compare_output(out_r: dict[str, Any], out_g: dict[str, Any]) -> list[str]:
    where = out_r.get("id")
    lines = []
    for key in ("id", "alias", "dpsMeta", "meta"):
        if out_r.get(key) != out_g.get(key):
            lines.append(f"output {where} {key}: {json.dumps(out_r.get(key))[:300]} vs "
                         f"{json.dumps(out_g.get(key))[:300]}")
    if list(out_r) != list(out_g):
        lines.append(f"output {where} keys {list(out_r)} vs {list(out_g)}")
    dps_r, dps_g = out_r.get("dps", []), out_g.get("dps", [])
    if len(dps_r) != len(dps_g):
        return lines + [f"output {where}: {len(dps_r)} dps vs {len(dps_g)}"]
    for row_r, row_g in zip(dps_r, dps_g, strict=True):
        if len(row_r) != len(row_g) or not all(map(_close, row_r, row_g)):
            lines.append(f"output {where} dps {row_r} vs {row_g}")
            break
    return lines
