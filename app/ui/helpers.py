"""``/ui/api/*``: the small JSON helpers the pages need that the public API does not offer.

* ``/ui/api/status``: the home page's status strip. Only what is cheap: the UID counts are the
  ``MAXID`` counters of ``tsdb-uid`` (one row read per kind: UIDs ever assigned, so a name
  whose data was deleted still counts); points written are this worker's counter since it
  started (as in ``/api/stats``). Series are not counted: that needs a scan of the data table.
  ``newestMetric`` is the metric named last (the highest metric UID with a name), which the
  explorer opens on: after a first ``/api/put`` of a new metric, that metric.
* ``/ui/api/notes``: every note starting in [start, end], global and of every series, which
  ``/api/annotation/list`` gives only for named series. The cost is a scan of each metric's
  rows in the range (series notes live in the data rows, as in OpenTSDB).
"""

from __future__ import annotations

import os
import time
from urllib.parse import urlsplit

from flask import Response, current_app, jsonify, request

import app.tsdb.annotations as store
from app import __version__
from app.api.stats import COUNTERS
from app.errors import BadRequestError, NoSuchUniqueId
from app.query.timeparse import parse_time
from app.tsdb import TSDB
from app.tsdb.annotation_model import Note
from app.ui import bp

DEFAULT_NOTES = 5000


def _tsdb() -> TSDB:
    tsdb: TSDB = current_app.extensions["tsdb"]
    return tsdb


def storage_summary(url: str) -> dict[str, str]:
    """``{"backend": "sqlite"|"hbase", "location": path or host:port}`` of a storage URL."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        return {"backend": "sqlite", "location": url.removeprefix("sqlite:///")}
    return {"backend": parts.scheme, "location": parts.netloc}


NEWEST_TRIES = 8


def newest_metric(tsdb: TSDB, max_id: int) -> str:
    """The name of the highest metric UID that has one ("" when none of the last few has:
    a UID a losing writer assigned, or one whose name was deleted, has no name)."""
    metrics = tsdb.uids["metrics"]
    for uid in range(max_id, max(0, max_id - NEWEST_TRIES), -1):
        try:
            return metrics.get_name(uid.to_bytes(metrics.width, "big"))
        except NoSuchUniqueId:
            continue
    return ""


@bp.get("/ui/api/status")
def status() -> Response:
    settings = current_app.config["TSD"]
    tsdb = _tsdb()
    uids = {kind: uids.max_id() for kind, uids in tsdb.uids.items()}
    return jsonify({
        "version": __version__,
        "storage": storage_summary(settings["tsd.storage"]),
        "mode": settings["tsd.mode"],
        "uids": uids,
        "newestMetric": newest_metric(tsdb, uids["metrics"]),
        "worker": {"pid": os.getpid(), "startedMs": int(COUNTERS.started_s * 1000),
                   "pointsWritten": COUNTERS.points_written},
    })


def _time_arg(name: str, now_ms: int, default: int | None = None) -> int:
    text = request.args.get(name, "").strip()
    if not text:
        if default is None:
            raise BadRequestError(f"Missing the {name} time value", f"Pass {name}=<time>")
        return default
    return parse_time(text, now_ms, current_app.config["TSD"]["tsd.core.timezone"])


def every_note(tsdb: TSDB, start_ms: int, end_ms: int) -> list[Note]:
    """Global notes and the notes of every series of every metric, sorted by start."""
    notes = list(store.global_notes(tsdb, start_ms, end_ms))
    for metric, _uid in tsdb.uids["metrics"].grep(lambda _name: True):
        notes += store.metric_notes(tsdb, metric, [], start_ms, end_ms)
    return sorted(notes, key=lambda note: (note.start_ms, note.tsuid))


@bp.get("/ui/api/notes")
def notes() -> Response:
    """Like ``/api/annotation/list`` (same answer), for every series at once."""
    now_ms = time.time_ns() // 1_000_000
    start_ms = _time_arg("start", now_ms)
    end_ms = _time_arg("end", now_ms, now_ms)
    if end_ms < start_ms:
        raise BadRequestError("The end timestamp cannot be less than the start timestamp")
    limit = store.listing_limit(request.args.get("limit", str(DEFAULT_NOTES)))
    tsdb = _tsdb()
    return jsonify(store.listing(tsdb, every_note(tsdb, start_ms, end_ms), start_ms, end_ms,
                                 request.args.get("q", "").strip(), limit))
