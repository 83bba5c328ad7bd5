"""Page routes. Settings the scripts need travel as ``data-*`` attributes of ``<body>``."""

from __future__ import annotations

from flask import current_app, render_template

from app import __version__
from app.ui import bp
from app.ui.docs import docs_available


def _page(template: str) -> str:
    settings = current_app.config["TSD"]
    return render_template(template, version=__version__,
                           grafana_url=settings["tsd.ui.grafana_url"].rstrip("/"),
                           docs=docs_available())


@bp.get("/")
def home() -> str:
    """The query explorer: sub-queries, a chart with notes, the equivalent API call."""
    return _page("ui/home.html")


@bp.get("/annotations")
def annotations_page() -> str:
    """The annotation manager."""
    return _page("ui/annotations.html")
