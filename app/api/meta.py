"""Server metadata: ``/api/aggregators``, ``/api/config``, ``/api/config/filters``,
``/api/version``, ``/api/serializers``, ``/api/stats`` and ``/api/dropcaches`` (``RpcManager``).
"""

from __future__ import annotations

import functools
import getpass
import platform
import time
from typing import Any

from flask import Response, current_app, jsonify

from app import __version__
from app.api import bp, stats
from app.engine.aggregators import AGGREGATORS
from app.errors import BadRequestError, NotFoundError, TsdbError
from app.query.filters import config_filters

#: The OpenTSDB API level pytsd implements, reported as ``version`` (clients compare it).
API_VERSION = "2.4.1"
STARTED_S = int(time.time())

SERIALIZER_METHODS = {
    "formatters": ["AggregatorsV1", "AnnotationV1", "AnnotationsV1", "ConfigV1", "DropCachesV1",
                   "ErrorV1", "FilterConfigsV1", "LastPointQueryV1", "PutV1", "QueryV1",
                   "SearchResultsV1", "SerializersV1", "StatsV1", "SuggestV1", "UidAssignV1",
                   "UidMetaV1", "VersionV1"],
    "parsers": ["AnnotationV1", "AnnotationBulkV1", "LastPointQueryV1", "PutV1", "QueryV1",
                "SearchQueryV1", "SuggestV1", "UidAssignV1"],
}


@bp.route("/aggregators", methods=["GET", "POST"])
def aggregators() -> Response:
    """The registry the query parser checks names against, sorted (OpenTSDB: hash order)."""
    return jsonify(sorted(AGGREGATORS))


@bp.route("/config/filters", methods=["GET", "POST"])
def filters() -> Response:
    return jsonify(config_filters())


@bp.route("/config", methods=["GET", "POST"])
def config() -> Response:
    """Effective settings as strings, sorted by key, secrets masked."""
    return jsonify(current_app.config["TSD"].masked())


@bp.route("/version", methods=["GET", "POST"])
def version() -> Response:
    return jsonify(version_info())


def version_info() -> dict[str, Any]:
    """What ``/api/version`` answers (the telnet ``version`` command prints it as text)."""
    return dict(_version_info())


@functools.cache
def _version_info() -> dict[str, Any]:
    # Once per process: getpass.getuser() reads the passwd database (~2 ms), and collectors
    # end every block of lines with `version`.
    return {
        "version": API_VERSION,
        "short_revision": f"pytsd-{__version__}",
        "full_revision": f"pytsd-{__version__}",
        "timestamp": str(STARTED_S),
        "repo_status": "MINT",
        "user": _user(),
        "host": platform.node(),
        "repo": "pytsd",
        "branch": "",
        "pytsd_version": __version__,
    }


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        return ""


@bp.route("/serializers", methods=["GET", "POST"])
def serializers() -> Response:
    return jsonify([{
        "serializer": "json",
        "class": "pytsd.api.JsonSerializer",
        "version": __version__,
        "request_content_type": "application/json",
        "response_content_type": "application/json; charset=UTF-8",
        **SERIALIZER_METHODS,
    }])


@bp.route("/stats", methods=["GET", "POST"])
def stats_list() -> Response:
    return jsonify(stats.collect(current_app.extensions["tsdb"]))


@bp.route("/dropcaches", methods=["GET", "DELETE"])
def dropcaches() -> Response:
    drop_caches(current_app.extensions)
    return jsonify({"message": "Caches dropped", "status": "200"})


def drop_caches(extensions: dict[str, Any]) -> None:
    """Empty this worker's UID caches (and the writer's row-key templates built from them)."""
    extensions["tsdb"].drop_caches()
    extensions.pop("tsdb.writer", None)


@bp.route("/v<version>", defaults={"rest": ""}, methods=["GET", "POST", "PUT", "DELETE"])
@bp.route("/v<version>/<path:rest>", methods=["GET", "POST", "PUT", "DELETE"])
def other_api_version(version: str, rest: str) -> Response:
    """``/api/v1/...`` is ``/api/...``; any other version is refused as OpenTSDB does.

    Only ``v`` then a digit is a version: ``/api/vfoo`` is an unknown endpoint."""
    if not version[:1].isdigit():
        raise NotFoundError("Endpoint not found")
    if not version.isdigit():
        raise BadRequestError("Invalid API version format supplied",
                              f"API version [{version}] cannot be parsed to an integer")
    if int(version) > 1:
        raise TsdbError("Requested API version is greater than the max implemented",
                        f"API version [{version}] is greater than the max [1]", code=501)
    raise NotFoundError("Endpoint not found")
