"""pytsd: an OpenTSDB-compatible time-series server over OpenTSDB's own HBase tables.

Importing the package stays light (no Flask, no storage), so the pure core under
``app.query``, ``app.engine`` and ``app.storage.codec`` can be used on its own.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flask import Flask

__version__ = "0.1.0"

# Allocations of container objects between two young collections (CPython's default: 700). A
# cold read of 24,000 hour rows makes ~240,000 of them and keeps ~50,000 (the hour cache's
# entries); at 700 that set off three full collections per query, each walking every object
# of the process (~0.1 s of a ~0.5 s query; docs/performance.md). At 50,000 a full collection
# comes every few dozen queries. Almost everything a query allocates is freed by reference
# counting, so few cycles wait longer for collection.
GC_YOUNG_ALLOCATIONS = 50_000


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Build the WSGI application.

    :param config: settings by OpenTSDB key name, overriding the file and environment
        (tests pass ``{"tsd.storage": "sqlite:///..."}``).
    """
    from app import api, ui
    from app.api import errors, security
    from app.api.flask_app import TsdFlask
    from app.config import load_config
    from app.meta.tree_builder import attach_tree_processing
    from app.routing import OpenTsdbPaths
    from app.storage import describe_storage
    from app.tsdb import TSDB

    gc.set_threshold(GC_YOUNG_ALLOCATIONS, *gc.get_threshold()[1:])
    app = TsdFlask(__name__)
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.config["TSD"] = tsd_config = load_config(config)
    # Werkzeug refuses (413) a body longer than this before reading it, even chunked.
    app.config["MAX_CONTENT_LENGTH"] = tsd_config["tsd.http.request.max_body_bytes"] or None
    app.extensions["tsdb"] = tsdb = TSDB(tsd_config)
    attach_tree_processing(tsdb)
    if tsdb.compaction_queue is not None:
        # create_app runs in each gunicorn worker (no preload), so this thread is per worker.
        from app.tsdb.compaction import run_in_background

        run_in_background(tsdb.compaction_queue, tsd_config["tsd.storage.compaction.interval_s"])
        # A read-only node (tsd.mode=ro) writes nothing, the fleet's compaction included.
        if tsd_config["tsd.storage.compaction.sweep"] and tsd_config["tsd.mode"] != "ro":
            from app.tsdb.compaction_sweep import CompactionSweep, run_sweep_in_background

            sweep = CompactionSweep(tsdb)
            tsdb.background_stats.append(sweep.stat_lines)
            run_sweep_in_background(sweep)
    if tsdb.rollup_config is not None and tsd_config["tsd.rollups.compute.background"]:
        from app.tsdb.rollups import RollupPass, run_rollups_in_background

        run_rollups_in_background(RollupPass(tsdb), tsd_config["tsd.rollups.compute.interval_s"])
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("app").info("storage: %s", describe_storage(tsd_config))
    errors.init_app(app)
    app.url_map.strict_slashes = False  # "/x/" rules also answer "/x"; /api paths: below
    app.wsgi_app = OpenTsdbPaths(app.wsgi_app)  # type: ignore[method-assign]
    app.register_blueprint(api.bp, url_prefix="/api")
    app.register_blueprint(api.bp, url_prefix="/api/v1", name="api_v1")
    app.register_blueprint(ui.bp)
    security.init_app(app)  # after the blueprints: CORS answers preflights first
    from plugin.http import mount_routes

    mount_routes(app, tsdb.plugins)
    _strip_in_background(tsdb)
    return app


def _strip_in_background(tsdb: Any) -> None:
    """One copy of the kept hours by the server's background work (``app.tsdb.hour_strip``);
    a read-only node writes nothing."""
    from app.tsdb.hour_strip import HourStrip, run_strip_in_background, wanted

    if wanted(tsdb.config) and tsdb.config["tsd.mode"] != "ro":
        run_strip_in_background(HourStrip(tsdb))
