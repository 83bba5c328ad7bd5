"""Page routes."""

from __future__ import annotations

from flask import render_template

from app import __version__
from app.ui import bp


@bp.get("/")
def home() -> str:
    return render_template("ui/home.html", version=__version__)


@bp.get("/annotations")
def annotations_page() -> str:
    """The annotation manager: a static page that talks only to the public HTTP API."""
    return render_template("ui/annotations.html", version=__version__)
