"""Every ``/api/query`` from its admission to its answer: which lane it runs in, who sent it
(the user, the remote address, Grafana's dashboard and panel), how long it took, and how it
ended. Feeds ``/api/stats/query``, ``/metrics`` and the query log (slow and refused queries).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from flask import current_app, request
from werkzeug.datastructures import Headers

from app.api.security import current_auth
from app.api.serialize import query_echo
from app.errors import TsdbError
from app.observe import metrics
from app.observe.queries import QueryRecord, query_log
from app.query.ast import Query
from app.query.budget import CLIENT_GONE
from app.query.validate import describe_query
from app.tsdb.admission import QueryRefusedError, admission_for

LOG = logging.getLogger("app.query.log")
# Headers never echoed into /api/stats/query (OpenTSDB echoes them all).
HIDDEN_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-tsd-token"})
DASHBOARD_PATH = re.compile(r"/d(?:-solo)?/([^/?#]+)")
OUTCOMES = {200: "ok", 400: "bad_request", 408: "timeout", 413: "limit", 499: "client_gone"}


def attribution(headers: Headers | Mapping[str, str]) -> dict[str, str | None]:
    """Grafana's headers as ``dashboard``, ``panel``, ``org``, ``grafanaUser`` (its data
    proxy sends ``X-Dashboard-Uid``, ``X-Panel-Id``, ``X-Grafana-Org-Id``, and, when
    configured, ``X-Grafana-User``; older ones only ``X-Grafana-Referer``, the page's URL)."""
    referer = headers.get("X-Grafana-Referer") or ""
    parts = urlsplit(referer)
    params = parse_qs(parts.query)
    path = DASHBOARD_PATH.search(parts.path)

    def param(*names: str) -> str | None:
        return next((params[name][0] for name in names if params.get(name)), None)

    return {
        "dashboard": metrics.label(headers.get("X-Dashboard-Uid")
                                   or (path.group(1) if path else None)) or None,
        "panel": metrics.label(headers.get("X-Panel-Id")
                               or param("viewPanel", "editPanel", "panelId")) or None,
        "org": metrics.label(headers.get("X-Grafana-Org-Id") or param("orgId")) or None,
        "grafanaUser": metrics.label(headers.get("X-Grafana-User")) or None,
        "dashboardUrl": referer[:1024] or None,
    }


def query_json(query: Query) -> dict[str, Any]:
    """The query as OpenTSDB's ``TSQuery`` prints it in ``/api/stats/query``."""
    return {"start": query.start_text or str(query.start_ms), "end": query.end_text,
            "timezone": None, "options": None, "padding": False,
            "queries": [query_echo(sub) for sub in query.queries], "delete": query.delete,
            "noAnnotations": query.no_annotations,
            "globalAnnotations": query.global_annotations, "showTSUIDs": query.show_tsuids,
            "msResolution": query.ms_resolution, "showQuery": query.show_query,
            "showStats": query.show_stats, "showSummary": query.show_summary,
            "useCalendar": query.use_calendar}


class Tracking:
    """What the view tells the tracker: the outcome's per-sub-query stats."""

    def __init__(self) -> None:
        self.stats: dict[int, dict[str, Any]] = {}

    def ran(self, stats: Mapping[int, Mapping[str, Any]]) -> None:
        self.stats = {index: dict(values) for index, values in stats.items()}


@contextmanager
def tracked(query: Query) -> Iterator[Tracking]:
    """Admit ``query`` to its lane, show it as running, and record how it ended."""
    tsdb = current_app.extensions["tsdb"]
    who = attribution(request.headers)
    auth = current_auth()
    record = QueryRecord(
        query=query_json(query), remote=f"{request.remote_addr}:"
        f"{request.environ.get('REMOTE_PORT', '0')}",
        headers={name: value for name, value in request.headers.items()
                 if name.lower() not in HIDDEN_HEADERS},
        user=auth.user if auth is not None else who["grafanaUser"], attribution=who)
    admission = admission_for(tsdb)
    record.cost = admission.estimate(query)
    record.lane = admission.lane_for(record.cost)
    tracking = Tracking()
    status, error = 200, None
    try:
        with admission.admitted(record.cost, record.user, who["dashboard"],
                                request.environ.get(CLIENT_GONE)) as ticket:
            metrics.QUEUE_WAIT.labels(ticket.lane).observe(ticket.waited_s)
            record.started_s = time.perf_counter()  # the run, not the wait
            query_log().start(record)
            metrics.RUNNING.labels(record.lane).inc()
            try:
                yield tracking
            finally:
                metrics.RUNNING.labels(record.lane).dec()
    except TsdbError as exc:
        status, error = exc.code, exc
        raise
    except Exception as exc:
        status, error = 500, exc  # type: ignore[assignment]
        raise
    finally:
        _finish(query, record, tracking, status, error)
        if status == 200:
            admission.learn(query, {i: int(s.get("dpsRead", 0))
                                    for i, s in tracking.stats.items()})


@contextmanager
def admitted(cost: int) -> Iterator[None]:
    """Admit a read that is not a ``TSQuery`` (``/api/query/last``) to the lane ``cost``
    names, under the same user and dashboard quotas; it is not listed in /api/stats/query
    (OpenTSDB lists only TSQuery there)."""
    who = attribution(request.headers)
    auth = current_auth()
    admission = admission_for(current_app.extensions["tsdb"])
    with admission.admitted(cost, auth.user if auth is not None else who["grafanaUser"],
                            who["dashboard"], request.environ.get(CLIENT_GONE)) as ticket:
        metrics.QUEUE_WAIT.labels(ticket.lane).observe(ticket.waited_s)
        yield


def _finish(query: Query, record: QueryRecord, tracking: Tracking, status: int,
            error: BaseException | None) -> None:
    elapsed_ms = record.elapsed_ms()
    reason = error.reason if isinstance(error, QueryRefusedError) else None
    outcome = reason or OUTCOMES.get(status, "error")
    metrics.QUERIES.labels(record.lane, outcome).inc()
    metrics.QUERY_LATENCY.labels(record.lane).observe(elapsed_ms / 1000)
    stats: dict[str, Any] = {"processingPreWriteTime": round(elapsed_ms, 3),
                             "totalTime": round(elapsed_ms, 3)}
    for index, sub_stats in sorted(tracking.stats.items()):
        stats[f"queryIdx_{index:02d}"] = sub_stats
    message = str(getattr(error, "message", None) or error) if error is not None else None
    query_log().finish(record, status, _reason_phrase(status), message, stats)
    who = record.attribution
    if status in (408, 413, 503):
        metrics.REFUSED.labels(outcome, metrics.dashboard_label(who["dashboard"])).inc()
        LOG.warning("Query refused (%s, %d): %s; cost %d points (%s lane), dashboard %s "
                    "panel %s org %s user %s from %s: %s", outcome, status, message,
                    record.cost, record.lane, who["dashboard"], who["panel"], who["org"],
                    record.user, record.remote, describe_query(query))
        return
    slow_ms = int(current_app.config["TSD"]["tsd.query.slow_log_ms"])
    if slow_ms and elapsed_ms >= slow_ms:
        LOG.warning("Slow query (%.0f ms, status %d): cost %d points (%s lane), dashboard %s "
                    "panel %s org %s user %s from %s: %s", elapsed_ms, status, record.cost,
                    record.lane, who["dashboard"], who["panel"], who["org"], record.user,
                    record.remote, describe_query(query))


def _reason_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""
