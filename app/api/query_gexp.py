"""``/api/query/gexp``: Graphite-style functions over ``m=`` sub-queries (OpenTSDB 2.4).

``GET /api/query/gexp?start=…&exp=scale(sum:cpu{host=*},2)&exp=…`` runs every metric leaf of
every ``exp=`` as one sub-query of a normal query (limits, deadline and flags as on
``/api/query``), then evaluates each expression over its leaves' series (``app/engine``) and
answers with the expressions' series only, in ``/api/query``'s shape. OpenTSDB reads only
the query string here: a POST body has no ``exp`` (OpenTSDB 2.4.1 fails with a null pointer).
"""

from __future__ import annotations

import time
from dataclasses import replace

from flask import Response, current_app, request

from app.api import bp
from app.api.budget import request_budget
from app.api.query_tracking import tracked
from app.api.serialize import dumps_opentsdb, serialize_results
from app.api.stats import record_points_read
from app.engine.gexp_eval import evaluate_tree
from app.engine.gexp_functions import FUNCTIONS, GexpContext
from app.engine.model import GroupResult
from app.errors import BadRequestError
from app.query.gexp import parse_expressions
from app.query.parse import parse_m, query_from_args
from app.tsdb import TSDB
from app.tsdb.execute import run_query

JSON_TYPE = "application/json; charset=UTF-8"


class TsdbUidOrder:
    """Names to their UIDs, which order OpenTSDB's series sets."""

    def __init__(self, tsdb: TSDB) -> None:
        self._uids = tsdb.uids

    def metric(self, name: str) -> bytes:
        return self._uids["metrics"].find_id(name) or name.encode()

    def tagk(self, name: str) -> bytes:
        return self._uids["tagk"].find_id(name) or name.encode()

    def tagv(self, name: str) -> bytes:
        return self._uids["tagv"].find_id(name) or name.encode()


def _leaf_indexes(m_texts: list[str], tsuid_count: int, leaf_count: int) -> list[int]:
    """The sub-query index that answers each leaf (the last ``leaf_count`` of ``m_texts``):
    a repeated sub-query runs once, under the index of its first occurrence
    (``app.query.validate``)."""
    first: dict[object, int] = {}
    indexes = []
    for position, text in enumerate(m_texts):
        draft = replace(parse_m(text, 0), index=0)
        indexes.append(tsuid_count + first.setdefault(draft, position))
    return indexes[len(m_texts) - leaf_count:]


@bp.route("/query/gexp", methods=["GET", "POST"])
def query_gexp() -> Response:
    if request.method == "POST":
        raise BadRequestError("POST is not supported by /api/query/gexp",
                              "Send a GET with start and one or more exp= parameters")
    if not request.args.get("start"):
        raise BadRequestError("Missing parameter <code>start</code>")
    trees, leaves = parse_expressions(request.args.getlist("exp"), FUNCTIONS)
    args = request.args.to_dict(flat=False)
    args["m"] = args.get("m", []) + leaves
    tsd = current_app.config["TSD"]
    query = query_from_args(args, time.time_ns() // 1_000_000, tsd["tsd.core.timezone"])
    tsdb: TSDB = current_app.extensions["tsdb"]
    budget = request_budget()
    with tracked(query) as tracking:  # its lane, /api/stats/query, the query log
        outcome = run_query(tsdb, query, budget=budget)
        tracking.ran(outcome.stats)
    by_index: dict[int, list[GroupResult]] = {}
    for result in outcome.results:
        by_index.setdefault(result.query_index, []).append(result)
    tsuid_count = len(args.get("tsuid", []))
    by_leaf = [by_index.get(index, [])
               for index in _leaf_indexes(args["m"], tsuid_count, len(leaves))]
    context = GexpContext(query.start_ms, query.end_ms, TsdbUidOrder(tsdb), budget)
    results = []
    for tree in trees:
        budget.check()
        results += evaluate_tree(tree, by_leaf, context)
    budget.limits.check_output(query.queries[-1], int(sum(r.ts_ms.size for r in results)))
    body = serialize_results(query, results, global_annotations=outcome.global_annotations,
                             stats=outcome.stats, deadline=budget)
    record_points_read(sum(stats["dpsRead"] for stats in outcome.stats.values()))
    return Response(dumps_opentsdb(body), content_type=JSON_TYPE)
